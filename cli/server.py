"""The Prefect API a flow command runs against, checked before any flow code runs.

Every command that runs a flow calls ``ensure_api()`` first (``plan``, ``validate``, ``gate``,
``--help`` and the other commands that run no flow never do: they stay fast and work without a
server):

* ``PREFECT_API_URL`` set (the environment, the Prefect profile, ``.env`` or ``prefect.toml``, as
  Prefect reads it): that server is used as is, after one quick ``GET <api>/health`` (a few
  seconds at most; loopback goes direct, never through a proxy). No answer -> ``ApiUnavailable``.
* unset: Prefect would start a temporary ("ephemeral") server on its first API call, waiting
  ``PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS`` (Prefect's default, 20 s, is too short on a
  busy machine). pdlift starts that same server itself, now, bounded by that setting when it is set
  and by ``DEFAULT_STARTUP_S`` otherwise; Prefect's later calls find it running.

``explain(exc)`` turns these failures, and Prefect's own exceptions for them should one escape a
flow call, into the one line ``cli/main.py`` prints (exit 1, no traceback).
"""

from __future__ import annotations

import ipaddress
import sys
import time
from urllib.parse import urlsplit

STARTUP_SETTING = "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"
DEFAULT_STARTUP_S = 60  # Prefect's own default is 20 s, which a loaded machine misses
CHECK_TIMEOUT_S = 3.0  # the health check: a running server answers in milliseconds
_PREFECT_TIMEOUT = "Timed out while attempting to connect to ephemeral Prefect API server"
_PREFECT_NO_API = "No Prefect API URL provided"
_FIX_SERVER = "start it (`prefect server start`) or unset PREFECT_API_URL to let pdlift start a temporary one"
_FIX_EPHEMERAL = "set PREFECT_API_URL to a running server (`prefect server start`)"


class ApiUnavailable(Exception):
    """No Prefect API to run a flow against; the message is the whole explanation (one line)."""


def ensure_api() -> str:
    """The API URL flows will use, once it answers: the configured one, or a temporary server
    started here (bounded). Raises ``ApiUnavailable`` before any flow code runs."""
    from prefect.settings import get_current_settings

    settings = get_current_settings()
    if settings.api.url:
        reason = health(settings.api.url, settings)
        if reason:
            raise ApiUnavailable(unreachable(settings.api.url, reason))
        return settings.api.url
    if not settings.server.ephemeral.enabled:
        raise ApiUnavailable(f"PREFECT_API_URL is unset and Prefect's temporary server is disabled "
                             f"(PREFECT_SERVER_EPHEMERAL_ENABLED=false); {_FIX_EPHEMERAL}, or enable it")
    bound = startup_bound(settings)
    from prefect.server.api.server import SubprocessASGIServer

    server = SubprocessASGIServer()  # the instance Prefect's get_client() starts and then reuses
    try:
        # Prefect falls back to its setting for a timeout of 0 (`timeout or setting`): the same 0.
        server.start(timeout=bound)
    except Exception as e:  # whatever stopped it: the process, the port, its health answer
        raise ApiUnavailable(not_started(bound, e)) from e
    return server.api_url


def startup_bound(settings) -> int:
    """Seconds the temporary server may take to start: Prefect's setting where it was set
    (environment, profile, .env, prefect.toml), else ``DEFAULT_STARTUP_S``."""
    ephemeral = settings.server.ephemeral
    if "startup_timeout_seconds" in ephemeral.model_fields_set:
        return int(ephemeral.startup_timeout_seconds)
    return DEFAULT_STARTUP_S


def unreachable(api: str, reason: str) -> str:
    return f"the Prefect API at {api} does not answer ({_one_line(reason)}); {_FIX_SERVER}"


def not_started(bound: int | None, exc: BaseException) -> str:
    text = str(exc)
    if _PREFECT_TIMEOUT in text:
        within = f"within {bound} s" if bound is not None else f"within {STARTUP_SETTING}"
        exited = ""
        if "process exited with code" in text:
            code = text.split("process exited with code", 1)[1].split(".")[0].strip()
            exited = f"; its process exited with code {code}"
        return (f"Prefect's temporary server did not start {within}{exited}; {_FIX_EPHEMERAL}, or raise "
                f"{STARTUP_SETTING} (a busy machine needs longer)")
    return (f"Prefect's temporary server did not start ({type(exc).__name__}: {_one_line(text)}); "
            f"{_FIX_EPHEMERAL}")


def health(api: str, settings=None) -> str | None:
    """None when ``GET <api>/health`` answers, else why not, in a few words. Auth and TLS as
    Prefect's client does them; a loopback address is asked directly, never through a proxy."""
    import httpx

    url = api.rstrip("/") + "/health"
    try:
        loopback = _is_loopback(urlsplit(url).hostname)
    except ValueError:
        return "not an http(s) URL"
    headers, verify = _client_options(settings)
    try:
        with httpx.Client(timeout=CHECK_TIMEOUT_S, trust_env=not loopback, verify=verify,
                          follow_redirects=True, headers=headers) as client:
            for attempt in range(3):  # a busy SQLite-backed server answers 503 now and then
                response = client.get(url)
                if response.status_code < 500:
                    break
                time.sleep(0.3)
    except httpx.TimeoutException:
        return f"no answer within {CHECK_TIMEOUT_S:g} s"
    except (httpx.UnsupportedProtocol, httpx.InvalidURL):
        return "not an http(s) URL"
    except httpx.ConnectError as e:
        return _connect_reason(e)
    except httpx.HTTPError as e:
        return f"{type(e).__name__}: {e}"
    if response.status_code == 200 or response.status_code in (401, 403):  # it answers; auth is Prefect's to report
        return None
    if response.status_code == 404:
        return "HTTP 404 for /health: not a Prefect API; its URL ends in /api"
    return f"HTTP {response.status_code} for /health"


def explain(exc: BaseException) -> str | None:
    """The one line for a failure to reach or start a Prefect API, else None (not ours to explain)."""
    for e in _chain(exc):
        if isinstance(e, ApiUnavailable):
            return str(e)
        text = str(e)
        if isinstance(e, RuntimeError) and _PREFECT_TIMEOUT in text:
            return not_started(_bound_now(), e)
        if isinstance(e, ValueError) and text.startswith(_PREFECT_NO_API):
            return (f"PREFECT_API_URL is unset and Prefect's temporary server is disabled; {_FIX_EPHEMERAL}, "
                    f"or set PREFECT_SERVER_EPHEMERAL_ENABLED=true")
        api = _api_of_connect_error(e)
        if api:
            return unreachable(api, _connect_reason(e))
    return None


def _chain(exc: BaseException, depth: int = 6):
    seen = 0
    while exc is not None and seen < depth:
        yield exc
        exc, seen = exc.__cause__ or exc.__context__, seen + 1


def _bound_now() -> int | None:
    if "prefect" not in sys.modules:
        return None
    from prefect.settings import get_current_settings

    return startup_bound(get_current_settings())


def _api_of_connect_error(e: BaseException) -> str | None:
    """The configured API, when ``e`` is httpx failing to connect to it (the server went away)."""
    httpx = sys.modules.get("httpx")
    if httpx is None or not isinstance(e, (httpx.ConnectError, httpx.ConnectTimeout)) or "prefect" not in sys.modules:
        return None
    from prefect.settings import get_current_settings

    api = get_current_settings().api.url
    try:
        url = str(e.request.url)
    except RuntimeError:  # no request attached
        return None
    return api if api and url.startswith(api.rstrip("/")) else None


def _connect_reason(e: BaseException) -> str:
    text = _one_line(str(e)) or type(e).__name__
    if text.startswith("[Errno") and "] " in text:
        text = text.split("] ", 1)[1]
    return text[:1].lower() + text[1:]


def _is_loopback(host: str | None) -> bool:
    if not host:
        raise ValueError("no host")
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _client_options(settings) -> tuple[dict[str, str], object]:
    """Authorization and TLS verification as ``prefect.client.orchestration`` sets them."""
    if settings is None:
        return {}, True
    import base64
    import ssl

    headers: dict[str, str] = {}
    api = settings.api
    auth_string = api.auth_string.get_secret_value() if api.auth_string else None
    api_key = api.key.get_secret_value() if api.key else None
    if auth_string:
        headers["Authorization"] = "Basic " + base64.b64encode(auth_string.encode()).decode()
    elif api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    if api.tls_insecure_skip_verify:
        return headers, False
    if api.ssl_cert_file:
        return headers, ssl.create_default_context(cafile=api.ssl_cert_file)
    return headers, True


def _one_line(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."
