"""A self-signed CA and a server certificate for the loopback API endpoint."""

from __future__ import annotations

import datetime as dt
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _key_pem(key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def ensure_certs(directory: Path, host: str) -> tuple[Path, Path, Path]:
    """Return (ca.crt, server.crt, server.key) in ``directory``, creating them if missing.

    Reusing them across restarts keeps an existing kubeconfig valid.
    """
    ca_crt, srv_crt, srv_key = directory / "ca.crt", directory / "server.crt", directory / "server.key"
    if ca_crt.exists() and srv_crt.exists() and srv_key.exists():
        cert = x509.load_pem_x509_certificate(srv_crt.read_bytes())
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        if ipaddress.ip_address(host) in sans.get_values_for_type(x509.IPAddress):
            return ca_crt, srv_crt, srv_key
    directory.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.timezone.utc) - dt.timedelta(minutes=5)
    later = now + dt.timedelta(days=365)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (x509.CertificateBuilder()
          .subject_name(_name("pdlift-sandbox-ca")).issuer_name(_name("pdlift-sandbox-ca"))
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now).not_valid_after(later)
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False,
                                       data_encipherment=False, key_agreement=False,
                                       encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    sans = [x509.IPAddress(ipaddress.ip_address(host)), x509.DNSName("localhost"),
            x509.DNSName("kubernetes"), x509.DNSName("kubernetes.default.svc")]
    cert = (x509.CertificateBuilder()
            .subject_name(_name("kube-apiserver")).issuer_name(ca.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now).not_valid_after(later)
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    srv_key.write_bytes(_key_pem(key))
    srv_key.chmod(0o600)
    srv_crt.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    ca_crt.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    return ca_crt, srv_crt, srv_key
