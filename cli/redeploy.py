"""`pdlift redeploy BLUEPRINT [--strategy S] [--image IMAGE] [--model-revision R]`: update the live
colour on the fleet a run holds, as the scheduled `redeploy` (and, with an override, the `rollout`)
deployment does. Exit 0: promoted; 1: rolled back, restored, or stopped cleanly; 2: bad input
(the blueprint, the arguments, a strategy that cannot work here)."""

from __future__ import annotations

import argparse
import json

from cli.common import add_run_id
from cli.server import ensure_api
from tasks.planning.strategy import STRATEGIES
from tasks.runs import run_id_of


def _cmd_redeploy(args: argparse.Namespace) -> int:
    from blueprints.loader import load_blueprint

    bp = load_blueprint(args.blueprint)  # a bad blueprint is exit 2 before any API call
    run_id = run_id_of(bp, args.run_id)
    ensure_api()
    if args.image or args.model_revision:
        from flows.rollout import rollout

        result = rollout(args.blueprint, run_id, engine_image=args.image, model_revision=args.model_revision,
                         strategy=args.strategy)
    else:
        from flows.redeploy import redeploy

        result = redeploy(args.blueprint, run_id, strategy=args.strategy)
    print(json.dumps(result, indent=2, default=str))
    return 0


def register(sub: argparse._SubParsersAction, handlers: dict) -> None:
    p = sub.add_parser("redeploy", help="update the live colour on the fleet a run holds (by a strategy)")
    p.add_argument("blueprint")
    p.add_argument("--strategy", choices=STRATEGIES, default="auto",
                   help="auto (default: promotion.strategy, else the first that fits), blue-green, rolling, "
                        "recreate or fleet")
    p.add_argument("--image", default=None, help="a new engine image (by digest): a rollout")
    p.add_argument("--model-revision", default=None, help="a new model revision: a rollout")
    add_run_id(p, "the run that holds the fleet")
    handlers["redeploy"] = _cmd_redeploy
