"""One request stream to two engines at once (``loadgen.run_pair``): the second is "the service
being replaced", a vLLM stand-in serving with ``--api-key`` (vLLM's AuthenticationMiddleware: /v1
needs the Bearer token). The key reaches it through the load generator's environment only: never
in a spec, a record, a raw file or an error."""

from __future__ import annotations

import json
from dataclasses import asdict, replace
from types import SimpleNamespace

import pytest

from tasks.adapters.loadgen import LoadSpec, run_load, run_pair
from tasks.errors import ConfigError
from tasks.planning.paired_windows import Span, split

CANARY = "sk-canary-7f3c1e9a5b"


def _engine(launcher, name: str, *extra: str) -> str:
    port = launcher.port()
    proc = launcher.start(["vllm", "serve", "pdlift/tiny", "--served-model-name", "m", "--port", str(port), *extra],
                          name, launcher.env())
    proc.wait_http(f"http://127.0.0.1:{port}/health")
    return f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def engines(module_engine_launcher) -> tuple[str, str]:
    return (_engine(module_engine_launcher, "candidate"),
            _engine(module_engine_launcher, "old-service", "--api-key", CANARY))


def _spec(url: str, **kw) -> LoadSpec:
    return LoadSpec(base_url=url, scenario="s", input_tokens=200, output_tokens=4, concurrency=2, duration_s=3.0,
                    max_requests=400, warmup_requests=2, seed=11, salt=4242, **kw)


def test_both_engines_serve_the_same_stream_at_once_and_the_key_is_nowhere_in_what_comes_back(engines):
    candidate, old = engines
    ours = _spec(candidate, model="m")
    mine, theirs = run_pair(ours, replace(ours, base_url=old, model=None), CANARY)
    assert mine.records and theirs.records and theirs.model == "m"
    assert all(r.completed for r in (*mine.records, *theirs.records))
    # One clock: their measured windows overlap for most of the point, so windows can be cut.
    cut = split(mine.records, Span.of(mine.records, mine.duration_s), theirs.records,
                Span.of(theirs.records, theirs.duration_s), 0.5)
    assert cut.span_s > 2.0 and len(cut.windows["ttft"]) >= 2, cut
    assert all(w.candidate_n and w.baseline_n for w in cut.windows["ttft"])
    assert CANARY not in json.dumps(asdict(mine)) + json.dumps(asdict(theirs))


def test_without_the_key_the_old_service_refuses_and_the_error_names_no_key(engines):
    _, old = engines
    with pytest.raises(ConfigError, match="answered 401") as refused:
        run_load(_spec(old))
    assert CANARY not in str(refused.value)
    with pytest.raises(ConfigError, match="answered 401"):
        run_load(_spec(old), "sk-wrong-key-000")


def test_a_paired_gate_against_the_endpoint_reads_its_key_from_the_named_variable_and_says_which_is_missing():
    from tasks.benchmark import _paired_with

    endpoint = SimpleNamespace(url="http://127.0.0.1:9/", api_key_env="OLD_SERVICE_API_KEY")
    bp = SimpleNamespace(name="d", baseline=SimpleNamespace(endpoint=endpoint))
    url, key, what = _paired_with(SimpleNamespace(bp=bp, environ={"OLD_SERVICE_API_KEY": CANARY}), "endpoint")
    assert (url, key) == ("http://127.0.0.1:9/", CANARY) and CANARY not in what
    with pytest.raises(ConfigError, match="OLD_SERVICE_API_KEY is not set on this worker") as missing:
        _paired_with(SimpleNamespace(bp=bp, environ={}), "endpoint")
    assert "baseline.endpoint.api_key_env" in str(missing.value)
