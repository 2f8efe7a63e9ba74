"""Running one fabric test on the nodes: a command, an nccl-test with its -J file, a pingpong pair.

Every test ends as data, never as an exception the layer has to catch: a timeout becomes
``timed_out`` (the SSH adapter killed the command's process group), an unreachable node becomes
``error``. Only what must stop the whole stage propagates: an unknown or changed host key
(``HostKeyMismatch``) and a rejected SSH key (``StageFailed``). Output is captured line by line
as it arrives, so a killed test still leaves the lines it printed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from tasks.adapters.ssh import SshNode, run_on_all
from tasks.errors import ParseError, RemoteCommandTimeout, RemoteUnavailable, StageFailed
from tasks.parsing.nccl_json import with_log, without_env
from tasks.parsing.nccl_tests import parse_nccl_tests
from tasks.parsing.pingpong import parse_pingpong
from tasks.planning.fabric import NcclRun, PingpongRun, commands
from tasks.planning.fabric.outcome import Ran
from tasks.stages.ports import Shell

OnLine = Callable[[str, str], None]
_MAX_KEPT_LINES = 20000


class Runner:
    """The SSH shell plus where each test's raw output goes (``keep(test_id, ran)``)."""

    def __init__(self, shell: Shell, run_id: str, keep: Callable[[str, Ran], None] = lambda t, r: None):
        self.shell, self.run_id, self._keep = shell, run_id, keep

    @property
    def max_parallel(self) -> int:
        return self.shell.settings.max_parallel

    def run(self, node: SshNode, cmd: commands.Command, test_id: str, on_line: OnLine | None = None,
            clean: Callable[[str], str] = lambda stdout: stdout) -> Ran:
        """``clean``: what of stdout is kept and returned (an nccl-tests document without its env)."""
        lines: dict[str, list[str]] = {"stdout": [], "stderr": []}

        def collect(stream: str, line: str) -> None:
            if len(lines[stream]) < _MAX_KEPT_LINES:
                lines[stream].append(line)
            if on_line is not None:
                on_line(stream, line)

        start = time.monotonic()
        code, timed_out, error = None, False, None
        try:
            # secrets=[]: fabric commands carry none, and redacting env values would blank device names
            code = self.shell.run(node, list(cmd.argv), timeout_s=cmd.timeout_s, env=dict(cmd.env) or None,
                                  on_line=collect, check=False, secrets=[]).exit_code
        except RemoteCommandTimeout as e:
            timed_out, error = True, str(e)
        except RemoteUnavailable as e:
            error = str(e)
        ran = Ran(node.name, cmd.shown, code, clean("\n".join(lines["stdout"])), "\n".join(lines["stderr"]),
                  time.monotonic() - start, timed_out, error)
        self._keep(test_id, ran)
        return ran

    # --- nccl-tests -------------------------------------------------------------------------------

    def nccl(self, node: SshNode, collective: str, test_id: str,
             build: Callable[[str], commands.Command]) -> NcclRun:
        """Run an nccl-test with ``-J`` into the run's scratch dir, fetch the JSON, judge-ready."""
        path = commands.json_path(self.run_id, test_id)
        ran = self.run(node, build(path), test_id)
        doc = ""
        if ran.error is None or ran.timed_out:
            fetched = self.run(node, commands.fetch_and_remove(path), f"{test_id}.json", clean=without_env)
            doc = fetched.stdout if fetched.ok else ""
        log = f"{ran.stdout}\n{ran.stderr}"
        result, problem = None, None
        try:
            result = with_log(parse_nccl_tests(doc), log) if doc.strip() else parse_nccl_tests(log)
        except ParseError as e:  # a JSON cut short: the text still tells what happened
            problem = str(e)
            try:
                result = parse_nccl_tests(log) if doc.strip() else None
            except ParseError:
                result = None
        error = ran.error
        if result is None:
            error = "; ".join(x for x in (ran.error, problem, ran.tail() and f"output: {ran.tail()}") if x)
        return NcclRun(collective, result, ran.exit_code, ran.timed_out, error or None)

    # --- fi_pingpong ------------------------------------------------------------------------------

    def pingpong(self, server: SshNode, client: SshNode, cmds: tuple[commands.Command, commands.Command],
                 test_id: str, listen_wait_s: float, port: int) -> PingpongRun:
        """Start the server, start the client once the server listens, judge both logs together."""
        listening = threading.Event()
        done: dict[str, Ran] = {}
        failed: list[BaseException] = []

        def on_server_line(stream: str, line: str) -> None:
            if stream == "stderr" and line.startswith(commands.LISTENING_MARKER):
                listening.set()

        def serve() -> None:
            try:
                done["server"] = self.run(server, cmds[0], f"{test_id}.server", on_server_line)
            except BaseException as e:  # noqa: BLE001 - handed to the caller's thread below
                failed.append(e)

        thread = threading.Thread(target=serve, name=f"pdlift-serve-{test_id}", daemon=True)
        thread.start()
        deadline = time.monotonic() + listen_wait_s
        while not listening.wait(0.05) and thread.is_alive() and time.monotonic() < deadline:
            pass
        client_ran = self.run(client, cmds[1], f"{test_id}.client") if listening.is_set() else None
        thread.join(2.0)
        if thread.is_alive() and client_ran is not None:  # the client gave up: the server would wait on
            self._stop_server(server, port, test_id)
        thread.join(cmds[0].timeout_s + 30)
        if failed:
            raise failed[0]  # a host key refused on the server's node stops the stage
        return _pingpong_run(client_ran, done.get("server"))

    def loopback(self, node: SshNode, cmd: commands.Command, test_id: str) -> PingpongRun:
        """One NIC's server and client in one session (``commands.LOOPBACK_SCRIPT``)."""
        ran = self.run(node, cmd, test_id)
        gave_up = commands.NEVER_LISTENED in ran.stdout  # the script killed a server that never listened
        return _parsed(ran.stdout, ran.exit_code, ran.timed_out or gave_up, [ran.error] if ran.error else [])

    def _stop_server(self, node: SshNode, port: int, test_id: str) -> None:
        pids = commands.serving_on(self.run(node, commands.list_processes(), f"{test_id}.ps").stdout, port)
        if pids:
            self.run(node, commands.kill_processes(pids), f"{test_id}.stop-server")

    # --- leftovers --------------------------------------------------------------------------------

    def sweep(self, nodes: list[SshNode], test_id: str) -> dict[str, list[str]]:
        """Kill any process of ours still running on the nodes (by PID); what was found, per node."""

        def one(node: SshNode) -> list[str]:
            found = commands.leftover_processes(self.run(node, commands.list_processes(), f"{test_id}.ps").stdout)
            if not found:
                return []
            self.run(node, commands.kill_processes([pid for pid, _ in found]), f"{test_id}.kill")
            still = commands.leftover_processes(self.run(node, commands.list_processes(), f"{test_id}.ps-after").stdout)
            return [f"{pid} {args}" + (" (still running)" if pid in {p for p, _ in still} else " (killed)")
                    for pid, args in found]

        outcomes = run_on_all(nodes, one, max_parallel=self.max_parallel)
        raise_fatal(outcomes)
        return {o.node.name: o.value for o in outcomes if o.value}

    def prepare(self, nodes: list[SshNode]) -> None:
        """The scratch directory for -J files on every node (failures surface in the tests)."""
        raise_fatal(run_on_all(nodes, lambda n: self.run(n, commands.make_scratch(self.run_id), "scratch"),
                               max_parallel=self.max_parallel))


def raise_fatal(outcomes) -> None:
    """Re-raise what must stop the stage (host key refused, SSH key rejected, a bug)."""
    for o in outcomes:
        if o.error is not None and not isinstance(o.error, RemoteUnavailable):
            if isinstance(o.error, StageFailed):
                raise o.error
            raise StageFailed(f"{o.node.label}: fabric test failed unexpectedly: "
                              f"{type(o.error).__name__}: {o.error}") from o.error


def _pingpong_run(client: Ran | None, server: Ran | None) -> PingpongRun:
    parts, code, timed_out, errors = [], None, False, []
    for label, ran in (("Client", client), ("Server", server)):
        if ran is None:
            continue
        parts.append(f"{label} Log:\n{ran.stdout}\n{ran.stderr}")
        timed_out |= ran.timed_out
        if ran.error:
            errors.append(f"{label.lower()}: {ran.error}")
    if client is None:  # the server never listened: its own exit tells why
        code = server.exit_code if server is not None else None
        errors.append("server never listened; client not started")
        timed_out |= server is not None and server.exit_code == 137  # our wait gave up and killed it
    else:
        code = client.exit_code
        if code == 0 and server is not None and server.exit_code not in (0, None):
            code = server.exit_code
    return _parsed("\n".join(parts), code, timed_out, errors)


def _parsed(text: str, code: int | None, timed_out: bool, errors: list[str]) -> PingpongRun:
    try:
        result = parse_pingpong(text, exit_code=code)
    except ParseError as e:
        return PingpongRun(None, code, timed_out, "; ".join([*errors, str(e)]))
    return PingpongRun(result, code, timed_out, "; ".join(errors) or None)
