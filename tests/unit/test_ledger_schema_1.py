"""Ledgers written by the previous pdlift (schema 1) and stored ledgers that are incomplete or not
ledgers at all (``tasks.planning.ledger``): what a resumed run finds in them, field by field, and
what the refusal says."""

from __future__ import annotations

import copy
import datetime as dt
import json
from pathlib import Path

import pytest

from tasks.planning.ledger import Ledger, LedgerEntry, LedgerFormatError, generation_entry, generations, render_markdown
from tasks.planning.identity import Generation
from tasks.planning.records import Deployed, Handover, Replacement

V1 = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "ledger-v1-migrated.json").read_text())


def v1(**outputs) -> dict:
    data = copy.deepcopy(V1)
    for stage, fields in outputs.items():
        data["outputs"][stage] = {**data["outputs"][stage], **fields}
    return data


def test_a_schema_1_fabric_record_keeps_its_replacements_failure_time_passes_and_results():
    fabric = Ledger.from_dict(v1(fabric={"passed": False, "failure": "pair a<->b below its floor", "seconds": 12.5,
                                         "passes": 2, "results": "runs/x/fabric",
                                         "replaced": [{"old": "i-1", "new": "i-2"}]})).records["fabric"]
    assert (fabric.passed, fabric.failure, fabric.seconds, fabric.passes, fabric.results) == (
        False, "pair a<->b below its floor", 12.5, 2, "runs/x/fabric")
    assert fabric.replaced == (Replacement("i-1", "i-2"),)


def test_a_schema_1_fabric_record_with_only_its_verdict_reads_the_defaults():
    data = copy.deepcopy(V1)
    data["outputs"]["fabric"] = {"passed": True}
    fabric = Ledger.from_dict(data).records["fabric"]
    assert (fabric.failure, fabric.seconds, fabric.passes, fabric.results, fabric.replaced) == (None, 0.0, 0, "", ())


def test_a_schema_1_deploy_record_keeps_every_field_and_splits_the_router_service():
    deployed = Ledger.from_dict(v1(deploy={"live_colour": "green", "router_service": "team/a/router-blue"})).deployed()
    assert deployed == Deployed(V1["deployment"], "blue", "green", "sandbox-2p2d-blue", "team/a", "router-blue",
                                {"ready": 0.0, "router": 0.0, "scheduled": 0.635, "started": 2.061}, 3.891,
                                V1["outputs"]["deploy"]["canary"], "e0b21c6fd93a")


def test_a_schema_1_deploy_record_with_only_its_colour_reads_the_defaults():
    data = copy.deepcopy(V1)
    data["outputs"]["deploy"] = {"colour": "blue"}
    assert Ledger.from_dict(data).deployed() == Deployed(V1["deployment"], "blue", None, "", "", "", {}, 0.0, "", "")


def test_a_schema_1_stage_done_without_an_output_runs_again_and_the_next_ones_still_load():
    data = copy.deepcopy(V1)
    del data["outputs"]["reserve"]
    ledger = Ledger.from_dict(data)
    assert "reserve" not in ledger.records and ledger.stages_done[:2] == ("launch", "fabric")


def test_a_schema_1_ledger_without_stages_or_entries_is_an_empty_run():
    ledger = Ledger.from_dict({"deployment": "d", "run_id": "r", "created_at": "2026-11-29T10:00:00Z"})
    assert (ledger.records, ledger.entries) == ({}, ())


def test_a_stored_ledger_without_entries_has_none():
    ledger = Ledger.from_dict({"schema": 2, "deployment": "d", "run_id": "r", "created_at": "2026-11-29T10:00:00Z"})
    assert (ledger.records, ledger.entries) == ({}, ())


def test_a_schema_1_fabric_record_without_the_launch_it_validated_is_refused_saying_so():
    data = copy.deepcopy(V1)
    del data["outputs"]["launch"]
    with pytest.raises(LedgerFormatError) as caught:
        Ledger.from_dict(data)
    assert str(caught.value) == ("ledger of schema 1 does not fit its format: a fabric record without the launched "
                                 "fleet it validated")


def test_a_stored_ledger_missing_a_field_names_it():
    with pytest.raises(LedgerFormatError) as caught:
        Ledger.from_dict({"schema": 2, "run_id": "r", "created_at": "2026-11-29T10:00:00Z"})
    assert str(caught.value) == "ledger of schema 2 does not fit its format: 'deployment'"


@pytest.mark.parametrize("data", [[], "ledger", None])
def test_a_document_that_is_not_an_object_is_refused_as_no_ledger(data):
    with pytest.raises(LedgerFormatError) as caught:
        Ledger.from_dict(data)  # type: ignore[arg-type]
    assert str(caught.value) == "a ledger is a JSON object"


def test_a_fleet_updates_handover_is_read_back_from_the_ledger():
    handover = Handover("r2", "green", "blue", "switched")
    assert Ledger("d", "r", "2026-11-29T10:00:00Z").with_record(handover).handover() == handover
    assert Ledger("d", "r", "2026-11-29T10:00:00Z").handover() is None


def test_generations_are_read_past_the_resources_recorded_before_them():
    at = dt.datetime(2026, 11, 29, 10, 5, tzinfo=dt.timezone.utc)
    ledger = Ledger("d", "r", "2026-11-29T10:00:00Z").with_entry(LedgerEntry("instance", "i-1", "launch")) \
        .with_entry(generation_entry("launch", Generation(2, at), "launch", ""))
    assert generations(ledger) == {"launch": Generation(2, at)}


def test_the_cost_table_is_markdown_with_blank_lines_around_its_tables():
    ledger = Ledger("d", "r1", "2026-11-29T10:00:00Z").with_entry(
        LedgerEntry("instance", "i-1", "launch", "z", 1.0, 0.0, "2026-11-29T10:00:00Z", "2026-11-29T11:00:00Z"))
    assert render_markdown(ledger, dt.datetime(2026, 11, 29, 12, tzinfo=dt.timezone.utc)) == (
        "## Cost ledger: d run r1\n"
        "\n"
        "| resource | kind | stage | zone | $/h | upfront $ | started | ended | cost $ |\n"
        "|---|---|---|---|---|---|---|---|---|\n"
        "| i-1 | instance | launch | z | 1.00 | 0.00 | 2026-11-29T10:00:00Z | 2026-11-29T11:00:00Z | 1.00 |\n"
        "\n"
        "| stage | spend $ |\n"
        "|---|---|\n"
        "| launch | 1.00 |\n"
        "\n"
        "Still billing: $0.00/h\n")


def test_an_end_time_is_written_in_utc_on_a_machine_set_to_another_zone(india_clock):
    ledger = Ledger("d", "r", "2026-11-29T10:00:00Z").with_entry(
        LedgerEntry("instance", "i-1", "launch", started_at="2026-11-29T10:00:00Z"))
    ended = ledger.ended("instance", "i-1", dt.datetime(2026, 11, 29, 11, 30, tzinfo=dt.timezone.utc))
    assert ended.entries[0].ended_at == "2026-11-29T11:30:00Z"
