"""`pdlift iam-policy` and `pdlift eks-token --cluster NAME`: what AWS needs of an operator."""

from __future__ import annotations

import argparse


def _cmd_iam(args: argparse.Namespace) -> int:
    """The policy; with a blueprint, the S3 statements of its weights and shared state store too."""
    from tasks.planning.iam import render

    uri, weights = args.state_uri, args.weights_uri
    if args.blueprint:
        from blueprints.loader import load_blueprint
        from tasks.wiring import Wiring

        bp = load_blueprint(args.blueprint)
        uri = uri if uri is not None else Wiring(bp).state_uri
        weights = weights if weights is not None else bp.model.weights_uri
    print(render(uri, weights))
    return 0


def _cmd_eks_token(args: argparse.Namespace) -> int:
    from tasks.adapters import eks_token

    return eks_token.main(["--cluster", args.cluster])


def register(sub: argparse._SubParsersAction, handlers: dict) -> None:
    p = sub.add_parser("iam-policy", help="print the least-privilege IAM policy pdlift needs")
    p.add_argument("blueprint", nargs="?", default=None,
                   help="include the S3 statements of its weights (model.weights_uri) and state store "
                        "(state.uri, or PDLIFT_STATE_URI)")
    p.add_argument("--state-uri", default=None, help="s3://bucket/prefix of the state store (overrides the blueprint)")
    p.add_argument("--weights-uri", default=None, help="s3://bucket/prefix/ of the weights (overrides the blueprint)")
    handlers["iam-policy"] = _cmd_iam
    p = sub.add_parser("eks-token", help="print a kubectl ExecCredential for an EKS cluster")
    p.add_argument("--cluster", required=True)
    handlers["eks-token"] = _cmd_eks_token
