"""`scripts/demo --postgres`: Debian's PostgreSQL on loopback for the demo's Prefect server, and the
S3 state store on the sandbox's S3 (run state where any worker can reach it, as in production).

The cluster lives in a directory of its own outside the checkout (the postgres user must reach it;
a checkout under a private temporary directory is 0700), recorded in .pdlift/demo/postgres.json
so `scripts/demo --down` stops it. Trust authentication on 127.0.0.1 only: a local demo.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import pwd
import subprocess
import time
from pathlib import Path

PG_USER = "postgres"
STATE_BUCKET = "pdlift-state"


def _bin() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not found:
        raise SystemExit("demo --postgres: PostgreSQL is not installed (scripts/setup installs Debian's postgresql)")
    return Path(found[-1]).parent


def _as_user() -> list[str]:
    return ["runuser", "-u", PG_USER, "--"] if os.geteuid() == 0 else []


def _env() -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if not k.startswith("PG")}, "LC_ALL": "C"}


def start(demo_dir: Path, repo: Path, port: int) -> tuple[str, float]:
    """(the SQLAlchemy URL of the demo's database, seconds it took); idempotent."""
    bin_dir, t0 = _bin(), time.monotonic()
    root = Path(f"/var/tmp/pdlift-demo-pg-{hashlib.sha256(str(repo).encode()).hexdigest()[:10]}")
    url = f"postgresql+asyncpg://{PG_USER}@127.0.0.1:{port}/prefect"
    demo_dir.mkdir(parents=True, exist_ok=True)
    (demo_dir / "postgres.json").write_text(json.dumps({"root": str(root), "port": port, "bin": str(bin_dir)}))
    if subprocess.run([*_as_user(), str(bin_dir / "pg_ctl"), "-D", str(root / "data"), "status"],
                      capture_output=True, env=_env()).returncode == 0:
        return url, time.monotonic() - t0
    if not (root / "data" / "PG_VERSION").exists():
        root.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            pw = pwd.getpwnam(PG_USER)
            os.chown(root, pw.pw_uid, pw.pw_gid)
        subprocess.run([*_as_user(), str(bin_dir / "initdb"), "-D", str(root / "data"), "--auth=trust", "-U", PG_USER,
                        "-E", "UTF8", "--no-locale", "--no-instructions"], check=True, capture_output=True,
                       env=_env(), cwd=root)
    subprocess.run([*_as_user(), str(bin_dir / "pg_ctl"), "-D", str(root / "data"), "-l", str(root / "postgres.log"),
                    "-o", f"-c listen_addresses=127.0.0.1 -p {port} -k {root}", "-w", "-t", "120", "start"],
                   check=True, capture_output=True, env=_env(), cwd=root)
    subprocess.run([str(bin_dir / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", PG_USER, "prefect"],
                   capture_output=True, env=_env(), cwd=root)  # exists already on a restart: fine
    return url, time.monotonic() - t0


def stop(demo_dir: Path) -> None:
    info_file = demo_dir / "postgres.json"
    if not info_file.exists():
        return
    info = json.loads(info_file.read_text())
    subprocess.run([*_as_user(), str(Path(info["bin"]) / "pg_ctl"), "-D", str(Path(info["root"]) / "data"),
                    "-m", "fast", "-w", "stop"], capture_output=True, env=_env(), cwd="/")
    info_file.unlink()
    print(f"demo: stopped PostgreSQL ({info['root']}, port {info['port']})")


def state_uri(env: dict[str, str]) -> str:
    """The demo's S3 state store on the sandbox's S3 (its bucket made if missing)."""
    import boto3
    from botocore.config import Config

    s3 = boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL_S3"], aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                      aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"], region_name=env.get("AWS_DEFAULT_REGION"),
                      config=Config(s3={"addressing_style": "path"}))
    try:
        s3.head_bucket(Bucket=STATE_BUCKET)
    except Exception:
        s3.create_bucket(Bucket=STATE_BUCKET)
    return f"s3://{STATE_BUCKET}/demo"
