"""The one place paramiko and socket errors become pdlift errors, for every SSH call.

    BadHostKeyException       HostKeyMismatch    the node offers a key other than the pinned one
    AuthenticationException   RequestRejected    our SSH key was refused: fix aws.ssh.key_pair/key_file
      but its timeout         RemoteUnavailable  no answer to the authentication in time: a busy node
    an SFTP status error      StageFailed        the node answered no (permission, no space)
    SSHException, OSError,    RemoteUnavailable  refused, reset, silent or lost: may pass when retried
    EOFError, socket timeout
"""

from __future__ import annotations

import paramiko

from tasks.adapters.ssh_hostkeys import mismatch
from tasks.errors import PdliftError, RemoteUnavailable, RequestRejected, StageFailed


# paramiko's own text when the server has not answered the authentication within auth_timeout
# (paramiko/auth_handler.py, AuthHandler.wait_for_response): the node was slow, our key was not
# refused. Seen from a sandbox node's sshd on a starved CPU, reported as "the SSH key was rejected".
AUTH_TIMEOUT = "Authentication timeout."


def is_auth_timeout(e: BaseException) -> bool:
    return isinstance(e, paramiko.AuthenticationException) and str(e) == AUTH_TIMEOUT


def translate(e: BaseException, what: str, *, sftp: bool = False) -> PdliftError:
    """``e`` as the project's error about ``what`` (which names the node and the operation).

    With ``sftp``, an OSError that is not a transport failure is the SFTP server's status reply
    (paramiko raises IOError for SFTP_PERMISSION_DENIED, SFTP_NO_SUCH_FILE, SFTP_FAILURE)."""
    if isinstance(e, PdliftError):
        return e
    if isinstance(e, paramiko.BadHostKeyException):
        return mismatch(what, e.key, e.expected_key)
    if is_auth_timeout(e):
        return RemoteUnavailable(f"{what}: no answer to the SSH authentication in time ({e})")
    if isinstance(e, paramiko.AuthenticationException):
        return RequestRejected(f"{what}: the SSH key was rejected; check aws.ssh.key_pair/key_file", code="AuthFailed")
    if sftp and isinstance(e, OSError) and not isinstance(e, (ConnectionError, TimeoutError)):
        return StageFailed(f"{what}: {e}")
    if isinstance(e, (paramiko.SSHException, OSError, EOFError)):
        return RemoteUnavailable(f"{what} ({type(e).__name__}: {e})")
    raise TypeError(f"not an SSH error: {type(e).__name__}")
