"""What `up` puts into the running components: the synthetic model into S3, and the account
resources the blueprint expects into the AWS endpoint. Idempotent; fixtures call it too."""

from __future__ import annotations

import json
from pathlib import Path

from sandbox import model as sandbox_model
from sandbox import s3 as sandbox_s3
from sandbox.orchestrator.stack import REPO, Sandbox

DEFAULT_BLUEPRINT = REPO / "blueprints" / "sandbox-2p2d.yaml"


def load_blueprint(path: Path):
    from blueprints.loader import load_blueprint as load

    return load(path)


def provision(sb: Sandbox, bp, model_size_mb: int, seed: int, log=print, model: bool = True,
              account: bool = True, model_dir: Path | None = None) -> dict:
    """Everything `up` puts into running components: the model in S3 (the synthetic one, or the
    real checkpoint in ``model_dir``: the real-engine tier's), the account in AWS."""
    ctx, done = sb.context(), {}
    if model and sb.running_pid("s3"):
        s3 = sandbox_s3.client(sb.components_by_name["s3"].address(ctx))
        bucket, _ = sandbox_model.split_uri(bp.model.weights_uri)
        sandbox_s3.ensure_bucket(s3, bucket)
        if model_dir is not None:
            files, seed = sandbox_model.directory_files(model_dir)
        else:
            files = sandbox_model.model_files(sandbox_model.ModelShape.from_blueprint(bp),
                                              model_size_mb, seed)
        report = sandbox_model.upload_model(s3, bp.model.weights_uri, files, seed)
        log(f"model: {len(report.uploaded)} objects uploaded "
            f"({report.bytes_uploaded / 1e6:.0f} MB in {report.seconds:.1f} s), "
            f"{len(report.skipped)} already there, at {bp.model.weights_uri}")
        done["model_uri"] = bp.model.weights_uri
    if account and sb.running_pid("aws"):
        from sandbox.orchestrator.account import client_key
        from sandbox.orchestrator.account import provision as provision_account

        key = client_key(sb.state_dir)
        ids = provision_account(sb.components_by_name["aws"].address(ctx), bp,
                                Path(f"{key}.pub").read_bytes(),
                                sandbox_s3.ACCESS_KEY, sandbox_s3.SECRET_KEY)
        (sb.root / "account.json").write_text(json.dumps(ids, indent=2) + "\n")
        log(f"account: vpc {ids['vpc_id']}, subnets {ids['subnets']}, "
            f"security group {ids['security_group_id']}, key pair {ids['key_pair']}, "
            f"EKS {bp.aws.eks.cluster}, AMI parameter {ids['ami_parameter']}")
        done["account"] = ids
    return done
