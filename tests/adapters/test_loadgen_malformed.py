"""An engine (or a proxy in front of it) that answers badly costs the benchmark requests, never
the benchmark: each bad answer is one request counted as failed, and the load point completes.

A real socket server on 127.0.0.1 (one thread per connection, every connection closed after one
answer) misbehaves by the first path segment of the URL it is asked: ``http://HOST/CASE`` is the
load generator's base URL, so ``/CASE/v1/completions`` streams and ``/CASE/tokenize`` counts.
"""

from __future__ import annotations

import asyncio
import json
import socket
import socketserver
import struct
import threading
import time
from collections.abc import Callable

import aiohttp
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from blueprints.schema import SloSpec
from tasks.adapters.loadgen import LoadSpec, run_load
from tasks.adapters.loadgen_http import MAX_EVENT_BYTES, payload, sent_trace, stream_request
from tasks.adapters.loadgen_run import run_in_process
from tasks.errors import ConfigError, RemoteUnavailable
from tasks.planning.metrics import summarize

OK_EVENTS = [b'data: {"choices":[{"index":0,"text":" w"}]}', b'data: {"choices":[{"index":0,"text":" w"}]}',
             b'data: {"choices":[],"usage":{"prompt_tokens":8,"completion_tokens":2}}', b"data: [DONE]"]


def _head(status: str = "200 OK", ctype: str = "text/event-stream", extra: str = "") -> bytes:
    return f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nConnection: close\r\n{extra}\r\n".encode()


def _sse(*events: bytes, sep: bytes = b"\n\n") -> bytes:
    return b"".join(e + sep for e in events)


def _reset(sock: socket.socket) -> None:
    """Close with a TCP RST instead of a FIN (SO_LINGER 0)."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def _send(data: bytes) -> Callable[[socket.socket], None]:
    return lambda sock: sock.sendall(data)


def _then_reset(data: bytes) -> Callable[[socket.socket], None]:
    def answer(sock: socket.socket) -> None:
        sock.sendall(data)
        time.sleep(0.05)
        _reset(sock)
    return answer


def _chunked(*pieces: bytes, end: bool) -> bytes:
    body = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces)
    return _head(extra="Transfer-Encoding: chunked\r\n") + body + (b"0\r\n\r\n" if end else b"")


HALF_EVENT = b'data: {"choices":[{"index":0,"te'

# case -> (what /v1/completions answers, what each request's error must contain, alternatives
# separated by |; None: no error)
CASES: dict[str, tuple[Callable[[socket.socket], None], str | None]] = {
    "ok": (_send(_head() + _sse(*OK_EVENTS)), None),
    "crlf": (_send(_head() + _sse(*OK_EVENTS, sep=b"\r\n\r\n")), None),  # legal SSE line ends
    "http-500": (_send(_head("500 Internal Server Error", "application/json", "Content-Length: 31\r\n")
                       + b'{"error": {"message": "boom!"}}'), "HTTP 500: boom!"),
    "http-503-empty": (_send(_head("503 Service Unavailable", "text/plain", "Content-Length: 0\r\n")), "HTTP 503"),
    "http-429-binary": (_send(_head("429 Too Many Requests", "application/octet-stream", "Content-Length: 4\r\n")
                              + b"\xff\xfe\x00\x01"), "429"),
    "empty-200": (_send(_head(extra="Content-Length: 0\r\n")), "without [DONE]"),
    "no-done": (_send(_head() + _sse(*OK_EVENTS[:3])), "without [DONE]"),
    "invalid-json": (_send(_head() + _sse(OK_EVENTS[0], b'data: {"choices": [', b"data: [DONE]")), "JSONDecodeError"),
    "not-utf8": (_send(_head() + _sse(b'data: {"choices":[{"text":"\xff\xfe"}]}', b"data: [DONE]")), "Error"),
    "array-event": (_send(_head() + _sse(b"data: [1, 2]", b"data: [DONE]")), "not a JSON object"),
    "null-event": (_send(_head() + _sse(b"data: null", b"data: [DONE]")), "not a JSON object"),
    "number-event": (_send(_head() + _sse(b"data: 42", b"data: [DONE]")), "not a JSON object"),
    "choices-number": (_send(_head() + _sse(b'data: {"choices": 5}', b"data: [DONE]")), "choices"),
    "choices-of-numbers": (_send(_head() + _sse(b'data: {"choices": [1]}', b"data: [DONE]")), "choices"),
    "usage-number": (_send(_head() + _sse(OK_EVENTS[0], b'data: {"usage": 7}', b"data: [DONE]")), "usage"),
    "usage-infinite": (_send(_head() + _sse(OK_EVENTS[0], b'data: {"usage": {"prompt_tokens": 1e999}}',
                                            b"data: [DONE]")), "usage.prompt_tokens"),
    "usage-list": (_send(_head() + _sse(OK_EVENTS[0], b'data: {"usage": {"completion_tokens": [3]}}',
                                        b"data: [DONE]")), "usage.completion_tokens"),
    "deep-nesting": (_send(_head() + _sse(b"data: " + b"[" * 100_000, b"data: [DONE]")), "nested"),
    "no-boundary": (_send(_head() + b"data: " + b"x" * (MAX_EVENT_BYTES + 1024)), "no event boundary"),
    "error-event": (_send(_head() + _sse(OK_EVENTS[0], b'data: {"error": {"message": "oom"}}', b"data: [DONE]")),
                    "stream error: oom"),
    "truncated-chunked": (_send(_chunked(_sse(OK_EVENTS[0]), HALF_EVENT, end=False)), "Error"),
    "truncated-length": (_send(_head(extra="Content-Length: 4000\r\n") + _sse(OK_EVENTS[0]) + HALF_EVENT), "Error"),
    # a body delimited by the connection's end: aiohttp reads the RST as that end
    "reset-mid-stream": (_then_reset(_head() + _sse(OK_EVENTS[0]) + HALF_EVENT), "Error|without [DONE]"),
    "reset-mid-chunked": (_then_reset(_chunked(_sse(OK_EVENTS[0]), HALF_EVENT, end=False)), "Error"),
    "reset-before-answer": (_reset, "Error"),
    "closed-before-answer": (lambda sock: None, "Error"),
    "not-http": (_send(b"SSH-2.0-OpenSSH_9.6\r\n\r\n"), "Error"),
}


class _Handler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        sock: socket.socket = self.request
        sock.settimeout(10)
        data = b""
        while b"\r\n\r\n" not in data:
            more = sock.recv(65536)
            if not more:
                return
            data += more
        head, body = data.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        length = next((int(h.split(":", 1)[1]) for h in lines if h.lower().startswith("content-length:")), 0)
        while len(body) < length:
            more = sock.recv(65536)
            if not more:
                return
            body += more
        path = lines[0].split()[1]
        case, _, endpoint = path.lstrip("/").partition("/")
        self.server.seen.append(case)  # type: ignore[attr-defined]
        if endpoint == "tokenize":
            tokenize = self.server.tokenize.get(case)  # type: ignore[attr-defined]
            if tokenize is None:
                sock.sendall(_head("404 Not Found", "text/plain", "Content-Length: 0\r\n"))
            else:
                sock.sendall(_head("200 OK", "application/json", f"Content-Length: {len(tokenize)}\r\n") + tokenize)
            return
        if endpoint == "v1/models":
            models = self.server.models[case]  # type: ignore[attr-defined]
            sock.sendall(_head("200 OK", "application/json", f"Content-Length: {len(models)}\r\n") + models)
            return
        if case == "rotate":  # each request the next case, in order
            with self.server.lock:  # type: ignore[attr-defined]
                case = self.server.rotation[self.server.turn % len(self.server.rotation)]  # type: ignore
                self.server.turn += 1  # type: ignore[attr-defined]
        if case == "fuzz":
            sock.sendall(self.server.fuzz_body)  # type: ignore[attr-defined]
            return
        CASES[case][0](sock)


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


@pytest.fixture(scope="module")
def bad_engine():
    server = _Server(("127.0.0.1", 0), _Handler)
    server.seen, server.tokenize, server.models, server.fuzz_body = [], {}, {}, b""
    server.lock, server.turn, server.rotation = threading.Lock(), 0, sorted(CASES)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    yield server, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join(timeout=10)


def _spec(url: str, case: str, **kw) -> LoadSpec:
    values = dict(base_url=f"{url}/{case}", scenario=case, input_tokens=8, output_tokens=2, concurrency=2,
                  duration_s=20.0, max_requests=4, warmup_requests=0, model="m", request_timeout_s=10.0)
    return LoadSpec(**{**values, **kw})


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", sorted(CASES))
def test_each_malformed_answer_is_one_failed_request_and_the_run_completes(bad_engine, case):
    server, url = bad_engine
    result = run_in_process(_spec(url, case))
    s = summarize(result.records, result.duration_s, SloSpec(), result.saturated)
    assert s.requests == 4 and len(result.records) == 4
    expected = CASES[case][1]
    if expected is None:  # the control: the same server, answering well, counts no error
        assert s.failed == 0 and s.completed == 4, [r.error for r in result.records]
        assert all(r.prompt_tokens == 8 and r.completion_tokens == 2 for r in result.records)
    else:
        assert s.failed == 4 and s.completed == 0
        assert all(any(e in r.error for e in expected.split("|")) for r in result.records), \
            [r.error for r in result.records]


@pytest.mark.timeout(120)
def test_a_load_point_in_its_own_process_survives_every_malformed_answer_in_turn(bad_engine):
    # The product's path: run_load starts the child process; one uncaught exception there made
    # the whole point a StageFailed ("the load generator exited 1").
    server, url = bad_engine
    n = len(CASES)
    with server.lock:
        server.turn = 0
    result = run_load(_spec(url, "rotate", concurrency=1, max_requests=2 * n))
    assert len(result.records) == 2 * n
    errors = [r.error for r in result.records]
    good = sum(1 for case in CASES if CASES[case][1] is None)
    assert errors.count(None) == 2 * good, errors
    assert all(r.completed for r in result.records if r.error is None)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("answer", [b'{"count": "many"}', b'{"count": null}', b'{"count": 1e999}',
                                    b'{"count": -1000000000000}', b'{"count": true}', b'{"count": [8]}',
                                    b"[8]", b"not json", b'{"count": 8.5}'])
def test_a_tokenize_answer_that_is_not_a_count_leaves_the_lengths_approximate(bad_engine, answer):
    server, url = bad_engine
    server.tokenize["ok"] = answer
    try:
        result = run_in_process(_spec(url, "ok", max_requests=2))
    finally:
        server.tokenize.pop("ok")
    assert not result.input_lengths_exact
    assert len(result.records) == 2 and all(r.completed for r in result.records)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("models", [b"not json", b'{"data": []}', b'{"data": "m"}', b'{"data": ["m"]}', b"null"])
def test_a_models_answer_without_a_model_is_a_config_error_not_a_crash(bad_engine, models):
    server, url = bad_engine
    server.models["ok"] = models
    with pytest.raises(ConfigError, match="without a model"):
        run_in_process(_spec(url, "ok", model=None))


@pytest.mark.timeout(60)
def test_poisson_without_a_rate_and_no_good_warm_up_is_a_clear_error(bad_engine):
    _, url = bad_engine
    with pytest.raises(RemoteUnavailable, match="no warm-up request succeeded"):
        run_in_process(_spec(url, "invalid-json", mode="poisson", warmup_requests=2))


# --- any stream at all ----------------------------------------------------------------------------

_LEAF = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(), st.text(max_size=5))
_JSON = st.recursive(_LEAF, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                    st.dictionaries(st.text(max_size=5), inner, max_size=3)),
                     max_leaves=8)
_CHOICE = st.fixed_dictionaries({}, optional={
    "index": _JSON, "text": _JSON,
    "delta": st.one_of(_JSON, st.fixed_dictionaries({}, optional={"role": _JSON, "content": _JSON}))})
_CHUNK = st.fixed_dictionaries({}, optional={
    "choices": st.one_of(_JSON, st.lists(st.one_of(_CHOICE, _JSON), max_size=3)),
    "usage": st.one_of(_JSON, st.fixed_dictionaries({}, optional={"prompt_tokens": _JSON,
                                                                   "completion_tokens": _JSON})),
    "error": _JSON})
_EVENT = st.one_of(
    st.one_of(_CHUNK, _JSON).map(lambda v: b"data: " + json.dumps(v).encode()),
    st.just(b"data: [DONE]"), st.just(b": keep-alive"), st.binary(max_size=24),
    st.integers(1, 3000).map(lambda n: b"data: " + b"[" * n))


@st.composite
def _stream(draw) -> bytes:
    sep = draw(st.sampled_from([b"\n\n", b"\r\n\r\n", b"\n", b"\r\n"]))
    body = sep.join(draw(st.lists(_EVENT, max_size=6))) + draw(st.sampled_from([sep, b""]))
    if draw(st.booleans()):
        body = body[:draw(st.integers(0, len(body)))]
    ending = draw(st.sampled_from(["close", "short", "chunked"]))
    if ending == "short":  # the body ends before its Content-Length
        return _head(extra=f"Content-Length: {len(body) + 10}\r\n") + body
    if ending == "chunked":
        return _chunked(body, end=draw(st.booleans())) if body else _chunked(end=True)
    return _head() + body


async def _one(url: str, chat: bool):
    async with aiohttp.ClientSession(trace_configs=[sent_trace()]) as session:
        return await stream_request(session, url, payload("m", "hi", 2, chat), chat, 10.0)


@settings(max_examples=150, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(stream=_stream(), chat=st.booleans())
def test_any_stream_is_a_recorded_outcome_never_an_exception(bad_engine, stream, chat):
    server, url = bad_engine
    server.fuzz_body = stream
    out = asyncio.run(_one(f"{url}/fuzz/v1/completions", chat))
    assert out.end_ts >= out.send_ts and out.completion_tokens >= 0 and out.prompt_tokens >= 0
    if out.error is None:  # a stream counted good said [DONE] and carried no error event
        assert b"data: [DONE]" in stream


def test_a_client_above_90_percent_of_a_core_calls_its_result_saturated_and_at_90_it_does_not():
    # Its own CPU, not the server's, would then be what is measured (loadgen.py's CPU_SATURATED).
    from types import SimpleNamespace

    from tasks.adapters.loadgen_run import _result

    spec = LoadSpec("http://127.0.0.1:1", "short", 100, 8, 1, 1.0, 1)
    prompts = SimpleNamespace(exact=True, note="")

    def result(cpu_s: float):
        return _result(spec, "m", prompts, [], [], None, 0.0, 1.0, cpu_s=cpu_s, cpu_wall_s=1.0, lags=[], window=None)

    busy, at = result(0.91), result(0.90)
    assert busy.saturated and busy.saturation == "client CPU at 91% of a core (> 90%)"
    assert not at.saturated and at.saturation is None
