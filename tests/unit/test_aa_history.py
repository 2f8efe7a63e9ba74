"""The A/A history in the state directory: which build a colour runs, an unchanged build's offsets
recorded beside its baseline, and the recorded baseline read back with their spread."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from blueprints.loader import load_blueprint
from tasks.errors import ConfigError
from tasks.planning.bench_baseline import baseline_from_summaries
from tasks.planning.gate import GateReport, Verdict
from tasks.planning.manifests.common import REVISION_LABEL
from tasks.planning import aa_offsets
from tasks.stages import aa_history
from tests.unit.bench.helpers import run

BP = load_blueprint(Path(__file__).resolve().parents[2] / "blueprints" / "sandbox-2p2d.yaml")
NOW = dt.datetime(2026, 12, 7, tzinfo=dt.timezone.utc)
PASSED = GateReport(Verdict.PASS, (), (), 0.95, 12, 0.01, "recorded", "run-a", 1)
FAILED = GateReport(Verdict.FAIL, ("tpot_mean",), (), 0.95, 12, 0.01, "recorded", "run-a", 1)


class Lws:
    """Reads LeaderWorkerSets as the kube adapter answers: the object, or None when absent."""

    def __init__(self, labels: dict[str, str | None]):
        self.labels = labels

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> dict | None:
        assert kind == "LeaderWorkerSet" and namespace and namespace.endswith("blue")
        label = self.labels.get(name)
        return None if label is None else {"metadata": {"labels": {REVISION_LABEL: label} if label else {}}}


def test_the_build_is_the_revision_both_roles_run_and_none_part_way_through_a_roll():
    assert aa_history.measured_build(BP, Lws({"prefill": "abc", "decode": "abc"}), "blue") == \
        f"abc/{aa_offsets.workload(BP)}"
    # Other prompts under the same name measure another workload: no A/A comparison.
    longer = BP.model_copy(update={"benchmark": BP.benchmark.model_copy(update={"scenarios": [
        BP.benchmark.scenarios[0].model_copy(update={"input_tokens": BP.benchmark.scenarios[0].input_tokens + 1})]})})
    assert aa_offsets.workload(longer) != aa_offsets.workload(BP)
    assert aa_history.measured_build(BP, Lws({"prefill": "abc", "decode": "def"}), "blue") == ""
    assert aa_history.measured_build(BP, Lws({"prefill": "abc"}), "blue") == ""
    assert aa_history.measured_build(BP, Lws({"prefill": "", "decode": ""}), "blue") == ""


def _baseline(build: str | None = "rev1"):
    return baseline_from_summaries([run(240, seed=1, concurrency=4)], source="recorded", run_id="run-a",
                                   blueprint=BP.name, build=build)


def test_an_unchanged_build_is_recorded_once_per_deploy_and_the_baseline_reads_its_spread(tmp_path):
    base = _baseline()
    assert aa_history.with_history(tmp_path, base) == base            # no history yet: nothing added
    cand = [run(240, seed=2, concurrency=4, ttft_ms=126.0)]
    done, why = aa_history.record_offsets(tmp_path, BP, cand, base, "rev1", "run-a/g2", PASSED, now=NOW)
    assert why == "" and done.baseline_run_id == "run-a" and done.created_at == "2026-12-07T00:00:00Z"
    assert aa_history.history_path(tmp_path, BP.name) == tmp_path / "aa-offsets" / f"{BP.name}.json"
    # Judged again for the same deploy: its entry is replaced, not doubled.
    aa_history.record_offsets(tmp_path, BP, cand, base, "rev1", "run-a/g2", PASSED, now=NOW)
    aa_history.record_offsets(tmp_path, BP, cand, base, "rev1", "run-a/g3", PASSED, now=NOW)
    # A FAIL of the same build is a fault: said why, nothing added.
    done, why = aa_history.record_offsets(tmp_path, BP, cand, base, "rev1", "run-a/g4", FAILED, now=NOW)
    assert done is None and "FAILed" in why
    assert [c.key for c in aa_history.read_history(tmp_path, BP.name)] == ["run-a/g2", "run-a/g3"]
    spread = aa_history.with_history(tmp_path, base).entries[0].between
    assert set(spread) == {"ttft_mean", "tpot_mean", "e2e_mean"} and 1.0 <= spread["ttft_mean"][1] <= 2.0
    assert spread["ttft_mean"][0] > 0                                  # a 5% offset is more than its noise


def test_another_build_or_an_unbuilt_baseline_records_nothing(tmp_path):
    cand = [run(240, seed=2, concurrency=4)]
    assert aa_history.record_offsets(tmp_path, BP, cand, _baseline(), "rev2", "run-b/g1", PASSED) == (None, "")
    assert aa_history.record_offsets(tmp_path, BP, cand, _baseline(None), "rev1", "run-b/g1", PASSED) == (None, "")
    assert not aa_history.history_path(tmp_path, BP.name).exists()
    assert aa_history.with_history(tmp_path, _baseline(None)) == _baseline(None)


def test_a_damaged_history_names_its_file_and_the_fix(tmp_path):
    path = aa_history.history_path(tmp_path, BP.name)
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    with pytest.raises(ConfigError, match=f"{path}: the A/A history is malformed .*delete it"):
        aa_history.with_history(tmp_path, _baseline())
