"""`python -m sandbox.model`: generate the synthetic checkpoint into S3 or a directory."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from sandbox.model import __doc__ as DOC
from sandbox.model.files import model_files
from sandbox.model.upload import DEFAULT_URI, split_uri, upload_model, write_model


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sandbox.model", description=DOC.split("\n")[0])
    ap.add_argument("--model-size-mb", type=int, default=256)
    ap.add_argument("--shard-size-mb", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--uri", default=DEFAULT_URI, help="where in S3 (default %(default)s)")
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--endpoint", help="the sandbox S3 endpoint, e.g. http://127.0.0.1:8333")
    where.add_argument("--out-dir", type=Path, help="write the files here instead of S3")
    args = ap.parse_args(argv)
    files = model_files(size_mb=args.model_size_mb, seed=args.seed, shard_mb=args.shard_size_mb)
    if args.out_dir:
        write_model(args.out_dir, files, args.seed)
        print(f"wrote {len(files)} files ({sum(f.size for f in files) / 1e6:.0f} MB) "
              f"to {args.out_dir}")
        return 0
    from sandbox import s3 as sandbox_s3

    client = sandbox_s3.client(args.endpoint)
    sandbox_s3.ensure_bucket(client, split_uri(args.uri)[0])
    report = upload_model(client, args.uri, files, args.seed, log=print)
    print(f"{len(report.uploaded)} uploaded, {len(report.skipped)} already there, "
          f"{report.bytes_uploaded / 1e6:.0f} MB in {report.seconds:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

