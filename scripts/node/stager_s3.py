"""A small S3 ranged-GET client for the on-node stager: Python 3.8+ standard library only.

Why not boto3 or s5cmd on the node: neither can be assumed on a GPU node's system Python
(the sandbox nodes have none; the EKS AMI has no boto3), s5cmd verifies nothing on download and
cannot resume a partial file, and boto3's classic transfer engine does not verify ranged
downloads (docs/sources.md#s3-download-verification). Ranged GETs signed with SigV4 are all the stager needs.

Credentials come from the environment only (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
AWS_SESSION_TOKEN), else from the instance profile through IMDSv2. The endpoint is
AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL (path-style) or the regional S3 endpoint. Nothing here
prints or raises a credential: errors carry the HTTP status, S3's error code and message only.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import http.client
import json
import os
import random
import re
import threading
import time
import urllib.parse

EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
RETRYABLE_STATUS = {429, 500, 502, 503, 504}
RETRYABLE_CODES = {"SlowDown", "InternalError", "RequestTimeout", "ServiceUnavailable", "ExpiredToken"}
IMDS = ("169.254.169.254", 80)


class S3Error(Exception):
    """An S3 answer we did not want; ``retryable`` says whether backing off may help."""

    def __init__(self, status, code, message, retryable):
        super().__init__("HTTP {} {}: {}".format(status, code, message[:200]))
        self.status, self.code, self.retryable = status, code, retryable


class Credentials:
    def __init__(self, access_key, secret_key, token=None, expires=None):
        self.access_key, self.secret_key, self.token, self.expires = access_key, secret_key, token, expires

    def __repr__(self):  # never show the secret, even in a debugger or a traceback
        return "Credentials(<redacted>)"


class CredentialSource:
    """Environment first, then the instance profile (refreshed five minutes before expiry)."""

    def __init__(self, environ=None):
        self._env = os.environ if environ is None else environ
        self._lock = threading.Lock()
        self._cached = None

    def get(self):
        if self._env.get("AWS_ACCESS_KEY_ID") and self._env.get("AWS_SECRET_ACCESS_KEY"):
            return Credentials(self._env["AWS_ACCESS_KEY_ID"], self._env["AWS_SECRET_ACCESS_KEY"],
                               self._env.get("AWS_SESSION_TOKEN") or None)
        with self._lock:
            if self._cached is None or (self._cached.expires or 0) - time.time() < 300:
                self._cached = self._from_imds()
            return self._cached

    def _from_imds(self):
        if self._env.get("AWS_EC2_METADATA_DISABLED", "").lower() == "true":
            raise S3Error(0, "NoCredentials", "no AWS credentials in the environment", False)
        try:
            role = _imds("/latest/meta-data/iam/security-credentials/").splitlines()[0]
            doc = json.loads(_imds("/latest/meta-data/iam/security-credentials/" + role))
        except (OSError, ValueError, IndexError, http.client.HTTPException) as e:
            raise S3Error(0, "NoCredentials", "no credentials in the environment or instance profile ({})"
                          .format(type(e).__name__), False)
        expires = datetime.datetime.strptime(doc["Expiration"], "%Y-%m-%dT%H:%M:%SZ")
        return Credentials(doc["AccessKeyId"], doc["SecretAccessKey"], doc.get("Token"),
                           expires.replace(tzinfo=datetime.timezone.utc).timestamp())


def _imds(path):
    conn = http.client.HTTPConnection(*IMDS, timeout=2)
    try:
        conn.request("PUT", "/latest/api/token", headers={"X-aws-ec2-metadata-token-ttl-seconds": "21600"})
        token = conn.getresponse().read().decode()
        conn.request("GET", path, headers={"X-aws-ec2-metadata-token": token})
        resp = conn.getresponse()
        body = resp.read().decode()
        if resp.status != 200:
            raise OSError("IMDS answered {}".format(resp.status))
        return body
    finally:
        conn.close()


def region_from_env(environ=None):
    env = os.environ if environ is None else environ
    return env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1"


class S3Client:
    """Signed ranged GETs; one keep-alive connection per thread and host."""

    def __init__(self, endpoint=None, region=None, credentials=None, connect_timeout=10.0, read_timeout=60.0):
        env = os.environ
        self.endpoint = endpoint or env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL") or None
        self.region = region or region_from_env()
        self.credentials = credentials or CredentialSource()
        self.connect_timeout, self.read_timeout = connect_timeout, read_timeout
        self._local = threading.local()

    def _target(self, bucket, key):
        path_key = urllib.parse.quote(key, safe="/~")
        if self.endpoint:
            url = urllib.parse.urlsplit(self.endpoint)
            base = url.path.rstrip("/")
            return url.scheme, url.netloc, "{}/{}/{}".format(base, bucket, path_key)
        if "." in bucket:  # dotted names break the TLS wildcard: path-style on the regional host
            return "https", "s3.{}.amazonaws.com".format(self.region), "/{}/{}".format(bucket, path_key)
        return "https", "{}.s3.{}.amazonaws.com".format(bucket, self.region), "/" + path_key

    def _connection(self, scheme, netloc):
        conns = self._local.__dict__.setdefault("conns", {})
        conn = conns.get((scheme, netloc))
        if conn is None:
            cls = http.client.HTTPSConnection if scheme == "https" else http.client.HTTPConnection
            conn = cls(netloc, timeout=self.connect_timeout)
            conns[(scheme, netloc)] = conn
        return conn

    def _drop(self, scheme, netloc):
        conn = self._local.__dict__.get("conns", {}).pop((scheme, netloc), None)
        if conn is not None:
            conn.close()

    def get_range(self, bucket, key, start, into, etag=None, version_id=None):
        """Fill ``into`` (a memoryview) with bytes [start, start + len(into)) of the object.

        ``etag`` is sent as If-Match, so an object replaced since the manifest answers 412.
        Raises S3Error, or OSError / http.client.HTTPException for the connection (retryable).
        """
        scheme, netloc, path = self._target(bucket, key)
        query = "versionId=" + urllib.parse.quote(version_id, safe="~") if version_id else ""
        headers = self._signed_headers(netloc, path, query)
        headers["Range"] = "bytes={}-{}".format(start, start + len(into) - 1)
        if etag:
            headers["If-Match"] = etag if etag.startswith('"') else '"{}"'.format(etag)
        conn = self._connection(scheme, netloc)
        try:
            conn.request("GET", path + ("?" + query if query else ""), headers=headers)
            conn.sock.settimeout(self.read_timeout)
            resp = conn.getresponse()
            if resp.status != 206:
                raise _error(resp.status, resp.read(65536))
            length = int(resp.getheader("Content-Length", "-1"))
            if length != len(into):
                raise S3Error(resp.status, "BadRange", "asked for {} bytes, got {}".format(len(into), length), True)
            got = 0
            while got < length:
                n = resp.readinto(into[got:])
                if not n:
                    raise http.client.IncompleteRead(b"", length - got)
                got += n
        except BaseException:
            self._drop(scheme, netloc)  # never reuse a connection in an unknown state
            raise

    def _signed_headers(self, netloc, path, query):
        creds = self.credentials.get()
        now = datetime.datetime.now(datetime.timezone.utc)
        amz_date, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
        headers = {"Host": netloc, "x-amz-content-sha256": EMPTY_SHA256, "x-amz-date": amz_date}
        if creds.token:
            headers["x-amz-security-token"] = creds.token
        names = sorted(h.lower() for h in headers)
        canonical_headers = "".join("{}:{}\n".format(n, _header(headers, n).strip()) for n in names)
        signed = ";".join(names)
        request = "\n".join(["GET", path, query, canonical_headers, signed, EMPTY_SHA256])
        scope = "{}/{}/s3/aws4_request".format(day, self.region)
        to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope,
                             hashlib.sha256(request.encode()).hexdigest()])
        key = ("AWS4" + creds.secret_key).encode()
        for part in (day, self.region, "s3", "aws4_request"):
            key = hmac.new(key, part.encode(), hashlib.sha256).digest()
        signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
        headers["Authorization"] = "AWS4-HMAC-SHA256 Credential={}/{}, SignedHeaders={}, Signature={}".format(
            creds.access_key, scope, signed, signature)
        return headers


def _header(headers, lower_name):
    return next(v for k, v in headers.items() if k.lower() == lower_name)


def _error(status, body):
    text = body.decode("utf-8", "replace")
    code = _xml(text, "Code") or "HTTP{}".format(status)
    message = _xml(text, "Message") or ""
    return S3Error(status, code, message, status in RETRYABLE_STATUS or code in RETRYABLE_CODES)


def _xml(text, tag):
    m = re.search(r"<{0}>([^<]*)</{0}>".format(tag), text)
    return m.group(1) if m else None


def get_range_retrying(client, bucket, key, start, into, etag, version_id, max_retries, on_retry=None,
                       base_delay=0.2, max_delay=10.0, stop=None):
    """``get_range`` with bounded retries and full-jitter backoff on 5xx, SlowDown and resets."""
    for attempt in range(max_retries + 1):
        try:
            return client.get_range(bucket, key, start, into, etag, version_id)
        except S3Error as e:
            if not e.retryable or attempt == max_retries:
                raise
            reason = e.code
        except (OSError, http.client.HTTPException) as e:
            if attempt == max_retries:
                raise
            reason = type(e).__name__
        if on_retry:
            on_retry(reason)
        delay = min(max_delay, base_delay * (2 ** attempt)) * random.uniform(0.5, 1.0)
        if stop is not None and stop.wait(delay):
            raise S3Error(0, "Aborted", "staging was aborted", False)
        elif stop is None:
            time.sleep(delay)
