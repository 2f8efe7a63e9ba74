"""Stage 4: stage the model weights from S3 to every node's NVMe with the on-node stager, over SSH.

manifest (S3, orchestrator side) -> ship the stager and probe each node -> plan (refuse before
any byte moves if a node lacks space) -> run the stager on all nodes at once, reporting
progress per node and in total. The node side is ``scripts/node/stage_weights.py``.

Credentials: on AWS a node signs with its instance profile, so only the region is sent. When
the orchestrator talks to a custom S3 endpoint (the sandbox, an S3-compatible store) the
endpoint and keys go to the stager in the SSH session's environment (on stdin, see
``ssh_exec``), never on a command line; the SSH adapter redacts their values from every line it
relays, so they reach no log, artifact or exception text.
"""

from __future__ import annotations

import functools
import hashlib
import logging
from collections.abc import Callable, Mapping
from pathlib import Path

from blueprints.schema import Blueprint, StagingSpec
from tasks.adapters.ssh import Outcome, SshNode, run_on_all
from tasks.errors import (HostKeyMismatch, PdliftError, RemoteCommandFailed, RemoteCommandTimeout, RemoteUnavailable,
                          StageFailed, WeightVerificationFailed)
from tasks.planning.records import NodeWeights, StagedWeights
from tasks.planning.staging import Manifest, NodeProbe, stage_timeout_s
from tasks.planning.staging_progress import NodeProgress, ProgressBoard, failure_message, parse_event
from tasks.stages.ports import Shell

# (snapshot, final): every tick of the stager's progress; ``final`` once, when every node ended.
OnProgress = Callable[[list[NodeProgress], bool], None]

NODE_SCRIPTS = Path(__file__).resolve().parents[2] / "scripts" / "node"
STAGER_FILES = ("stage_weights.py", "stager_s3.py", "stager_files.py", "stager_job.py")
REMOTE_PYTHON = "python3"
SECRET_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
ENDPOINT_ENV = ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
EXIT_REASONS = {2: "bad manifest or arguments", 3: "not enough free space", 4: "verification failed",
                5: "download failed after retries (run again to resume)", 6: "access denied",
                7: "another stager is already staging on this node"}
VERIFY_EXIT = 4


@functools.cache  # the stager's files do not change while pdlift runs; hash them once, not per node
def remote_dir() -> str:
    """Where the stager goes on a node: content-addressed, so nodes never run a stale copy."""
    digest = hashlib.sha256()
    for name in STAGER_FILES:
        digest.update((NODE_SCRIPTS / name).read_bytes())
    return f".pdlift/stager/{digest.hexdigest()[:12]}"


def stager_env(environ: Mapping[str, str], region: str) -> dict[str, str]:
    env = {"AWS_REGION": region, "AWS_DEFAULT_REGION": region}
    endpoint = next((environ[k] for k in ENDPOINT_ENV if environ.get(k)), None)
    if endpoint:
        env["AWS_ENDPOINT_URL_S3"] = endpoint
        env.update({k: environ[k] for k in SECRET_ENV if environ.get(k)})
    return env


def stager_argv(directory: str, mode: str, staging: StagingSpec, progress_interval_s: float = 1.0) -> list[str]:
    return [REMOTE_PYTHON, f"{directory}/stage_weights.py", mode, "--dest", staging.local_path,
            "--manifest", "-", "--concurrency", str(staging.concurrency),
            "--part-size-mb", str(staging.part_size_mb), "--max-retries", str(staging.max_retries),
            "--free-margin", str(staging.free_space_margin), "--progress-interval", str(progress_interval_s)]


def ship(shell: Shell, node: SshNode) -> str:
    directory = remote_dir()
    for name in STAGER_FILES:
        shell.upload(node, str(NODE_SCRIPTS / name), f"{directory}/{name}", mode=0o755)
    return directory


def probe(shell: Shell, nodes: list[SshNode], manifest: Manifest, staging: StagingSpec) -> list[NodeProbe]:
    """Ship the stager and probe every node (free space, bytes present); fails naming each node."""
    payload = manifest.to_json().encode()

    def one(node: SshNode) -> NodeProbe:
        result = shell.run(node, stager_argv(ship(shell, node), "probe", staging), stdin=payload, timeout_s=120)
        events = [e for e in map(parse_event, result.stdout.splitlines()) if e and e["event"] == "probe"]
        if not events:
            raise StageFailed(f"{node.label}: the stager's probe printed no result: {result.stdout[-300:]!r}")
        return NodeProbe.from_event(node.name, events[-1])

    outcomes = run_on_all(nodes, one, max_parallel=shell.settings.max_parallel)
    failed = [o for o in outcomes if o.error]
    if failed:
        lines = [f"{o.node.label}: {o.error}" for o in failed]
        raise _error_class(failed)("could not probe {} node(s) for staging:\n  {}{}".format(
            len(failed), "\n  ".join(lines), _unreachable_hint(failed))) from failed[0].error
    return [o.value for o in outcomes]


def _unreachable_hint(failed: list[Outcome]) -> str:
    """A node that stopped answering SSH after the fabric stage passed stays in the fleet: staging
    it again cannot succeed, but the fabric stage's inventory layer replaces it."""
    gone = [o.node.name for o in failed if isinstance(o.error, RemoteUnavailable)]
    if not gone:
        return ""
    return (f"\n{', '.join(gone)} no longer answer(s) SSH: run the stages again from fabric (the migrate "
            "deployment's `rerun: [fabric]`), which isolates and replaces a node that does not answer, or tear down")


def stage(shell: Shell, nodes: list[SshNode], manifest: Manifest, blueprint: Blueprint, environ: Mapping[str, str],
          logger: logging.Logger | logging.LoggerAdapter, on_progress: OnProgress = lambda snapshot, final: None,
          timeout_s: float | None = None) -> StagedWeights:
    """``environ`` is where a custom S3 endpoint and its keys come from (``stager_env``)."""
    board = ProgressBoard([n.name for n in nodes], manifest.total_bytes, len(manifest.entries))
    argv = stager_argv(remote_dir(), "stage", blueprint.staging)
    env = stager_env(dict(environ), blueprint.aws.region)
    secrets = [env[k] for k in SECRET_ENV if k in env]
    payload, timeout = manifest.to_json().encode(), timeout_s or stage_timeout_s(manifest.total_bytes)
    on_progress(board.snapshot(), False)

    def one(node: SshNode):
        return shell.run(node, argv, env=env, stdin=payload, timeout_s=timeout,
                         on_line=_Relay(board, logger, node), secrets=secrets)

    outcomes = run_on_all(nodes, one, max_parallel=shell.settings.max_parallel,
                          on_tick=lambda: on_progress(board.snapshot(), False))
    for o in outcomes:
        if o.error is not None:
            board.fail(o.node.name, *_describe(o.error))
    on_progress(board.snapshot(), True)
    failed = [o for o in outcomes if o.error]
    if failed:
        raise _error_class(failed)(failure_message(board.snapshot())) from failed[0].error
    for p in board.snapshot():
        logger.info("%s: %d files, %.2f GB fetched in %.1f s", p.node, p.files_total, p.bytes_fetched / 1e9, p.seconds)
    return StagedWeights(tuple(NodeWeights(p.node, p.bytes_total, p.bytes_fetched, round(p.seconds, 1))
                               for p in board.snapshot()))


class _Relay:
    """Stager lines of one node -> the progress board, and the ones worth reading -> the log."""

    def __init__(self, board: ProgressBoard, logger, node: SshNode):
        self.board, self.logger, self.node = board, logger, node

    def __call__(self, stream: str, line: str) -> None:
        event = self.board.feed(self.node.name, line) if stream == "stdout" else None
        if event is None:
            if line.strip():
                self.logger.warning("%s: %s", self.node.label, line[:500])
        elif event["event"] == "error":
            self.logger.error("%s: %s: %s (%s)", self.node.label, event.get("key") or "-", event.get("reason"),
                              event.get("detail", ""))
        elif event["event"] == "file":
            self.logger.info("%s: staged %s (%s, %.1f MB fetched)", self.node.label, event.get("key"),
                             event.get("status"), (event.get("bytes_fetched") or 0) / 1e6)


def _describe(error: BaseException) -> tuple[str, str]:
    if isinstance(error, RemoteCommandFailed):
        return EXIT_REASONS.get(error.exit_code, f"stager exited {error.exit_code}"), str(error)
    if isinstance(error, RemoteCommandTimeout):
        return "timed out", str(error)
    if isinstance(error, RemoteUnavailable):
        return "unreachable", str(error)
    if isinstance(error, HostKeyMismatch):
        return "host key mismatch", str(error)
    if isinstance(error, PdliftError):
        return type(error).__name__, str(error)
    return "unexpected error", f"{type(error).__name__}: {error}"


def _error_class(failed: list[Outcome]) -> type[PdliftError]:
    """The error the stage raises, by what the caller should do: stop, re-pin, or retry."""
    errors = [o.error for o in failed]
    if any(isinstance(e, RemoteCommandFailed) and e.exit_code == VERIFY_EXIT for e in errors):
        return WeightVerificationFailed
    if any(isinstance(e, HostKeyMismatch) for e in errors):
        return HostKeyMismatch
    if all(isinstance(e, RemoteUnavailable) for e in errors):
        return RemoteUnavailable
    return StageFailed
