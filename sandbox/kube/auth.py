"""Bearer-token authentication as EKS does it (aws-iam-authenticator's rules).

A token is ``k8s-aws-v1.`` + unpadded base64url of a presigned STS GetCallerIdentity URL.
EKS replays that URL to STS; here we check what STS would: the URL targets the sandbox STS
endpoint, signs the ``x-k8s-aws-id`` header with this cluster's name, is within 15 minutes of
its X-Amz-Date (EKS ignores X-Amz-Expires beyond checking it is 0..900), and its SigV4
signature, recomputed with botocore's signer from the sandbox's dummy credentials, matches.
"""

from __future__ import annotations

import base64
import datetime as dt
import hmac
from collections.abc import Callable
from urllib.parse import parse_qs, urlsplit

from botocore.auth import SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

TOKEN_PREFIX = "k8s-aws-v1."
CLUSTER_ID_HEADER = "x-k8s-aws-id"
LIFETIME = dt.timedelta(minutes=15)
_ALLOWED_PARAMS = {"action", "version", "x-amz-algorithm", "x-amz-credential", "x-amz-date",
                   "x-amz-expires", "x-amz-security-token", "x-amz-signature",
                   "x-amz-signedheaders"}


class TokenRejected(Exception):
    """Why a token was refused (logged by the server; the client only sees 401)."""


def _decode(token: str) -> str:
    if len(token) > 4096:
        raise TokenRejected("token is too large")
    if not token.startswith(TOKEN_PREFIX):
        raise TokenRejected(f"token is missing the {TOKEN_PREFIX!r} prefix")
    body = token[len(TOKEN_PREFIX):]
    if "=" in body:
        raise TokenRejected("token is padded base64")
    try:
        return base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)).decode("utf-8")
    except (ValueError, UnicodeDecodeError) as e:
        raise TokenRejected(f"token is not base64url: {e}") from e


class TokenVerifier:
    def __init__(self, cluster_name: str, credentials: dict[str, str],
                 sts_endpoint: Callable[[], str | None],
                 clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.timezone.utc)):
        self.cluster_name = cluster_name
        self.credentials = credentials
        self.sts_endpoint = sts_endpoint
        self.clock = clock

    def verify(self, authorization: str | None) -> str:
        """Return the access key id that signed the token, or raise TokenRejected."""
        if not authorization or not authorization.startswith("Bearer "):
            raise TokenRejected("no bearer token")
        url = _decode(authorization[len("Bearer "):].strip())
        parts = urlsplit(url)
        endpoint = self.sts_endpoint()
        if not endpoint:
            raise TokenRejected("the sandbox STS endpoint is not known to the API server")
        if parts.netloc != urlsplit(endpoint).netloc or parts.scheme not in ("http", "https"):
            raise TokenRejected(f"unexpected host {parts.netloc!r} in pre-signed URL")
        if parts.path != "/":
            raise TokenRejected("unexpected path in pre-signed URL")
        query = parse_qs(parts.query, keep_blank_values=True)
        params = {}
        for key, values in query.items():
            if key.lower() not in _ALLOWED_PARAMS:
                raise TokenRejected(f"non-whitelisted query parameter {key!r}")
            if len(values) != 1:
                raise TokenRejected("query parameter with multiple values")
            params[key.lower()] = values[0]
        if params.get("action") != "GetCallerIdentity":
            raise TokenRejected("unexpected action parameter in pre-signed URL")
        signed = params.get("x-amz-signedheaders", "").lower().split(";")
        if CLUSTER_ID_HEADER not in signed:
            raise TokenRejected(f"client did not sign the {CLUSTER_ID_HEADER} header")
        try:
            expires = int(params.get("x-amz-expires", ""))
        except ValueError:
            expires = -1
        if not 0 <= expires <= 900:
            raise TokenRejected("invalid X-Amz-Expires parameter in pre-signed URL")
        try:
            date = dt.datetime.strptime(params.get("x-amz-date", ""), "%Y%m%dT%H%M%SZ")
        except ValueError as e:
            raise TokenRejected("X-Amz-Date is missing or malformed") from e
        date = date.replace(tzinfo=dt.timezone.utc)
        if self.clock() > date + LIFETIME:
            raise TokenRejected("X-Amz-Date parameter is expired (15 minute expiration)")
        self._check_signature(parts, params, signed)
        return params["x-amz-credential"].split("/")[0]

    def _check_signature(self, parts, params: dict, signed: list[str]) -> None:
        scope = params.get("x-amz-credential", "").split("/")
        if len(scope) != 5 or scope[3] != "sts" or scope[4] != "aws4_request":
            raise TokenRejected("malformed X-Amz-Credential")
        access_key, region = scope[0], scope[2]
        secret = self.credentials.get(access_key)
        if secret is None:
            raise TokenRejected("the access key is not known to the sandbox")
        unsigned_query = "&".join(p for p in parts.query.split("&")
                                  if not p.lower().startswith("x-amz-signature="))
        headers = {CLUSTER_ID_HEADER: self.cluster_name}
        request = AWSRequest(method="GET",
                             url=f"{parts.scheme}://{parts.netloc}{parts.path}?{unsigned_query}",
                             headers=headers)
        request.context["timestamp"] = params["x-amz-date"]
        signer = SigV4QueryAuth(Credentials(access_key, secret, params.get("x-amz-security-token")),
                                "sts", region, expires=int(params["x-amz-expires"]))
        if signer.signed_headers(signer.headers_to_sign(request)).split(";") != sorted(signed):
            raise TokenRejected("unexpected signed headers")
        canonical = signer.canonical_request(request)
        expected = signer.signature(signer.string_to_sign(request, canonical), request)
        if not hmac.compare_digest(expected, params.get("x-amz-signature", "")):
            raise TokenRejected("signature does not match (wrong cluster, credentials or URL)")
