"""`pdlift deploy BLUEPRINT [--render-only DIR] [--colour blue|green]`: stage 5 from the terminal,
with the pods Ready per role as a progress bar on stderr (``cli.progress``)."""

from __future__ import annotations

import argparse

from cli.common import add_run_id, print_record
from cli.progress import progress_bar
from cli.server import ensure_api
from tasks.runs import run_id_of


def _cmd_deploy(args: argparse.Namespace) -> int:
    from blueprints.loader import load_blueprint

    bp = load_blueprint(args.blueprint)
    if args.render_only:
        from tasks.stages.deploy import render_to_dir

        # No cluster is asked which colour is live: render-only touches nothing.
        path = render_to_dir(bp, args.colour or "blue", args.render_only)
        print(f"wrote {path} (colour {args.colour or 'blue'}; invariants and schemas checked; nothing applied)")
        return 0
    from flows.deploy import deploy_flow

    run_id = run_id_of(bp, args.run_id)
    ensure_api()
    with progress_bar():
        deployed = deploy_flow(args.blueprint, run_id, colour=args.colour, rollback_on_failure=args.rollback_on_failure)
    print_record(run_id, deployed)
    return 0


def register(sub: argparse._SubParsersAction, handlers: dict) -> None:
    p = sub.add_parser("deploy", help="stage 5: bring up the candidate colour and prove its KV path")
    p.add_argument("blueprint")
    p.add_argument("--render-only", metavar="DIR", default=None,
                   help="write the checked manifests to DIR and stop (no cluster is contacted)")
    p.add_argument("--colour", choices=("blue", "green"), default=None,
                   help="the candidate colour (default: the one the production Service does not select)")
    add_run_id(p, "the run whose ledger records the result")
    p.add_argument("--rollback-on-failure", action="store_true",
                   help="delete a candidate that failed (default: keep it for inspection)")
    handlers["deploy"] = _cmd_deploy
