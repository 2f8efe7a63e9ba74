"""`pdlift plan` sizes the gate: the projected standard error of each ratio check, its chances,
the smallest margin it can certify and the load the written margin needs; `pdlift validate`
refuses a gate that cannot decide unless the blueprint accepts it."""

import json
import math
from pathlib import Path

import pytest
import yaml

from blueprints.loader import parse_blueprint
from tasks.planning.bench_stats import normal_quantile, normal_sf
from tasks.planning.gate_sizing import size_gate
from tests.unit.test_cli_plan import pdlift

SANDBOX = Path(__file__).resolve().parents[2] / "blueprints" / "sandbox-2p2d.yaml"
REFERENCE = SANDBOX.with_name("glm51-fp8-2p2d.yaml")


def _blueprint(rules, *, duration_s=600.0, cv=None, completed=400, point_cv=None, allow=False):
    doc = yaml.safe_load(SANDBOX.read_text())
    doc["benchmark"] = {"repeats": 1, "scenarios": [{"name": "isl-3k", "input_tokens": 3000, "output_tokens": 100,
                                                     "concurrencies": [8], "duration_s": duration_s,
                                                     "max_requests": 100000}]}
    point = {"concurrency": 8, "completed": completed, "ttft_ms_mean": 200, "tpot_ms_mean": 10}
    if point_cv:
        point["cv"] = point_cv
    doc["baseline"] = {"source": "published", "cv": cv or {"ttft": 0.2, "tpot": 0.05},
                       "scenarios": {"isl-3k": [point]}}
    doc["gate"]["rules"] = rules
    doc["gate"]["allow_undecidable"] = allow
    doc["gate"].pop("paired", None)          # the recorded path's checks alone (test_a_paired_... below)
    return doc


def _size(doc):
    return size_gate(parse_blueprint(yaml.safe_dump(doc)))


def test_one_check_is_sized_by_hand():
    # 8 in flight, each request 200 ms + 100 x 10 ms = 1.2 s: 6.67 requests/s, 4,000 in 600 s.
    (check,) = _size(_blueprint([{"metric": "ttft_mean", "max_ratio": 1.05, "critical": True}])).checks
    assert check.requests == 4000 and check.minutes == pytest.approx(10.0)
    se = math.sqrt(0.04 / 4000 + 0.04 / 400)
    assert check.se == pytest.approx(se)
    z_a = normal_quantile(0.95)
    assert check.p_pass_equal == pytest.approx(1 - normal_sf(math.log(1.05) / se - z_a))
    assert check.p_fail_twice == pytest.approx(1 - normal_sf((math.log(1.10) - math.log(1.05)) / se - z_a))
    z_b = normal_quantile(0.9)                       # one check: the gate's power is its own
    assert check.smallest_margin == pytest.approx(math.exp(se * (z_a + z_b)))
    need = (math.log(1.05) / (z_a + z_b)) ** 2 - 0.04 / 400
    assert check.minutes_needed == pytest.approx(0.04 / (8 / 1.2 * need) / 60)
    assert check.decidable


def test_the_figures_own_variance_can_make_a_margin_uncertifiable_at_any_load():
    (check,) = _size(_blueprint([{"metric": "ttft_mean", "max_ratio": 1.05, "critical": True}], completed=30)).checks
    assert math.isinf(check.minutes_needed) and not check.decidable
    assert "never certifiable against this baseline" in check.why


@pytest.mark.parametrize("duration_s, decidable", [(600.0, True), (1.0, False)])
def test_a_check_is_decidable_only_when_its_cap_gives_the_load_it_needs(duration_s, decidable):
    (check,) = [c for c in _size(_blueprint([{"metric": "ttft_mean", "max_ratio": 1.05, "critical": True}],
                                            duration_s=duration_s)).checks if c.metric == "ttft_mean"]
    assert check.decidable is decidable and (check.minutes_needed <= check.minutes) is decidable


def test_every_gated_check_must_pass_so_more_checks_need_more_power_each():
    one = _size(_blueprint([{"metric": "ttft_mean", "max_ratio": 1.05, "critical": True}])).checks[0]
    two = _size(_blueprint([{"metric": "ttft_mean", "max_ratio": 1.05, "critical": True},
                            {"metric": "tpot_mean", "max_ratio": 1.05, "critical": True}],
                           cv={"ttft": 0.2, "tpot": 0.3}, duration_s=30.0))
    ttft, tpot = two.checks
    assert ttft.smallest_margin > one.smallest_margin
    assert two.p_pass_equal == pytest.approx(ttft.p_pass_equal * tpot.p_pass_equal)
    assert two.p_pass_equal < min(ttft.p_pass_equal, tpot.p_pass_equal) - 0.01
    # A FAIL of either critical check fails the gate: each is tested at alpha / 2 (Holm's first step).
    z_fail = normal_quantile(1 - 0.05 / 2)
    assert ttft.p_fail_twice == pytest.approx(1 - normal_sf((math.log(1.10) - math.log(1.05)) / ttft.se - z_fail))


def test_a_point_states_its_own_spread_and_a_rule_without_a_figure_never_passes():
    sized = _size(_blueprint([{"metric": "ttft_mean", "max_ratio": 1.05, "critical": True},
                              {"metric": "ttft_p99", "max_ratio": 1.10}], point_cv={"ttft": 0.01, "tpot": 0.01}))
    mean, p99 = sized.checks
    assert mean.se == pytest.approx(math.sqrt(0.0001 / 4000 + 0.0001 / 400))
    assert not p99.decidable and "publishes no ttft_p99" in p99.why and sized.p_pass_equal is None


def test_validate_refuses_an_undecidable_gate_naming_it_unless_the_blueprint_accepts_it(tmp_path):
    rules = [{"metric": "ttft_mean", "max_ratio": 1.05, "critical": True}]
    path = tmp_path / "undecidable.yaml"
    path.write_text(yaml.safe_dump(_blueprint(rules, completed=30)))
    out = pdlift("validate", str(path))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "cannot be decided within the benchmark's load" in out.stderr
    assert "ttft_mean ≤ 1.05 at isl-3k @ 8: SE" in out.stderr and "never certifiable" in out.stderr
    path.write_text(yaml.safe_dump(_blueprint(rules, completed=30, allow=True)))
    out = pdlift("validate", str(path))
    assert out.returncode == 0 and "warning: gate (allowed by gate.allow_undecidable): ttft_mean" in out.stdout
    plan = pdlift("plan", str(path))
    assert plan.returncode == 0 and "Gate (projected)" in plan.stdout and "never" in plan.stdout
    as_json = pdlift("plan", str(path), "--json")

    def no_constants(name):
        raise AssertionError(f"not JSON: {name}")

    sized = json.loads(as_json.stdout, parse_constant=no_constants)["gate"]
    assert sized["checks"][0]["minutes_needed"] == "never" and sized["checks"][0]["decidable"] is False


def test_a_point_whose_cap_holds_fewer_blocks_than_min_samples_is_named():
    doc = _blueprint([{"metric": "ttft_mean", "max_ratio": 1.05, "critical": True}], duration_s=6.0)
    doc["gate"]["min_samples"] = 6        # 6 s hold 40 requests: 5 blocks of 8
    sized = _size(doc)
    (samples,) = [c for c in sized.checks if c.metric == "completed"]
    assert not samples.decidable and samples.requests == 40
    assert "40 requests in its cap are 5 blocks of 8, under min_samples 6" in samples.why
    doc["gate"]["min_samples"] = 5
    assert not [c for c in _size(doc).checks if c.metric == "completed"]


def test_a_rule_that_needs_more_requests_than_max_requests_is_named():
    doc = _blueprint([{"metric": "ttft_mean", "max_ratio": 1.05, "critical": True}])
    needs = [c for c in _size(doc).checks if c.metric == "ttft_mean"][0]
    wanted = needs.minutes_needed * 60 * 8 / 1.2           # requests the rule needs (6.67 a second)
    doc["benchmark"]["scenarios"][0]["max_requests"] = int(wanted) - 1
    short = [c for c in _size(doc).checks if c.metric == "ttft_mean"][0]
    assert not short.decidable and short.minutes < 11
    doc["benchmark"]["scenarios"][0]["max_requests"] = int(wanted) + 1
    assert [c for c in _size(doc).checks if c.metric == "ttft_mean"][0].decidable


def test_a_paired_check_is_sized_by_hand_from_both_colours_noise_and_its_weights():
    doc = _blueprint([{"metric": "ttft_mean", "max_ratio": 1.05, "critical": True}])
    doc["gate"]["paired"] = {"window_s": 10, "looks": 3, "contracts": {"ttft": 1.02}, "guard": None,
                             "weights": {"ttft": {"isl-3k@8": 2.0}}}
    paired = [c for c in _size(doc).checks if "paired" in c.metric]
    (check,) = paired                                   # one contract; one scenario: no guard
    assert (check.scenario, check.metric, check.rule) == ("all points", "ttft_mean (paired contract)", 1.02)
    # 4,000 requests a colour, each colour's own noise: var(log ratio) = 2 x 0.2^2 / 4000 (the weight
    # of a lone point normalises to 1); no figure's variance, since the baseline is measured too.
    se = math.sqrt(2 * 0.04 / 4000)
    assert check.se == pytest.approx(se) and check.requests == 4000
    from tasks.planning.gate_paired import Levels

    levels = Levels.of(0.05, 3, 2.0, 1)          # the last of 3 looks: what the earlier ones left
    z_a, z_b = normal_quantile(1 - levels.passing[-1]), normal_quantile(0.9)
    assert levels.passing[-1] < 0.05
    assert check.p_pass_equal == pytest.approx(1 - normal_sf(math.log(1.02) / se - z_a))
    assert check.smallest_margin == pytest.approx(math.exp(se * (z_a + z_b)))
    assert check.minutes_needed == pytest.approx(10.0 * (se * (z_a + z_b) / math.log(1.02)) ** 2)
    assert check.decidable is (check.minutes_needed <= 10.0)


def test_a_paired_point_whose_rounds_hold_fewer_than_two_windows_is_named_undecidable():
    doc = _blueprint([{"metric": "ttft_mean", "max_ratio": 1.05, "critical": True}], duration_s=20.0)
    # requests take 1.2 s, so a window is at least 3.6 s; rounds of 20 s / 3 = 6.7 s hold one
    doc["gate"]["paired"] = {"window_s": 1, "looks": 3, "contracts": {"ttft": 1.5}, "guard": None}
    (check,) = [c for c in _size(doc).checks if "paired" in c.metric]
    assert not check.decidable and "rounds of 7 s hold 1 window(s) of at least 3 requests' 1.2 s" in check.why
    doc["benchmark"]["scenarios"][0]["duration_s"] = 21.6            # 7.2 s rounds: two 3.6 s windows
    (check,) = [c for c in _size(doc).checks if "paired" in c.metric]
    assert check.decidable, check.why


def test_the_suggested_gate_decides_and_no_point_can_give_up_load_without_breaking_a_check(tmp_path):
    from blueprints.loader import load_blueprint
    from tasks.planning.gate_suggest import suggest_gate

    doc = yaml.safe_load(REFERENCE.read_text())
    suggestion = suggest_gate(parse_blueprint(yaml.safe_dump(doc)))
    assert suggestion.fits and suggestion.minutes == pytest.approx(sum(suggestion.duration_s.values()) / 60)

    def applied(durations: dict[str, float]):
        changed = dict(doc, gate={**doc["gate"], "paired": suggestion.spec.model_dump(mode="json")})
        changed["benchmark"] = {**doc["benchmark"], "scenarios": [
            {**s, "duration_s": durations[s["name"]]} for s in doc["benchmark"]["scenarios"]]}
        path = tmp_path / "suggested.yaml"
        path.write_text(yaml.safe_dump(changed, sort_keys=False))
        return [c for c in size_gate(load_blueprint(path)).checks if "paired" in c.metric]

    assert all(c.decidable for c in applied(suggestion.duration_s))
    for name in suggestion.duration_s:             # 2% less on any one point: a check or its windows fail
        less = {**suggestion.duration_s, name: suggestion.duration_s[name] * 0.98}
        assert not all(c.decidable for c in applied(less)), name
    weights = suggestion.spec.weights["ttft"]
    assert all(w > 0 for w in weights.values()) and sum(weights.values()) == pytest.approx(1.0, abs=0.01)
    from blueprints.schema import PairedGateSpec   # what it prints pastes into a blueprint as it is

    assert PairedGateSpec(**yaml.safe_load(suggestion.yaml())["gate"]["paired"]) == suggestion.spec
    capped = yaml.safe_load(REFERENCE.read_text())
    capped["benchmark"]["scenarios"][2]["max_requests"] = 20
    with pytest.raises(ValueError, match=r"isl-120k@8 needs about \d+ requests, over its max_requests 20"):
        suggest_gate(parse_blueprint(yaml.safe_dump(capped)))


def test_a_paired_gate_without_published_figures_is_not_sized_and_not_refused():
    doc = _blueprint([{"metric": "ttft_mean", "max_ratio": 1.05, "report_only": True}])
    doc["baseline"] = {"source": "the last promotion's recording"}
    doc["gate"]["paired"] = {"window_s": 1, "looks": 3, "contracts": {"ttft": 1.05, "tpot": 1.05}}
    paired = [c for c in _size(doc).checks if "paired" in c.metric]
    assert len(paired) == 2 and all(c.decidable and c.se is None for c in paired)
    assert {c.metric: "not sized: no published" in c.why for c in paired} == \
        {"ttft_mean (paired contract)": True, "tpot_mean (paired contract)": True}
