"""`pdlift iam-policy` and `pdlift eks-token --cluster NAME`: what AWS needs of an operator."""

from __future__ import annotations

import argparse


def _cmd_iam(args: argparse.Namespace) -> int:
    from tasks.planning.iam import render

    print(render())
    return 0


def _cmd_eks_token(args: argparse.Namespace) -> int:
    from tasks.adapters import eks_token

    return eks_token.main(["--cluster", args.cluster])


def register(sub: argparse._SubParsersAction, handlers: dict) -> None:
    sub.add_parser("iam-policy", help="print the least-privilege IAM policy pdlift needs")
    handlers["iam-policy"] = _cmd_iam
    p = sub.add_parser("eks-token", help="print a kubectl ExecCredential for an EKS cluster")
    p.add_argument("--cluster", required=True)
    handlers["eks-token"] = _cmd_eks_token
