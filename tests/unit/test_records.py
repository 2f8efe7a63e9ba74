"""Stage records and the ledger that keeps them: one serializer, a schema version, one fleet."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from tasks.adapters.ledger_store import LedgerStore
from tasks.errors import ConfigError, FabricCheckFailed
from tasks.planning import records
from tasks.planning.ledger import SCHEMA_VERSION, Ledger, LedgerEntry, LedgerFormatError
from tasks.planning.records import (Deployed, FabricVerdict, Fleet, GateResult, GateVerdict, Node, NodeWeights,
                                    Promotion, Replacement, Reserved, Retired, StagedWeights, TornDown)

V1_LEDGER = Path(__file__).resolve().parents[1] / "fixtures" / "ledger-v1-migrated.json"

NODES = (Node("i-a", "10.0.0.1", "prefill", ("ssh-ed25519 AAAA",), "ip-a", "us-east-2a", ("nn-1", "nn-2", "nn-3")),
         Node("i-b", "10.0.0.2", "decode", (), "ip-b", "us-east-2a", ("nn-1", "nn-2", "nn-4")))
FLEET = Fleet(NODES, "lt-1", 3, ())
REPLACED = replace(FLEET, nodes=(NODES[0], replace(NODES[1], instance_id="i-c")), replaced=("i-b",))
ONE_OF_EACH = [
    Reserved("cr-1", "us-east-2a", "pg-1", False, ("us-east-2b: InsufficientInstanceCapacity",), False),
    FLEET,
    FabricVerdict(True, None, 35.0, 2, "state/fabric", (Replacement("i-b", "i-c", "slow link"),), REPLACED),
    StagedWeights((NodeWeights("i-a", 100, 40, 1.5), NodeWeights("i-c", 100, 100, 2.0))),
    Deployed("d", "green", "blue", "d-green", "d", "router-green", {"scheduled": 0.5}, 3.9, "canary ok", "g1"),
    GateResult("promoted", "gate PASS", GateVerdict("PASS", ("all passed",), "p.png", "g.json", "r.json"),
               Promotion("green", "blue", ("http://10.0.0.9:8080",), "b.json"), Retired("blue", 0, ("Namespace d-blue",))),
    GateResult("promoted", "approved", GateVerdict("INCONCLUSIVE", (), "", "", ""), Promotion("blue", None, ())),
    TornDown(7),
]


@pytest.mark.parametrize("record", ONE_OF_EACH, ids=lambda r: type(r).__name__)
def test_every_stage_record_reads_back_as_the_same_value_through_plain_json(record):
    stored = json.loads(json.dumps(records.to_dict(record)))
    assert records.record_for(records.stage_of(record), stored) == record


def test_a_whole_number_where_a_float_is_expected_reads_as_a_float():
    # JSON writes 35.0 as 35 in some writers (and schema 1 ledgers were written by hand-built dicts)
    staged = records.record_for("weights", {"nodes": [{"node": "i-a", "bytes_total": 9, "bytes_fetched": 9,
                                                       "seconds": 2}]})
    assert staged.nodes[0].seconds == 2.0 and isinstance(staged.nodes[0].seconds, float)


def test_each_record_type_belongs_to_one_stage_and_the_pipeline_is_in_order():
    assert [records.stage_of(r) for r in ONE_OF_EACH[:6]] == list(records.PIPELINE)
    assert records.stage_of(TornDown(0)) == "teardown"
    with pytest.raises(TypeError):
        records.stage_of({"reservation_id": "cr-1"})


def test_a_record_filed_under_the_wrong_stage_or_with_a_stray_field_is_refused_naming_the_field():
    with pytest.raises(ValueError, match="Reserved: unknown field"):
        records.record_for("reserve", records.to_dict(FLEET))
    with pytest.raises(ValueError, match=r"Fleet\.nodes\[0\]\.instance_id: expected str"):
        records.record_for("launch", {**records.to_dict(FLEET), "nodes": [{**records.to_dict(NODES[0]),
                                                                          "instance_id": 7}]})
    with pytest.raises(ValueError, match="Reserved"):
        records.record_for("reserve", {"reservation_id": "cr-1"})  # the rest is required
    with pytest.raises(ValueError, match="unknown stage"):
        records.record_for("promote", {})


def test_the_stored_ledger_carries_its_schema_version_and_reads_back_equal():
    ledger = Ledger("d", "r1", "2026-11-29T10:00:00Z", (LedgerEntry("instance", "i-a", "launch"),))
    for record in ONE_OF_EACH[:6]:
        ledger = ledger.with_record(record)
    stored = json.loads(json.dumps(ledger.to_dict(), sort_keys=True))  # as the store writes it
    assert stored["schema"] == SCHEMA_VERSION == 2 and set(stored["records"]) == set(records.PIPELINE)
    assert Ledger.from_dict(stored) == ledger
    assert Ledger.from_dict(stored).stages_done == records.PIPELINE  # pipeline order, not the file's


def test_a_ledger_of_a_newer_schema_is_refused_and_the_store_names_the_file_and_keeps_it(tmp_path):
    newer = {**Ledger("d", "r9", "2026-11-29T10:00:00Z").to_dict(), "schema": SCHEMA_VERSION + 1}
    with pytest.raises(LedgerFormatError, match="schema 3"):
        Ledger.from_dict(newer)
    store = LedgerStore(tmp_path)
    path = tmp_path / "runs" / "d" / "r9.json"  # where the local store keeps it
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(newer))
    with pytest.raises(ConfigError, match=rf"{path}.*schema 3.*Move it aside"):
        store.load("d", "r9")
    assert json.loads(path.read_text()) == newer  # refused, never rewritten
    path.write_text("{not json")
    with pytest.raises(ConfigError, match=str(path)):
        store.load("d", "r9")


def test_a_ledger_written_by_the_previous_pdlift_loads_as_typed_records():
    # tests/fixtures/ledger-v1-migrated.json: what `scripts/demo` left after a full migrate, before
    # the records existed (schema 1: stages_done and untyped outputs).
    old = json.loads(V1_LEDGER.read_text())
    assert "schema" not in old
    ledger = Ledger.from_dict(old)
    assert ledger.stages_done == ("reserve", "launch", "fabric", "weights", "deploy", "benchmark")
    launched = [n["instance_id"] for n in old["outputs"]["launch"]["nodes"]]
    assert ledger.fleet().instance_ids() == launched and ledger.fleet().nodes[0].network_nodes
    assert ledger.reserved().reservation_id == old["outputs"]["reserve"]["reservation_id"]
    assert ledger.records["fabric"].passed and ledger.records["fabric"].fleet == ledger.records["launch"]
    weights = ledger.records["weights"]
    assert weights.bytes_fetched == old["outputs"]["weights"]["bytes_fetched"] > 0
    deployed = ledger.deployed()
    assert (deployed.colour, deployed.router, deployed.generation) == (
        "blue", old["outputs"]["deploy"]["router_service"], old["outputs"]["deploy"]["generation"])
    gate = ledger.gate()
    assert gate.outcome == "promoted" and gate.promotion.colour == "blue" and gate.gate.outcome == "PASS"
    assert len(ledger.entries) == len(old["entries"])
    again = Ledger.from_dict(json.loads(json.dumps(ledger.to_dict())))
    assert again == ledger  # saved in the new format, it reads back the same


def test_recording_a_stage_again_drops_what_later_stages_did_on_its_predecessor():
    ledger = Ledger("d", "r", "2026-11-29T10:00:00Z")
    for record in ONE_OF_EACH[:6]:
        ledger = ledger.with_record(record)
    relaunched = ledger.with_record(replace(FLEET, nodes=(replace(NODES[0], instance_id="i-new"), NODES[1])))
    assert relaunched.stages_done == ("reserve", "launch")
    assert "i-new" in relaunched.fleet().instance_ids()
    redeployed = ledger.with_record(replace(ONE_OF_EACH[4], colour="blue"))
    assert redeployed.stages_done == ("reserve", "launch", "fabric", "weights", "deploy")
    assert ledger.with_record(TornDown(3)).stages_done == (*records.PIPELINE, "teardown")


def test_recording_the_same_resources_again_keeps_what_later_stages_did():
    ledger = Ledger("d", "r", "2026-11-29T10:00:00Z")
    for record in ONE_OF_EACH[:6]:
        ledger = ledger.with_record(record)
    adopted = ledger.with_record(replace(ONE_OF_EACH[0], adopted=True))  # `pdlift reserve` again
    assert adopted.stages_done == records.PIPELINE and adopted.reserved().adopted
    relaunched = ledger.with_record(replace(FLEET, shared_layer=2))      # the same instances
    assert relaunched.stages_done == records.PIPELINE
    other = ledger.with_record(replace(ONE_OF_EACH[0], reservation_id="cr-2"))
    assert other.stages_done == ("reserve",)


def test_a_failed_fabric_verdict_keeps_the_fleet_it_leaves_and_stops_the_run():
    failed = replace(ONE_OF_EACH[2], passed=False, failure="pairwise: node i-c is ISOLATE")
    ledger = Ledger("d", "r", "2026-11-29T10:00:00Z").with_record(FLEET).with_record(failed)
    assert ledger.fleet() == REPLACED  # the replacement is what the run holds now
    with pytest.raises(FabricCheckFailed, match="node i-c is ISOLATE"):
        failed.raise_for_failure()
    ONE_OF_EACH[2].raise_for_failure()  # a passed one does not raise


def test_the_current_fleet_is_the_one_after_fabric_replacements():
    launched = Ledger("d", "r", "2026-11-29T10:00:00Z").with_record(FLEET)
    assert launched.fleet() == FLEET
    validated = launched.with_record(ONE_OF_EACH[2])
    assert validated.fleet() == REPLACED and validated.records["launch"] == FLEET
