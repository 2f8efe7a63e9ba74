"""`python -m sandbox.engines -- COMMAND ARGS...`: run a container command as a sandbox engine.

Recognised commands (as a container would have them):
  vllm serve MODEL ...                              -> vLLM engine
  python[3] -m vllm.entrypoints.openai.api_server   -> vLLM engine (--model)
  python[3] -m sglang.launch_server ...             -> SGLang engine
  vllm-router ...                                   -> vLLM router
  python[3] -m sglang_router.launch_router ...      -> SGLang router
  mooncake_master ...                               -> Mooncake master
  dcgm-exporter ...                                 -> the DCGM exporter of one GPU node
  sh|bash -c 'SCRIPT' ...                           -> the real shell runs SCRIPT with ``vllm``,
      ``vllm-router``, ``mooncake_master``, ``python`` and ``python3`` shimmed on PATH: env vars and
      ``$( ... )`` expand for real, engine commands re-enter here, any other ``python`` use goes
      to the real interpreter. (Absolute interpreter paths in SCRIPT bypass the shims.)

Exit codes: 2 for command-line errors (argparse, as the real CLIs), 1 for refused
configurations and injected start-up crashes, 127 for an unrecognised command.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import signal
import sys
import tempfile
from pathlib import Path

from sandbox.engines.settings import REPO_ROOT

SHELLS = {"sh", "bash", "dash", "ash"}
SHIMMED = ("vllm", "vllm-router", "mooncake_master", "python", "python3")
VLLM_MODULES = ("vllm.entrypoints.openai.api_server", "vllm.entrypoints.api_server")
STAND_INS = {"vllm", "vllm-router", "mooncake_master"}  # dcgm-exporter serves without aiohttp (dcgm.py)
ENGINE_MODULES = {*VLLM_MODULES, "sglang.launch_server", "sglang_router.launch_router"}
USAGE = "usage: python -m sandbox.engines -- COMMAND [ARGS...]"


def _refused(message: str) -> int:
    """A configuration the real engine refuses: its error on stderr, exit 1."""
    print(f"ValueError: {message}", file=sys.stderr, flush=True)
    return 1


def _engine(kind: str, args: list[str], prog: str) -> int:
    from sandbox.engines import cli_sglang, cli_vllm, server
    from sandbox.engines.config import ConfigError

    if kind == "vllm" and os.environ.get("PDLIFT_SANDBOX_REAL_ENGINES"):  # the real CPU build (sandbox/engines/real)
        from sandbox.engines.real import flags as real_flags, launch as real_launch

        return real_launch.run(["vllm", "serve", *args] if prog == "vllm serve"
                               else ["python", *real_flags.API_SERVER, *args])

    parser = cli_vllm.parse if kind == "vllm" else cli_sglang.parse
    try:
        cfg = parser(args, prog=prog)
    except ConfigError as e:
        return _refused(str(e))
    return server.run_engine(cfg)


def _router(args: list[str], flavour: str) -> int:
    import asyncio

    from sandbox.engines import cli_router, router
    from sandbox.engines.config import ConfigError

    try:
        cfg = cli_router.parse(args, flavour)
    except ConfigError as e:
        return _refused(str(e))
    return asyncio.run(router.serve(cfg))


def _python_module(args: list[str]) -> tuple[str | None, list[str]]:
    """The module of ``python [opts] -m MODULE args``, or None for scripts and -c."""
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "-m":
            return (args[i + 1], args[i + 2:]) if i + 1 < len(args) else (None, [])
        if arg.startswith("-m"):
            return arg[2:], args[i + 1:]
        if arg in ("-X", "-W"):
            i += 2
            continue
        if arg.startswith("-") and arg != "-" and not arg.startswith("-c"):
            i += 1
            continue
        return None, []
    return None, []


def shim_dir() -> Path:
    """A folder of tiny scripts that send engine commands back here (idempotent, per interpreter)."""
    key = hashlib.sha1(f"{sys.executable}\0{REPO_ROOT}".encode()).hexdigest()[:12]
    folder = Path(tempfile.gettempdir()) / f"pdlift-engine-shims-{os.getuid()}-{key}"
    folder.mkdir(parents=True, exist_ok=True)
    for name in SHIMMED:
        text = f'#!/bin/sh\nexec "{sys.executable}" -m sandbox.engines --shim -- {name} "$@"\n'
        target = folder / name
        if not target.exists() or target.read_text() != text:
            tmp = folder / f".{name}.{os.getpid()}"
            tmp.write_text(text)
            tmp.chmod(0o755)
            os.replace(tmp, target)
    return folder


def _exec_shell(argv: list[str]) -> int:
    env = dict(os.environ)
    env["PATH"] = f"{shim_dir()}{os.pathsep}{env.get('PATH', os.defpath)}"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    shell = argv[0] if os.path.isabs(argv[0]) and os.path.exists(argv[0]) else shutil.which(argv[0]) or "/bin/sh"
    sys.stdout.flush()
    os.execve(shell, [shell, *argv[1:]], env)
    return 127  # not reached


def _die_with_shell_parent() -> None:
    """Started by a pod's shell: exit when that shell does, as a container's processes would."""
    try:
        parent = Path(f"/proc/{os.getppid()}/comm").read_text().strip()
        if parent in SHELLS:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def _import_aiohttp_without_ca_bundle() -> None:
    """Import aiohttp (the engines, routers and Mooncake master serve with it) without reading the
    system's CA bundle.

    aiohttp builds two default SSL contexts when it is imported (aiohttp/connector.py,
    ``_SSL_CONTEXT_VERIFIED``), and OpenSSL parses the whole bundle for the verified one: about
    90 ms of a stand-in's 270 ms of imports, in each of the few hundred engine and router
    processes a test run starts. The stand-ins speak plain HTTP on loopback and never verify a
    peer; the bundle's variables point nowhere only while aiohttp is imported, so nothing this
    process starts afterwards inherits them."""
    saved = {name: os.environ.get(name) for name in ("SSL_CERT_FILE", "SSL_CERT_DIR")}
    os.environ["SSL_CERT_FILE"] = os.devnull
    os.environ["SSL_CERT_DIR"] = os.devnull
    try:
        import aiohttp  # noqa: F401
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def dispatch(argv: list[str]) -> int:
    name = os.path.basename(argv[0])
    if name in SHELLS and len(argv) > 1 and argv[1].startswith("-") and "c" in argv[1][1:]:
        return _exec_shell(argv)
    if name in STAND_INS or (name.startswith("python") and _python_module(argv[1:])[0] in ENGINE_MODULES):
        _import_aiohttp_without_ca_bundle()
    if name == "vllm":
        if argv[1:2] != ["serve"]:
            print("usage: vllm <command> [options]\nvllm: error: argument subparser: invalid choice: "
                  f"'{argv[1] if len(argv) > 1 else ''}' (the sandbox supports 'serve')", file=sys.stderr)
            return 2
        return _engine("vllm", argv[2:], "vllm serve")
    if name == "vllm-router":
        return _router(argv[1:], "vllm")
    if name == "mooncake_master":
        from sandbox.engines import mooncake_master

        return mooncake_master.main(argv[1:])
    if name == "dcgm-exporter":
        from sandbox.engines import dcgm

        return dcgm.main(argv[1:])
    if name.startswith("python"):
        module, rest = _python_module(argv[1:])
        if module == "sglang.launch_server":
            return _engine("sglang", rest, "launch_server.py")
        if module == "sglang_router.launch_router":
            return _router(rest, "sglang")
        if module in VLLM_MODULES:
            return _engine("vllm", rest, "api_server.py")
        sys.stdout.flush()
        os.execv(sys.executable, [sys.executable, *argv[1:]])  # not an engine: the real interpreter
    print(f"sandbox engines: {argv[0]}: not a recognised engine command", file=sys.stderr)
    return 127


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    shim = bool(args) and args[0] == "--shim"
    if shim:
        args = args[1:]
    if args[:1] == ["--"]:
        args = args[1:]
    if not args:
        print(USAGE, file=sys.stderr)
        return 2
    if shim:
        _die_with_shell_parent()
    return dispatch(args)
