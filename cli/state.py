"""`pdlift state show BLUEPRINT [--run ID]` and `pdlift state migrate BLUEPRINT [--to s3://...]`:
what the state store holds of a deployment's runs, and copying a worker's local state into S3."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys

MIGRATED = ("runs/", "baselines/", "results/")  # leases belong to live processes: never copied


def _wiring(bp):
    from tasks.wiring import Wiring

    return Wiring(bp)


def _cmd_show(args: argparse.Namespace) -> int:
    from blueprints.loader import load_blueprint
    from tasks.adapters.ledger_store import LedgerStore
    from tasks.adapters.run_lease import RunLeases
    from tasks.planning import records
    from tasks.errors import ConfigError
    from tasks.planning.ledger import hourly_burn

    bp = load_blueprint(args.blueprint)
    store = _wiring(bp).state
    ledgers, leases, now = LedgerStore(store), RunLeases(store), dt.datetime.now(dt.timezone.utc)
    if args.run is None:
        runs = ledgers.runs(bp.name)
        print(f"state store: {store.uri}\n{bp.name}: {len(runs)} run(s)")
        for rid in runs:
            ledger = ledgers.load(bp.name, rid)
            try:
                lease, _ = leases.current(bp.name, rid)
                held = f"held until {lease.expires_at} by {lease.worker}" if lease and not lease.expired(now) \
                    else "not held"
            except ConfigError as e:  # one unreadable lease does not hide the other runs
                held = str(e)
            print(f"  {rid}: started {ledger.created_at}; done: {', '.join(ledger.stages_done) or 'nothing'}; "
                  f"{len(ledger.live())} resource(s) billing ${hourly_burn(ledger):,.2f}/h; {held}")
        return 0
    ledger = ledgers.load(bp.name, args.run)
    if ledger is None:
        print(f"pdlift state show: run {args.run} of {bp.name} has no ledger in {store.uri} "
              f"(runs there: {', '.join(ledgers.runs(bp.name)) or 'none'})", file=sys.stderr)
        return 1
    lease, _ = leases.current(bp.name, args.run)
    print(json.dumps({"store": store.uri, "deployment": bp.name, "run_id": args.run, "created_at": ledger.created_at,
                      "lease": None if lease is None else {**lease.__dict__, "live": not lease.expired(now)},
                      "resources": [e.__dict__ for e in ledger.entries],
                      "records": {stage: records.to_dict(rec) for stage, rec in ledger.records.items()},
                      "files": store.keys(f"runs/{bp.name}/{args.run}")}, indent=2, default=str))
    return 0


def _cmd_migrate(args: argparse.Namespace) -> int:
    from pathlib import Path

    from blueprints.loader import load_blueprint
    from tasks.adapters.state_store import CREATE, LocalStore, StateConflict
    from tasks.errors import ConfigError

    bp = load_blueprint(args.blueprint)
    wiring = _wiring(bp)
    target = wiring.open_state(args.to or wiring.state_uri)
    if not target.uri.startswith("s3://"):
        raise ConfigError("pdlift state migrate: name the S3 store to copy into: --to s3://bucket/prefix, "
                          "or set state.uri in the blueprint (or PDLIFT_STATE_URI)")
    source = LocalStore(Path(args.source) if args.source else wiring.state_dir)
    copied = same = kept = 0
    for key in source.keys():
        if not key.startswith(MIGRATED):
            continue
        data = source.get(key).data
        try:
            target.put(key, data, if_match=CREATE)  # never overwrite what another worker wrote there
            copied += 1
        except StateConflict:
            if target.get(key).data == data:
                same += 1
            else:
                kept += 1
                print(f"kept {target.uri}/{key}: the store's copy differs from {source.uri}/{key}")
    print(f"state migrate {source.uri} -> {target.uri}: {copied} copied, {same} already there, {kept} kept as "
          f"they were in the store")
    return 0


def register(sub: argparse._SubParsersAction, handlers: dict) -> None:
    p = sub.add_parser("state", help="the state store: show a deployment's runs, migrate local state to S3")
    verbs = p.add_subparsers(dest="state_command", metavar="VERB", required=True)
    show = verbs.add_parser("show", help="the runs of a blueprint's deployment, or one run's records (--run)")
    show.add_argument("blueprint")
    show.add_argument("--run", default=None, help="print this run's ledger, lease and files as JSON")
    show.set_defaults(state_handler=_cmd_show)
    migrate = verbs.add_parser("migrate", help="copy this worker's local state (runs, baselines, results) to S3")
    migrate.add_argument("blueprint")
    migrate.add_argument("--to", default=None, help="s3://bucket/prefix (default: PDLIFT_STATE_URI, else state.uri)")
    migrate.add_argument("--from", dest="source", default=None,
                         help="the local state directory (default: PDLIFT_STATE_DIR, else ./.pdlift)")
    migrate.set_defaults(state_handler=_cmd_migrate)
    handlers["state"] = lambda args: args.state_handler(args)
