"""`pdlift eks-token --cluster NAME`: an ExecCredential for kubectl, as `aws eks get-token` prints."""

from __future__ import annotations

import argparse


def _cmd_eks_token(args: argparse.Namespace) -> int:
    from tasks.adapters import eks_token

    return eks_token.main(["--cluster", args.cluster])


def register(sub: argparse._SubParsersAction, handlers: dict) -> None:
    p = sub.add_parser("eks-token", help="print a kubectl ExecCredential for an EKS cluster")
    p.add_argument("--cluster", required=True)
    handlers["eks-token"] = _cmd_eks_token
