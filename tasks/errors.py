"""One exception tree for pdlift, split by what the caller should do next.

    PdliftError
    ├── ConfigError              fix the input (blueprint, flags, files), then run again
    │   └── BlueprintError       carries file, line, column, field path, expected, hint
    ├── TransientError           retry the same request (same ClientToken), it may pass
    │   ├── ApiThrottled         the provider asked us to slow down
    │   ├── CapacityUnavailable  no capacity in this AZ now: block the AZ, fail over
    │   ├── NotReadyYet          a poll that has not converged yet
    │   └── RemoteUnavailable    a node or endpoint did not answer (connection, timeout)
    ├── StageFailed              stop this stage; the message says what to do next
    │   ├── RequestRejected      the provider refused the request (quota, parameters, credentials)
    │   ├── ResourceGone         the resource does not exist (any more): a delete of it is done
    │   ├── HostKeyMismatch      an SSH host key is unknown or changed: never connect
    │   ├── RemoteCommandFailed  a command on a node exited non-zero
    │   ├── RemoteCommandTimeout a command on a node ran past its timeout and was killed
    │   ├── FabricCheckFailed
    │   ├── WeightVerificationFailed
    │   ├── StackNotReady
    │   │   └── StackFailure     the candidate did not come up: reason class and diagnostics
    │   ├── BenchmarkBelowGate
    │   └── ParseError           a tool printed something the parser cannot read

Adapters translate vendor exceptions into this tree with ``raise ... from e``, one translator
per vendor: ``tasks.adapters.aws_client.translate`` (botocore: EC2, EKS, S3, STS),
``tasks.adapters.kube_errors.translate`` (the Kubernetes API) and
``tasks.adapters.ssh_errors.translate`` (paramiko). Nothing above ``tasks/adapters`` catches a
vendor exception. Retry decisions are made on the class (see ``is_transient``), never on
message text.
"""

from __future__ import annotations


class PdliftError(Exception):
    """Root of every error pdlift raises on purpose."""


class ConfigError(PdliftError):
    """The input is wrong; fixing it (not retrying) is the way forward."""


class BlueprintError(ConfigError):
    """A blueprint failed to load or validate.

    The message is one line per problem, each naming file:line:column, the field path,
    what was expected and a hint; it is what `pdlift validate` prints.
    """

    def __init__(self, problems: list["BlueprintProblem"]):
        self.problems = problems
        super().__init__("\n".join(p.render() for p in problems))


class BlueprintProblem:
    """One problem in a blueprint file, located as precisely as the YAML allows."""

    __slots__ = ("file", "line", "column", "field", "message", "hint")

    def __init__(self, file: str, line: int | None, column: int | None, field: str,
                 message: str, hint: str = ""):
        self.file, self.line, self.column = file, line, column
        self.field, self.message, self.hint = field, message, hint

    def render(self) -> str:
        where = self.file
        if self.line is not None:
            where += f":{self.line}:{self.column or 1}"
        text = f"{where}: {self.field or '(document)'}: {self.message}"
        if self.hint:
            text += f" (hint: {self.hint})"
        return text

    def __repr__(self) -> str:
        return f"BlueprintProblem({self.render()!r})"


class TransientError(PdliftError):
    """Retrying the same request later may succeed."""


class ApiThrottled(TransientError):
    """The provider throttled us (e.g. EC2 RequestLimitExceeded)."""


class CapacityUnavailable(TransientError):
    """No capacity for the request in this place now; try another AZ or later."""

    def __init__(self, message: str, *, zone: str | None = None, code: str | None = None):
        super().__init__(message)
        self.zone, self.code = zone, code


class NotReadyYet(TransientError):
    """A poll has not converged yet; poll again within the deadline."""


class RemoteUnavailable(TransientError):
    """A node or endpoint did not answer (refused, reset, timed out)."""


class StageFailed(PdliftError):
    """This stage cannot complete; the message says which resource and what to do."""


class RequestRejected(StageFailed):
    """The provider refused the request for a reason retrying cannot fix."""

    def __init__(self, message: str, *, code: str | None = None):
        super().__init__(message)
        self.code = code


class ResourceGone(StageFailed):
    """The resource does not exist (any more). Stop, unless deleting it was the point: then it is done."""


class HostKeyMismatch(StageFailed):
    """An SSH host key was unknown or differs from the pinned one."""


class RemoteCommandFailed(StageFailed):
    """A remote command exited non-zero."""

    def __init__(self, message: str, *, node: str, exit_code: int):
        super().__init__(message)
        self.node, self.exit_code = node, exit_code


class RemoteCommandTimeout(StageFailed):
    """A remote command ran past its timeout and its process group was killed."""

    def __init__(self, message: str, *, node: str, cleaned_up: bool):
        super().__init__(message)
        self.node, self.cleaned_up = node, cleaned_up


class FabricCheckFailed(StageFailed):
    """The EFA fabric or GPUs of one or more nodes failed validation."""


class WeightVerificationFailed(StageFailed):
    """A staged file did not match the manifest."""


class StackNotReady(StageFailed):
    """The serving stack did not become ready, or its data path is wrong."""


class StackFailure(StackNotReady):
    """The candidate failed to come up or its data path is wrong. ``reason`` is a short class
    (CrashLoopBackOff, ImagePullBackOff, FailedScheduling, Timeout:<phase>, Canary, NoRoom,
    KeptColour); ``diagnostics`` is the full text (events, log tails) for the run's artifact;
    ``applied_nothing`` says it was refused before any apply (the colour it names may be
    someone else's: never roll it back)."""

    def __init__(self, message: str, reason: str, diagnostics: str = "", applied_nothing: bool = False):
        super().__init__(message)
        self.reason, self.diagnostics = reason, diagnostics or message
        self.applied_nothing = applied_nothing


class RunHeld(StageFailed):
    """Another flow run holds this run's lease: it is being driven elsewhere right now."""


class BenchmarkBelowGate(StageFailed):
    """The candidate did not clear the promotion gate."""


class ParseError(StageFailed):
    """A tool's output could not be parsed: stop, and read what it printed (the message quotes it)."""


def is_transient(exc: BaseException) -> bool:
    """True when retrying the same call may succeed (drives Prefect retry_condition_fn)."""
    return isinstance(exc, TransientError)


def retry_if_transient(task, task_run, state) -> bool:
    """A Prefect ``retry_condition_fn``: retry a task run only when it failed transiently."""
    try:
        state.result()
    except Exception as e:  # noqa: BLE001 - classification only
        return is_transient(e)
    return False
