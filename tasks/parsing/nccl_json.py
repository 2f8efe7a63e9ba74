"""Parse the ``-J FILE`` JSON document of nccl-tests (v2.18.5+; see ``src/util.cu``).

Shape (JSON_FILE_VERSION 2 and 3; 3, nccl-tests 2.19, adds ``start_time``): ``{"version",
"args", "env", "nccl_version", "config": {..., "devices":
[{rank, group, pid, hostname, device, device_hex, device_info}]}, "results": [{size, count,
type, redop, root, out_of_place: {time, alg_bw, bus_bw, nwrong}, in_place: {...}}],
"out_of_bounds": {count, okay}, "average_bus_bandwidth": {bandwidth, okay}, "errors": [...]}``.
The writer prints booleans as the strings "true"/"false", ``root`` as a padded string and NaN
as "nan"; all of that is accepted. The JSON carries no NCCL log: use ``with_log`` to add the
EFA evidence and fatal lines from the same run's stdout.

``env`` is every variable of the test's environment (``util.cu`` writes ``envp`` whole, in every
version with -J): tokens and keys a node or ``mpirun -x`` carries end up in it. ``without_env`` drops it before a document
is kept anywhere (recorded on an H200, nccl-tests 2.19.6: 86 variables).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from tasks.errors import ParseError
from tasks.parsing._common import MAX_KEPT_LINES, check_text, is_int
from tasks.parsing.nccl_log import scan_log
from tasks.parsing.nccl_model import Measurement, NcclConfig, NcclResult, NcclRow, RankInfo

_MAX_ROWS = 100_000


def _obj(value: Any, what: str) -> dict:
    if not isinstance(value, dict):
        raise ParseError(f"nccl-tests JSON: {what} is not an object")
    return value


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ParseError(f"nccl-tests JSON: {what} is not an integer: {value!r:.40}")
    if isinstance(value, str):
        text = value.strip()
        if not is_int(text):
            raise ParseError(f"nccl-tests JSON: {what} is not an integer: {value!r:.40}")
        return int(text)
    return value


def _float(value: Any, what: str) -> float:
    if isinstance(value, bool):
        raise ParseError(f"nccl-tests JSON: {what} is a boolean, not a number")
    if isinstance(value, (int, float)):
        try:
            return float(value)
        except OverflowError as e:  # an integer beyond any float
            raise ParseError(f"nccl-tests JSON: {what} is out of range") from e
    if isinstance(value, str) and value.strip().lstrip("+-").lower() in ("nan", "inf"):
        return float(value.strip())
    raise ParseError(f"nccl-tests JSON: {what} is not a number: {value!r:.40}")


def _bool(value: Any, what: str) -> bool | None:
    """The writer emits "true"/"false" strings (and "unchecked" when no check was asked for)."""
    if isinstance(value, bool):
        return value
    if value in ("true", "false"):
        return value == "true"
    if value in ("unchecked", None):
        return None
    raise ParseError(f"nccl-tests JSON: {what} is not a boolean: {value!r:.40}")


def _str(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise ParseError(f"nccl-tests JSON: {what} is not a string")
    return value


def _measurement(value: Any, what: str) -> Measurement | None:
    if value is None:
        return None
    m = _obj(value, what)
    time_key = "time" if "time" in m else "cpu_time"
    try:
        time_us, algbw, busbw = m[time_key], m["alg_bw"], m["bus_bw"]
    except KeyError as e:
        raise ParseError(f"nccl-tests JSON: {what} lacks {e.args[0]!r}") from e
    nwrong = m.get("nwrong")
    wrong = None
    if nwrong is not None:
        count = _float(nwrong, f"{what}.nwrong")
        if not count >= 0:
            raise ParseError(f"nccl-tests JSON: {what}.nwrong is not a count: {nwrong!r:.40}")
        wrong = int(min(count, 1e18))
    return Measurement(_float(time_us, f"{what}.time"), _float(algbw, f"{what}.alg_bw"),
                       _float(busbw, f"{what}.bus_bw"), wrong)


def _with_per_iter(m: Measurement | None, value: Any, what: str) -> Measurement | None:
    if m is None or value is None:
        return m
    it = _obj(value, what)
    return dataclasses.replace(m, **{
        field: _float(it[key], f"{what}.{key}")
        for field, key in (("iter_min_us", "min_us"), ("iter_max_us", "max_us"),
                           ("iter_p99_us", "p99_us"), ("iter_cv_pct", "cv_pct")) if key in it})


def _row(value: Any, i: int) -> NcclRow:
    r = _obj(value, f"results[{i}]")
    where = f"results[{i}]"
    try:
        size, count, dtype = r["size"], r["count"], r["type"]
    except KeyError as e:
        raise ParseError(f"nccl-tests JSON: {where} lacks {e.args[0]!r}") from e
    oop = _with_per_iter(_measurement(r.get("out_of_place"), f"{where}.out_of_place"),
                         r.get("out_of_place_per_iter"), f"{where}.out_of_place_per_iter")
    ip = _with_per_iter(_measurement(r.get("in_place"), f"{where}.in_place"),
                        r.get("in_place_per_iter"), f"{where}.in_place_per_iter")
    redop = r.get("redop")
    root = r.get("root")
    return NcclRow(_int(size, f"{where}.size"), _int(count, f"{where}.count"),
                   _str(dtype, f"{where}.type"),
                   None if redop is None else _str(redop, f"{where}.redop"),
                   None if root is None else _int(root, f"{where}.root"), oop, ip)


def _rank(value: Any, i: int) -> RankInfo:
    d = _obj(value, f"devices[{i}]")
    where = f"config.devices[{i}]"
    try:
        return RankInfo(rank=_int(d["rank"], f"{where}.rank"), host=_str(d["hostname"], f"{where}.hostname"),
                        device=_int(d["device"], f"{where}.device"),
                        pid=_int(d["pid"], f"{where}.pid") if "pid" in d else None,
                        group=_int(d["group"], f"{where}.group") if "group" in d else None,
                        bus_id=_str(d.get("device_hex", ""), f"{where}.device_hex"),
                        device_name=_str(d.get("device_info", ""), f"{where}.device_info").strip())
    except KeyError as e:
        raise ParseError(f"nccl-tests JSON: {where} lacks {e.args[0]!r}") from e


def _config(c: dict) -> NcclConfig:
    def opt(key: str) -> int | None:
        return _int(c[key], f"config.{key}") if key in c else None
    return NcclConfig(opt("nthreads"), opt("ngpus"), opt("minimum_bytes"), opt("maximum_bytes"),
                      opt("warmup_iters"), opt("iterations"), opt("validation"), opt("graph"))


def _version(code: Any) -> str | None:
    """NCCL_VERSION_CODE 22703 -> '2.27.3' (codes before 2.9 were major*1000+minor*100+patch)."""
    if code is None:
        return None
    n = _int(code, "nccl_version")
    if n >= 10000:
        return f"{n // 10000}.{n // 100 % 100}.{n % 100}"
    return f"{n // 1000}.{n // 100 % 10}.{n % 100}"


def parse_nccl_json(text: str) -> NcclResult:
    text = check_text(text, "nccl-tests JSON")
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise ParseError(f"nccl-tests JSON: not valid JSON ({str(e)[:120]})") from e
    doc = _obj(doc, "the document")
    results = doc.get("results", [])
    if not isinstance(results, list) or len(results) > _MAX_ROWS:
        raise ParseError("nccl-tests JSON: results is not a list of rows")
    if "results" not in doc and "config" not in doc:
        raise ParseError("nccl-tests JSON: neither config nor results: not an nccl-tests document")
    config = _obj(doc.get("config", {}), "config")
    devices = config.get("devices", [])
    if not isinstance(devices, list):
        raise ParseError("nccl-tests JSON: config.devices is not a list")
    args = doc.get("args", [])
    collective = None
    if isinstance(args, list) and args and isinstance(args[0], str):
        collective = args[0].rsplit("/", 1)[-1] or None
    oob = doc.get("out_of_bounds")
    avg = doc.get("average_bus_bandwidth")
    errors = doc.get("errors", [])
    if not isinstance(errors, list):
        raise ParseError("nccl-tests JSON: errors is not a list")
    oob = _obj(oob, "out_of_bounds") if oob is not None else None
    avg = _obj(avg, "average_bus_bandwidth") if avg is not None else None
    return NcclResult(
        source_format="json", collective=collective, nccl_version=_version(doc.get("nccl_version")),
        config=_config(config) if config else None,
        ranks=tuple(_rank(d, i) for i, d in enumerate(devices)),
        column_format="wrong", rows=tuple(_row(r, i) for i, r in enumerate(results)),
        out_of_bounds=_int(oob.get("count"), "out_of_bounds.count") if oob else None,
        out_of_bounds_ok=_bool(oob.get("okay"), "out_of_bounds.okay") if oob else None,
        avg_busbw_gbs=_float(avg.get("bandwidth"), "average_bus_bandwidth.bandwidth") if avg else None,
        avg_busbw_ok=_bool(avg.get("okay"), "average_bus_bandwidth.okay") if avg else None,
        concluded="end_time" in doc,
        warnings=tuple("error: " + _str(e, "errors[]")[:500] for e in errors if e)[:MAX_KEPT_LINES],
    )


def without_env(text: str) -> str:
    """``text`` with the document's ``env`` list left out (its count said instead). A document
    that does not parse but names ``"env"`` (cut short by a timeout) is left out whole: what
    was cut cannot be told from a secret's tail."""
    if '"env"' not in text:
        return text
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        return '{"left_out": "an nccl-tests -J document cut short; it records the environment"}'
    if isinstance(doc, dict) and "env" in doc:
        env = doc["env"]
        doc["env"] = f"left out: {len(env) if isinstance(env, list) else 'some'} variable(s) of the test's environment"
    return json.dumps(doc)


def with_log(result: NcclResult, log_text: str) -> NcclResult:
    """The JSON figures plus the EFA evidence, fatal lines and warnings of the run's stdout."""
    evidence, fatal, warnings = scan_log(log_text, known_hosts=set(result.hosts))
    return dataclasses.replace(result, evidence=evidence, fatal_errors=result.fatal_errors + fatal,
                               warnings=(result.warnings + warnings)[:MAX_KEPT_LINES])


__all__ = ["parse_nccl_json", "with_log"]
