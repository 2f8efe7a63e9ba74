"""EKS bearer tokens, made exactly as `aws eks get-token` makes them.

An EKS token is ``k8s-aws-v1.`` + the unpadded base64url of a presigned STS
GetCallerIdentity URL whose signature covers the ``x-k8s-aws-id`` header (the cluster
name). The API server replays that URL against STS to learn who is calling. Presigning is
local: no request is sent to STS here.

EKS treats the token as valid for 15 minutes after its X-Amz-Date, whatever X-Amz-Expires
says (the CLI puts 60 there for old authenticators), so the ExecCredential we print expires
after 14 minutes, as the AWS CLI's does, and kubectl asks for a new one in time.

Run as a kubectl exec credential plugin::

    python -m tasks.adapters.eks_token --cluster NAME [--region REGION]
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import json
import sys
from collections.abc import Sequence
from typing import Any

TOKEN_PREFIX = "k8s-aws-v1."
CLUSTER_ID_HEADER = "x-k8s-aws-id"
URL_TIMEOUT_SECONDS = 60
TOKEN_LIFETIME = dt.timedelta(minutes=14)
EXEC_CREDENTIAL_API_VERSION = "client.authentication.k8s.io/v1beta1"


def _move_cluster_id_to_context(params: dict, context: dict, **_: Any) -> None:
    # The cluster name rides in Params only to reach the signer; it is not an STS parameter.
    if CLUSTER_ID_HEADER in params:
        context[CLUSTER_ID_HEADER] = params.pop(CLUSTER_ID_HEADER)


def _inject_cluster_id_header(request: Any, **_: Any) -> None:
    if CLUSTER_ID_HEADER in request.context:
        request.headers[CLUSTER_ID_HEADER] = request.context[CLUSTER_ID_HEADER]


def _sts_client(session_or_sts_client: Any) -> Any:
    """Accept a boto3 Session (or botocore session) or an STS client already built."""
    meta = getattr(session_or_sts_client, "meta", None)
    if meta is not None and getattr(meta, "service_model", None) is not None:
        if meta.service_model.service_name != "sts":
            raise ValueError("get_token needs an STS client, got "
                             f"{meta.service_model.service_name!r}")
        return session_or_sts_client
    if hasattr(session_or_sts_client, "client"):  # boto3.Session
        return session_or_sts_client.client("sts")
    return session_or_sts_client.create_client("sts")  # botocore.session.Session


def get_token(session_or_sts_client: Any, cluster_name: str) -> str:
    """Return an EKS bearer token for ``cluster_name`` signed with the session's credentials.

    The STS endpoint signed for is the client's (so ``AWS_ENDPOINT_URL_STS`` applies).
    """
    if not cluster_name:
        raise ValueError("cluster_name is required")
    sts = _sts_client(session_or_sts_client)
    events = sts.meta.events
    # unique_id makes registration idempotent when the same client signs many tokens.
    events.register("provide-client-params.sts.GetCallerIdentity",
                    _move_cluster_id_to_context, unique_id="pdlift-eks-token-params")
    events.register("before-sign.sts.GetCallerIdentity",
                    _inject_cluster_id_header, unique_id="pdlift-eks-token-header")
    url = sts.generate_presigned_url(
        "get_caller_identity",
        Params={CLUSTER_ID_HEADER: cluster_name},
        ExpiresIn=URL_TIMEOUT_SECONDS,
        HttpMethod="GET",
    )
    encoded = base64.urlsafe_b64encode(url.encode("utf-8")).decode("ascii").rstrip("=")
    return TOKEN_PREFIX + encoded


def exec_credential(token: str, now: dt.datetime | None = None) -> dict:
    """The ExecCredential object kubectl reads from a credential plugin's stdout."""
    now = now or dt.datetime.now(dt.timezone.utc)
    expires = (now + TOKEN_LIFETIME).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "kind": "ExecCredential",
        "apiVersion": EXEC_CREDENTIAL_API_VERSION,
        "spec": {},
        "status": {"expirationTimestamp": expires, "token": token},
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="pdlift eks-token",
        description="Print a kubectl ExecCredential for an EKS cluster (like `aws eks get-token`).")
    parser.add_argument("--cluster", "--cluster-name", dest="cluster", required=True)
    parser.add_argument("--region", default=None)
    args = parser.parse_args(argv)

    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        session = boto3.Session(region_name=args.region) if args.region else boto3.Session()
        token = get_token(session, args.cluster)
    except (BotoCoreError, ClientError) as e:
        # kubectl shows the plugin's stderr; say what is missing rather than dumping a trace.
        print(f"pdlift eks-token: cannot sign an EKS token for cluster {args.cluster!r}: {e}",
              file=sys.stderr)
        return 1
    print(json.dumps(exec_credential(token)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
