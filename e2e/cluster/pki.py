"""Certificates and keys for the local control plane, made with `cryptography`.

One CA signs the API server's serving certificate (for 127.0.0.1, localhost and the in-cluster
names) and a client certificate per component, whose subject is the identity RBAC sees:
`admin` in `system:masters` for the tests and KWOK, `system:kube-controller-manager` and
`system:kube-scheduler` for the two controllers (the API server's bootstrap RBAC already binds
those names to their roles). A separate RSA key pair signs service-account tokens.

Called by `e2e.cluster.local` when a cluster is brought up.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALID_FOR = dt.timedelta(days=2)


@dataclass(frozen=True)
class ClientCertificate:
    cert: Path
    key: Path


@dataclass(frozen=True)
class Pki:
    ca: Path
    serving_cert: Path
    serving_key: Path
    service_account_key: Path
    service_account_public: Path
    clients: dict[str, ClientCertificate]


def _write_key(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    parts = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        parts.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(parts)


def _builder(
    subject: x509.Name, issuer: x509.Name, public_key: ec.EllipticCurvePublicKey
) -> x509.CertificateBuilder:
    now = dt.datetime.now(dt.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + VALID_FOR)
    )


def make_pki(directory: Path) -> Pki:
    """Write the CA, the serving and client certificates and the token-signing keys."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("slascaler-e2e-ca")
    ca_cert = (
        _builder(ca_name, ca_name, ca_key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True,
                content_commitment=False, key_encipherment=False, data_encipherment=False,
                key_agreement=False, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    ca_path = directory / "ca.crt"
    ca_path.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))

    def issue(
        stem: str, subject: x509.Name, usage: x509.ObjectIdentifier, sans: list[x509.GeneralName]
    ) -> tuple[Path, Path]:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = _builder(subject, ca_name, key.public_key()).add_extension(
            x509.ExtendedKeyUsage([usage]), critical=False
        )
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(ca_key, hashes.SHA256())
        cert_path, key_path = directory / f"{stem}.crt", directory / f"{stem}.key"
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(key, key_path)
        return cert_path, key_path

    serving_cert, serving_key = issue(
        "apiserver",
        _name("kube-apiserver"),
        ExtendedKeyUsageOID.SERVER_AUTH,
        [
            x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
            x509.IPAddress(ipaddress.ip_address("10.96.0.1")),
            x509.DNSName("localhost"),
            x509.DNSName("kubernetes"),
            x509.DNSName("kubernetes.default"),
            x509.DNSName("kubernetes.default.svc"),
        ],
    )
    clients: dict[str, ClientCertificate] = {}
    for stem, subject in {
        "admin": _name("admin", "system:masters"),
        "controller-manager": _name("system:kube-controller-manager"),
        "scheduler": _name("system:kube-scheduler"),
    }.items():
        cert, key = issue(stem, subject, ExtendedKeyUsageOID.CLIENT_AUTH, [])
        clients[stem] = ClientCertificate(cert, key)

    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    sa_private, sa_public = directory / "sa.key", directory / "sa.pub"
    _write_key(sa_key, sa_private)
    sa_public.write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return Pki(ca_path, serving_cert, serving_key, sa_private, sa_public, clients)
