"""A run: its identity, its ledger, and the adapters built for it from standard AWS configuration.

Clients are built here per run, never at import time; the AWS SDK picks endpoints and credentials
from its standard configuration (AWS_ENDPOINT_URL_*, profiles, instance roles), which is also
how the sandbox is selected.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field

from blueprints.schema import Blueprint
from tasks.adapters import aws_client
from tasks.adapters.ec2_capacity import Ec2Capacity
from tasks.adapters.ec2_instances import Ec2Instances
from tasks.adapters.ledger_store import LedgerStore
from tasks.planning.identity import RunIdentity, default_run_id
from tasks.planning.ledger import Ledger, LedgerEntry, now_str


@dataclass
class Run:
    blueprint: Blueprint
    identity: RunIdentity
    store: LedgerStore
    ledger: Ledger = field(repr=False)

    def record(self, entry: LedgerEntry) -> None:
        """Persist a resource the moment it exists (before anything else can fail)."""
        self.ledger = self.ledger.with_entry(entry)
        self.store.save(self.ledger)

    def ended(self, kind: str, resource_id: str, at: dt.datetime) -> None:
        self.ledger = self.ledger.ended(kind, resource_id, at)
        self.store.save(self.ledger)

    def stage_done(self, stage: str, output: dict) -> None:
        self.ledger = self.ledger.with_stage(stage, output)
        self.store.save(self.ledger)


def open_run(bp: Blueprint, run_id: str | None = None, store: LedgerStore | None = None,
             now: dt.datetime | None = None) -> Run:
    """Load this run's ledger, or start one. The run's start time is fixed at its first open."""
    store = store or LedgerStore()
    rid = run_id or default_run_id(json.dumps(bp.model_dump(mode="json", by_alias=True), sort_keys=True))
    ledger = store.load(bp.name, rid)
    if ledger is None:
        started = now or dt.datetime.now(dt.timezone.utc)
        ledger = Ledger(bp.name, rid, now_str(started))
        store.save(ledger)
    created = dt.datetime.strptime(ledger.created_at, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.timezone.utc)
    return Run(bp, RunIdentity(bp.name, rid, created, bp.aws.ttl_hours), store, ledger)


@dataclass(frozen=True)
class AwsAdapters:
    capacity: Ec2Capacity
    instances: Ec2Instances
    eks: object
    sts: object


def aws_adapters(bp: Blueprint) -> AwsAdapters:
    sess = aws_client.session(bp.aws.region)
    describe, create = aws_client.clients(sess, "ec2")
    ssm = sess.client("ssm", config=aws_client.DESCRIBE_CONFIG)
    quotas = sess.client("service-quotas", config=aws_client.DESCRIBE_CONFIG)
    return AwsAdapters(Ec2Capacity(describe, create, ssm, quotas), Ec2Instances(describe, create),
                       sess.client("eks", config=aws_client.DESCRIBE_CONFIG),
                       sess.client("sts", config=aws_client.DESCRIBE_CONFIG))
