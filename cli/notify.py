"""`pdlift notify install --webhook URL`: pdlift's notifications as Prefect automations.

Installs (or updates, by name: running it again leaves one of each) the automations of
``deploy/automations.yaml`` on the Prefect server, each sending a notification to the webhook
when a gate FAILs or is INCONCLUSIVE (a run waiting for approval), when a failed run leaves
resources billing, or when the leak sweep finds leaked resources
(``tasks.adapters.prefect_automations``). The Prefect server sends them; it must be a lasting
one (``prefect server start`` or Prefect Cloud): a temporary server ends with this command.

The webhook URL usually carries a token: pass it in ``PDLIFT_NOTIFY_WEBHOOK`` rather than on the
command line (shell history, the process list); it is stored in the block's secrets and never
printed. Also runnable alone: ``python -m cli.notify install --webhook URL``.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from cli.server import ApiUnavailable, health

WEBHOOK_ENV = "PDLIFT_NOTIFY_WEBHOOK"


def _cmd_notify(args: argparse.Namespace) -> int:
    from tasks.adapters.prefect_automations import ensure_automations
    from tasks.errors import ConfigError
    from tasks.planning.notifications import check_webhook_url

    webhook = args.webhook or os.environ.get(WEBHOOK_ENV, "")
    if not webhook:
        raise ConfigError(f"no webhook: pass --webhook URL or set {WEBHOOK_ENV}")
    check_webhook_url(webhook)
    api = args.api or _configured_api()
    if not api:
        raise ConfigError("automations need a lasting Prefect server: set PREFECT_API_URL (or pass --api URL) to one "
                          "started with `prefect server start` (a temporary server ends with this command)")
    from prefect.settings import get_current_settings

    reason = health(api, get_current_settings())
    if reason:
        raise ApiUnavailable(f"the Prefect API at {api} does not answer ({reason}); start it "
                             f"(`prefect server start`) and point PREFECT_API_URL or --api at it")
    for line in ensure_automations(api, webhook, ui_url=args.ui, spec_path=args.file).lines():
        print(line)
    return 0


def _configured_api() -> str | None:
    from prefect.settings import get_current_settings

    return get_current_settings().api.url


def register(sub: argparse._SubParsersAction, handlers: dict) -> None:
    p = sub.add_parser("notify", help="notifications (gate FAIL/INCONCLUSIVE, failed runs still billing, leaks) "
                                      "as Prefect automations")
    actions = p.add_subparsers(dest="notify_command", metavar="ACTION", required=True)
    install = actions.add_parser("install", help="create or update the automations and their webhook block "
                                                 "(idempotent)")
    install.add_argument("--webhook", default=None,
                         help=f"where notifications are POSTed (default: ${WEBHOOK_ENV}; prefer the variable: "
                              "a webhook URL usually holds a token)")
    install.add_argument("--api", default=None, help="the Prefect API (default: PREFECT_API_URL)")
    install.add_argument("--ui", default=None, help="the Prefect UI the notifications link to (default: beside the API)")
    install.add_argument("--file", default=None, help="the automations file (default: deploy/automations.yaml)")
    handlers["notify"] = _cmd_notify


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m cli.notify ...``: the same command where ``pdlift notify`` is not registered."""
    from tasks.errors import ConfigError, PdliftError

    parser = argparse.ArgumentParser(prog="pdlift")
    sub = parser.add_subparsers(dest="command", required=True)
    handlers: dict = {}
    register(sub, handlers)
    args = parser.parse_args(["notify", *(sys.argv[1:] if argv is None else argv)])
    try:
        return handlers["notify"](args)
    except ConfigError as e:
        print(f"pdlift notify: {e}", file=sys.stderr)
        return 2
    except (PdliftError, ApiUnavailable) as e:
        print(f"pdlift notify: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
