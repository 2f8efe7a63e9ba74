"""The Prefect events pdlift emits for people to be told about, as plain data. Pure.

Each builder returns the keyword arguments of ``prefect.events.emit_event`` (``event``,
``resource``, ``payload``, ``related``); the task wrappers emit them (``tasks.benchmark``,
``tasks.pipeline``, ``tasks.teardown``) and the automations in ``deploy/automations.yaml``
(installed by ``tasks.adapters.prefect_automations``) turn them into notifications:

    pdlift.gate.<pass|fail|inconclusive>  resource pdlift.deployment.<blueprint name>
        the gate's verdict (an INCONCLUSIVE one: the run rolls the candidate back, or with
        ``gate.undecided: ask`` waits for a person's approval; the payload's ``undecided`` says which)
    pdlift.run.failed-billing              resource pdlift.deployment.<blueprint name>
        a run failed and left resources billing: what, at what $/h, and the teardown command
    pdlift.sweep.leaks                     resource pdlift.sweep.<region>
        the leak sweep found pdlift resources past their TTL or of no active run

Payloads carry no secret: only names, ids, costs and commands; an error's text is cut to its
first line, any value of a secret-looking environment variable in it is replaced by ``***`` and
any URL in it loses its userinfo, query and fragment (``redact``), since an exception from a
vendor library may quote what it was given (a database URL with its password, a webhook with its
token). ``tasks.pipeline.report_failure`` redacts its artifact and log lines the same way.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from tasks.errors import ConfigError

EVENT_PREFIX = "pdlift."
GATE_EVENT = "pdlift.gate.{outcome}"
FAILED_BILLING_EVENT = "pdlift.run.failed-billing"
SWEEP_LEAKS_EVENT = "pdlift.sweep.leaks"
DEPLOYMENT_RESOURCE = "pdlift.deployment.{name}"
SWEEP_RESOURCE = "pdlift.sweep.{region}"

MAX_LISTED = 100        # resources named in one event (the rest counted): events have a size limit
MAX_RELATED = 20        # deployments named as related resources of a sweep event
MAX_ERROR_CHARS = 300
# Names of variables that hold a secret, or a URL/webhook that may carry one
# (PDLIFT_NOTIFY_WEBHOOK, PREFECT_API_DATABASE_CONNECTION_URL, SENTRY_DSN); URL/URI/DSN only as a
# word of the name, so CURL_CA_BUNDLE is not one.
# A webhook URL often carries its token in the path (hooks.slack.com/services/T/B/<token>): whole.
# Other URLs (endpoints, the database's) are not secrets in themselves; their userinfo and query,
# where credentials go, are scrubbed from any URL below, so an endpoint stays in the message.
_SECRET_NAME = re.compile(r"SECRET|TOKEN|PASSWORD|PASSWD|CREDENTIAL|PRIVATE|API_KEY|ACCESS_KEY|SESSION|AUTH|COOKIE"
                          r"|WEBHOOK", re.IGNORECASE)
_MIN_SECRET_LEN = 4  # shorter values ("1", "true") would redact ordinary words
# A URL in free text: scheme://[userinfo@]rest[?query][#fragment], ending at a space or a quote.
_URL = re.compile(r"\b(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^\s/?#'\"<>`]*@)?"
                  r"(?P<rest>[^\s?#'\"<>`]*)(?P<query>\?[^\s#'\"<>`]*)?(?P<fragment>#[^\s'\"<>`]*)?")


def deployment_resource(name: str) -> dict[str, str]:
    return {"prefect.resource.id": DEPLOYMENT_RESOURCE.format(name=name), "prefect.resource.name": name}


def gate_event(deployment: str, outcome: str, payload: Mapping[str, Any]) -> dict[str, Any]:
    """``pdlift.gate.<outcome lower>`` about the deployment; ``payload``: the gate report with the
    run id and colour (``tasks.benchmark.gate``)."""
    return {"event": GATE_EVENT.format(outcome=outcome.lower()), "resource": deployment_resource(deployment),
            "payload": dict(payload)}


def secret_values(environ: Mapping[str, str]) -> list[str]:
    """The values of the environment variables whose names say they hold a secret."""
    return [v for k, v in environ.items() if _SECRET_NAME.search(k) and len(v) >= _MIN_SECRET_LEN]


def redact(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every secret value replaced by ``***`` (longest first, so overlaps go whole),
    then the userinfo, query and fragment of every URL in it replaced by ``***``
    (``postgresql://u:pw@db/x?sslkey=k`` -> ``postgresql://***@db/x?***``)."""
    for s in sorted({s for s in secrets if len(s) >= _MIN_SECRET_LEN}, key=len, reverse=True):
        text = text.replace(s, "***")
    return scrub_urls(text)


def scrub_urls(text: str) -> str:
    """``text`` with each URL's userinfo, query string and fragment replaced by ``***``: where
    a URL carries a password or a token when it is not in its path."""
    def scrub(m: re.Match) -> str:
        return (m["scheme"] + ("***@" if m["userinfo"] else "") + m["rest"] + ("?***" if m["query"] else "")
                + ("#***" if m["fragment"] else ""))
    return _URL.sub(scrub, text)


def error_line(error: BaseException, secrets: Iterable[str]) -> str:
    """``Type: first line of the message``, redacted and cut to ``MAX_ERROR_CHARS``."""
    first = (str(error).strip().splitlines() or [""])[0]
    line = redact(f"{type(error).__name__}: {first}".rstrip(": "), secrets)
    return line if len(line) <= MAX_ERROR_CHARS else line[:MAX_ERROR_CHARS - 1] + "…"


def teardown_command(blueprint_path: str, run_id: str) -> str:
    return f"pdlift teardown {shlex.quote(blueprint_path)} --run-id {shlex.quote(run_id)}"


def failed_billing_event(deployment: str, run_id: str, blueprint_path: str, stage: str, error: BaseException,
                         live: Sequence[Any], hourly_usd: float, environ: Mapping[str, str]) -> dict[str, Any]:
    """``pdlift.run.failed-billing``: run ``run_id`` failed at ``stage`` and ``live`` (the ledger's
    entries still billing) cost ``hourly_usd`` an hour until the teardown command releases them."""
    resources = [{"kind": e.kind, "id": e.resource_id, "zone": e.zone, "stage": e.stage,
                  "usd_per_hour": round(e.usd_per_hour, 2)} for e in live]
    return {"event": FAILED_BILLING_EVENT, "resource": deployment_resource(deployment),
            "payload": {"deployment": deployment, "run_id": run_id, "stage": stage,
                        "error": error_line(error, secret_values(environ)),
                        "hourly_usd": round(hourly_usd, 2), "resource_count": len(resources),
                        "resources": resources[:MAX_LISTED], "resources_not_listed": max(0, len(resources) - MAX_LISTED),
                        "teardown": teardown_command(blueprint_path, run_id)}}


def sweep_leaks_event(region: str, apply: bool, active_runs: Sequence[str], stale: Sequence[Mapping[str, Any]],
                      fates: Mapping[str, str] | None = None, kept: Sequence[str] = (),
                      error: str = "") -> dict[str, Any]:
    """``pdlift.sweep.leaks``: the sweep of ``region`` found ``stale`` (``tasks.stages.teardown.Found``
    as dicts: past their TTL or of none of ``active_runs``). ``apply``: it tried to release them,
    and ``fates`` says what became of each (resource id -> ``released`` | ``kept`` | ``failed``,
    ``failed`` also for one not known to be released); ``kept``: why what was kept was kept (a
    Capacity Block cannot be cancelled); ``error``: the release's failure, already redacted (""
    when it did not fail). Without ``apply`` everything is ``listed`` (a dry run)."""
    fates = dict(fates or {})

    def fate(rid: str) -> str:
        return fates.get(rid, "failed") if apply else "listed"

    resources = [{"kind": f["kind"], "id": f["resource_id"], "deployment": f["deployment"], "run_id": f["run_id"],
                  "created_at": f["created_at"], "ttl_hours": f["ttl_hours"], "status": fate(f["resource_id"])}
                 for f in stale]
    by_fate = {k: [r["id"] for r in resources if r["status"] == k] for k in ("released", "kept", "failed")}
    deployments = sorted({f["deployment"] for f in stale if f["deployment"]})
    related = [{**deployment_resource(d), "prefect.resource.role": "deployment"} for d in deployments[:MAX_RELATED]]
    return {"event": SWEEP_LEAKS_EVENT,
            "resource": {"prefect.resource.id": SWEEP_RESOURCE.format(region=region),
                         "prefect.resource.name": f"pdlift sweep {region}"},
            "related": related,
            "payload": {"region": region, "apply": apply, "active_runs": list(active_runs), "count": len(resources),
                        "resource_ids": [r["id"] for r in resources[:MAX_LISTED]],
                        "resources": resources[:MAX_LISTED], "resources_not_listed": max(0, len(resources) - MAX_LISTED),
                        "deployments": deployments,
                        **{f"{k}_count": len(ids) for k, ids in by_fate.items()},
                        "released": by_fate["released"][:MAX_LISTED], "failed": by_fate["failed"][:MAX_LISTED],
                        "kept": list(kept)[:MAX_LISTED], "error": error,
                        "next": _sweep_next(region, active_runs, apply, len(by_fate["kept"]), len(by_fate["failed"]))}}


def _sweep_next(region: str, active_runs: Sequence[str], apply: bool, kept: int, failed: int) -> str:
    """What a person does next. After a dry run: check the list first (a run not named active is
    listed even while production uses it), then release with the same active runs. After a
    release: run it again for what it could not release; wait out what cannot be released."""
    active = "".join(f" --active-run {shlex.quote(r)}" for r in active_runs)
    command = f"pdlift sweep --region {shlex.quote(region)}{active} --apply"
    if not apply:
        return (f"dry run, nothing released: check the list (name each run still in use with --active-run), then "
                f"release with: {command}")
    steps = []
    if failed:
        steps.append(f"{failed} resource(s) NOT released and still billing: see the error, then release them with: "
                     f"{command} (or in the EC2 console)")
    if kept:
        steps.append(f"{kept} kept: a Capacity Block cannot be cancelled; it stops billing when it ends")
    return "; ".join(steps) or "nothing: every one was released"


# --- the automations (deploy/automations.yaml) --------------------------------------------------

LINK_PLACEHOLDER = "${LINK}"
NOTIFY_ACTION = "send-notification"


def ui_link(ui_url: str) -> str:
    """The Jinja a notification's link is: the emitting flow run's page in the Prefect UI (where
    a paused or suspended run is approved), else the page of the event's resource's events."""
    base = ui_url.rstrip("/")
    return (f"{{% if flow_run %}}{base}/runs/flow-run/{{{{ flow_run.id }}}}"
            f"{{% else %}}{base}/events?resource={{{{ event.resource.id }}}}{{% endif %}}")


def ui_url_of(api_url: str) -> str:
    """The Prefect UI beside an API (``http://host:4200/api`` -> ``http://host:4200``)."""
    return api_url.rstrip("/").removesuffix("/api")


def check_webhook_url(url: str) -> str:
    """``url`` when it is an http(s) URL with a host; ConfigError otherwise (without echoing it:
    a webhook URL usually carries its token)."""
    try:
        parts = urlsplit(url.strip())
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError("the webhook must be an http:// or https:// URL with a host; the value given is not "
                          "(not shown here: a webhook URL may hold a token)")
    return url.strip()


def block_spec(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The notification block's name and the fields sent, from the automations file."""
    block = dict(doc.get("block") or {})
    if not block.get("name"):
        raise ConfigError("deploy/automations.yaml: `block.name` is missing")
    return block


def automation_specs(doc: Mapping[str, Any], block_document_id: str, ui_url: str) -> list[dict[str, Any]]:
    """The automations of the file as Prefect's ``AutomationCore`` fields, each send-notification
    action pointed at the block and ``${LINK}`` replaced by the link into ``ui_url``."""
    link = ui_link(ui_url)
    specs: list[dict[str, Any]] = []
    for i, raw in enumerate(doc.get("automations") or []):
        if not isinstance(raw, Mapping) or not raw.get("name"):
            raise ConfigError(f"deploy/automations.yaml: automations[{i}] has no name")
        spec = {k: v for k, v in raw.items() if k != "actions"}
        actions = []
        for action in raw.get("actions") or []:
            action = dict(action)
            if action.get("type") == NOTIFY_ACTION:
                action["block_document_id"] = block_document_id
                for key in ("subject", "body"):
                    if isinstance(action.get(key), str):
                        action[key] = action[key].replace(LINK_PLACEHOLDER, link)
            actions.append(action)
        if not actions:
            raise ConfigError(f"deploy/automations.yaml: automation {raw['name']!r} has no action")
        specs.append({**spec, "actions": actions})
    names = [s["name"] for s in specs]
    if len(set(names)) != len(names):
        raise ConfigError(f"deploy/automations.yaml: automation names repeat: {names}")
    return specs
