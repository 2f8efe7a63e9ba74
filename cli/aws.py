"""`pdlift iam-policy` and `pdlift eks-token --cluster NAME`: what AWS needs of an operator."""

from __future__ import annotations

import argparse


def _cmd_iam(args: argparse.Namespace) -> int:
    """The policy; with the blueprint's shared state store (or --state-uri), its S3 statements too."""
    from tasks.planning.iam import render

    uri = args.state_uri
    if uri is None and args.blueprint:
        from blueprints.loader import load_blueprint
        from tasks.wiring import Wiring

        uri = Wiring(load_blueprint(args.blueprint)).state_uri
    print(render(uri))
    return 0


def _cmd_eks_token(args: argparse.Namespace) -> int:
    from tasks.adapters import eks_token

    return eks_token.main(["--cluster", args.cluster])


def register(sub: argparse._SubParsersAction, handlers: dict) -> None:
    p = sub.add_parser("iam-policy", help="print the least-privilege IAM policy pdlift needs")
    p.add_argument("blueprint", nargs="?", default=None,
                   help="include its state store's S3 statements (state.uri, or PDLIFT_STATE_URI)")
    p.add_argument("--state-uri", default=None, help="s3://bucket/prefix of the state store (overrides the blueprint)")
    handlers["iam-policy"] = _cmd_iam
    p = sub.add_parser("eks-token", help="print a kubectl ExecCredential for an EKS cluster")
    p.add_argument("--cluster", required=True)
    handlers["eks-token"] = _cmd_eks_token
