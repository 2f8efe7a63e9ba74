"""`pdlift fabric parse KIND FILE [--json]`: operators read saved tool output with the stage's parsers."""

from __future__ import annotations

import json

import pytest

from cli.main import main
from tests.unit.parsing.samples import OUTPUTS


def test_parse_nccl_json_prints_rows_hard_failures_and_evidence(capsys):
    assert main(["fabric", "parse", "nccl", str(OUTPUTS / "nccl_allreduce_pair_wrong.txt"), "--json"]) == 0
    parsed = json.loads(capsys.readouterr().out)
    assert parsed["rows"] and any("wrong elements" in r for r in parsed["hard_failures"])


def test_parse_nccl_summary_names_the_failure(capsys):
    assert main(["fabric", "parse", "nccl", str(OUTPUTS / "nccl_allreduce_pair_wrong.txt")]) == 0
    out = capsys.readouterr().out
    assert "FAIL:" in out and "busbw" in out


@pytest.mark.parametrize(("kind", "sample", "expect"), [
    ("pingpong", "fi_pingpong_modal_2x_h100.txt", "fi_pingpong:"),
    ("fi_info", "fi_info_p5en_16_nics.txt", "16 efa device(s)"),
    ("nvidia_smi", "nvidia_smi_query_p5en.csv", "8 GPU(s)"),
])
def test_parse_summarises_each_tool(kind, sample, expect, capsys):
    assert main(["fabric", "parse", kind, str(OUTPUTS / sample)]) == 0
    assert expect in capsys.readouterr().out


def test_unreadable_input_is_a_parse_error_not_a_traceback(tmp_path, capsys):
    junk = tmp_path / "junk.txt"
    junk.write_text("this is not fi_info output\n")
    assert main(["fabric", "parse", "fi_info", str(junk)]) == 1
    assert "ParseError" in capsys.readouterr().err


def test_a_missing_file_is_bad_input(capsys):
    assert main(["fabric", "parse", "nccl", "/nonexistent/pdlift-nccl.txt"]) == 2
    assert "cannot read" in capsys.readouterr().err
