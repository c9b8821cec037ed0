"""The certificates of a local secured broker: a CA of its own, the broker's, and the clients'.

Made with the ``cryptography`` package when the broker starts, so nothing (no keytool, no JKS)
is needed beyond Python and Kafka: the broker reads PEM files (``ssl.keystore.type=PEM``), and
so do librdkafka and aiokafka. Keys are EC P-256 (fast to make, read by Java 17, OpenSSL and
Python's ``ssl``); private keys are written unencrypted but readable by their owner only.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

#: A local broker is restarted on its data for months; a year is long enough and still expires.
VALIDITY = datetime.timedelta(days=365)
#: The names a client may use to reach a local broker (the server certificate's SANs).
SERVER_NAMES: tuple[str, ...] = ("localhost",)
SERVER_ADDRESSES: tuple[str, ...] = ("127.0.0.1",)


@dataclass(frozen=True)
class TlsFiles:
    """Where the certificates of one local broker live, all under ``directory``.

    Attributes:
        directory: The directory (0700).
    """

    directory: Path

    @property
    def ca(self) -> Path:
        """The CA certificate (PEM): every side's truststore."""
        return self.directory / "ca.pem"

    @property
    def ca_key(self) -> Path:
        """The CA's private key, kept to issue a missing certificate on a later start."""
        return self.directory / "ca.key"

    @property
    def broker_keystore(self) -> Path:
        """The broker's key and certificate chain in one file: Kafka's PEM keystore."""
        return self.directory / "broker.pem"

    def certificate(self, principal: str) -> Path:
        """A client's certificate (PEM), subject ``CN=principal``."""
        return self.directory / f"{principal}.crt"

    def key(self, principal: str) -> Path:
        """A client's private key (PEM, PKCS#8, unencrypted, 0600)."""
        return self.directory / f"{principal}.key"


def ensure_certificates(files: TlsFiles, *, broker: str, clients: Iterable[str]) -> None:
    """Make whatever of the CA, the broker's and the clients' certificates is missing.

    A restart reuses them (clients holding the CA keep working). Without the CA's key nothing
    can be issued, so a missing CA makes everything anew.

    Args:
        files: Where they live.
        broker: The broker's principal (its certificate's CN, also used as a client: the
            broker connects to its own listeners with it).
        clients: The client principals that get a certificate each.
    """
    files.directory.mkdir(parents=True, exist_ok=True)
    files.directory.chmod(0o700)
    if not (files.ca.exists() and files.ca_key.exists()):
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_cert = _ca_certificate(ca_key, f"tidings local CA {os.urandom(4).hex()}")
        write_private(files.ca_key, private_pem(ca_key))
        write_private(files.ca, ca_cert.public_bytes(serialization.Encoding.PEM))
        for stale in files.directory.glob("*"):
            if stale not in (files.ca, files.ca_key):
                stale.unlink()
    ca_cert = x509.load_pem_x509_certificate(files.ca.read_bytes())
    loaded = serialization.load_pem_private_key(files.ca_key.read_bytes(), password=None)
    assert isinstance(loaded, ec.EllipticCurvePrivateKey)
    if not files.broker_keystore.exists():
        key = ec.generate_private_key(ec.SECP256R1())
        cert = issue(ca_cert, loaded, key, broker, server=True)
        # Kafka's PEM keystore: the PKCS#8 key, then the chain (leaf first).
        chain = cert.public_bytes(serialization.Encoding.PEM) + files.ca.read_bytes()
        write_private(files.broker_keystore, private_pem(key) + chain)
    for principal in clients:
        if files.certificate(principal).exists() and files.key(principal).exists():
            continue
        key = ec.generate_private_key(ec.SECP256R1())
        cert = issue(ca_cert, loaded, key, principal, server=False)
        write_private(files.key(principal), private_pem(key))
        write_private(files.certificate(principal), cert.public_bytes(serialization.Encoding.PEM))


def new_ca(name: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A fresh self-signed CA (tests use one to make a certificate the broker must refuse)."""
    key = ec.generate_private_key(ec.SECP256R1())
    return _ca_certificate(key, name), key


def issue(
    ca_cert: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    key: ec.EllipticCurvePrivateKey,
    common_name: str,
    *,
    server: bool,
) -> x509.Certificate:
    """Sign a certificate for ``key`` with subject ``CN=common_name``.

    Args:
        ca_cert: The issuer.
        ca_key: The issuer's key.
        key: The subject's key.
        common_name: The principal (the broker maps ``CN=x`` to ``User:x``).
        server: Also a server certificate: SANs ``localhost`` and ``127.0.0.1``, both
            server and client use (the broker is a client of its own listeners).

    Returns:
        The certificate.
    """
    now = datetime.datetime.now(datetime.timezone.utc)
    usages = [ExtendedKeyUsageOID.CLIENT_AUTH]
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        # An hour back: a clock a little behind must not find it "not yet valid".
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(digital_signature=True, key_agreement=True, content_commitment=False,
                          key_encipherment=False, data_encipherment=False, key_cert_sign=False,
                          crl_sign=False, encipher_only=False, decipher_only=False),
            critical=True,
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
    )
    if server:
        usages.insert(0, ExtendedKeyUsageOID.SERVER_AUTH)
        names: list[x509.GeneralName] = [x509.DNSName(name) for name in SERVER_NAMES]
        names += [x509.IPAddress(ipaddress.ip_address(address)) for address in SERVER_ADDRESSES]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    return builder.sign(ca_key, hashes.SHA256())


def _ca_certificate(key: ec.EllipticCurvePrivateKey, name: str) -> x509.Certificate:
    now = datetime.datetime.now(datetime.timezone.utc)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                          content_commitment=False, key_encipherment=False, data_encipherment=False,
                          key_agreement=False, encipher_only=False, decipher_only=False),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )


def private_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    """``key`` as unencrypted PKCS#8 PEM (what Kafka's PEM keystore and librdkafka read)."""
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` readable by its owner only (0600 from the first byte)."""
    # Created with its mode, never chmod-ed after: no moment where another user could read it.
    scratch = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    scratch.replace(path)
