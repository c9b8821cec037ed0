"""What makes a local broker a secured one: listeners, users, the authorizer, client files.

A secured node (``LocalBroker(data_dir, secure=True)``) has four listeners on 127.0.0.1:

- ``SASL_SSL``: the clients' port. SCRAM-SHA-256, SCRAM-SHA-512 and PLAIN over TLS.
- ``MTLS`` (protocol SSL, ``ssl.client.auth=required``): mutual TLS; a certificate
  ``CN=worker`` is the principal ``User:worker``, as the SCRAM user ``worker`` is.
- ``INTERNAL`` (SSL, client certificate required): the inter-broker listener, and
- ``CONTROLLER`` (SSL, client certificate required): KRaft.

The broker authenticates to itself with its own certificate, ``User:broker``, a super user.
Inter-broker traffic has a listener of its own so that this super-user identity needs the
broker's private key, never a password a client file holds, and so the clients' listeners can
change (or a test can break one) without touching replication or the three-node cluster.

Users ``admin`` (a super user, for tests and operators to create topics and ACLs),
``worker``, ``client`` and ``client2`` get a SCRAM credential (both mechanisms) written at
format time, the same password for PLAIN (in the listener's JAAS), and a client certificate.
Passwords are random per data directory, kept 0600 in ``credentials.json``; the format step
is given salted passwords only (never a password on a command line). Everyone else is refused
by Kafka's ``StandardAuthorizer`` (``allow.everyone.if.no.acl.found=false``).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from tidings.broker._certs import TlsFiles, ensure_certificates, write_private
from tidings.errors import BrokerError
from tidings.shell.runtime.connection import KafkaConnection
from tidings.shell.runtime.kafka_properties import read_properties

#: The principals a secured local broker knows (``User:NAME``).
PRINCIPALS: Final[tuple[str, ...]] = ("admin", "worker", "client", "client2")
#: The broker's own principal (its certificate's CN).
BROKER_PRINCIPAL: Final = "broker"
SUPER_USERS: Final[tuple[str, ...]] = ("admin", BROKER_PRINCIPAL)

Method = Literal["scram", "scram-sha-256", "plain", "mtls"]
#: How a client may authenticate: a file per principal and method.
METHODS: Final[tuple[Method, ...]] = ("scram", "scram-sha-256", "plain", "mtls")
_MECHANISMS: Final[Mapping[str, str]] = {
    "scram": "SCRAM-SHA-512", "scram-sha-256": "SCRAM-SHA-256", "plain": "PLAIN",
}
_SCRAM_ITERATIONS: Final = 4096  # Kafka's minimum, and its default
_LISTENERS: Final = ("SASL_SSL", "MTLS", "INTERNAL", "CONTROLLER")


@dataclass(frozen=True)
class SecurePorts:
    """The four ports of a secured node (see the module docstring)."""

    sasl_ssl: int
    mtls: int
    internal: int
    controller: int

    def as_tuple(self) -> tuple[int, int, int, int]:
        """The ports in listener order."""
        return (self.sasl_ssl, self.mtls, self.internal, self.controller)


@dataclass(frozen=True)
class ClientSettings:
    """One principal's way into a secured local broker: a ``client.properties`` file.

    The file holds librdkafka properties (``kcat -F FILE`` reads it too): bootstrap
    servers, ``security.protocol``, the SASL mechanism, user and password, or the PEM files
    of a client certificate, and the CA.

    Attributes:
        principal: The user, ``User:principal`` to the authorizer.
        method: ``scram`` (SCRAM-SHA-512), ``scram-sha-256``, ``plain`` or ``mtls``.
        bootstrap: The listener this method uses (SASL_SSL's or MTLS's).
        properties: The file.
    """

    principal: str
    method: Method
    bootstrap: str
    properties: Path

    def environ(self) -> dict[str, str]:
        """The environment that points tidings (a worker, the CLI) at this file."""
        return {"TIDINGS_BOOTSTRAP": self.bootstrap, "TIDINGS_KAFKA_CONFIG": str(self.properties)}

    def connection(self) -> KafkaConnection:
        """A connection with this file's settings only (none of the environment's)."""
        return KafkaConnection.resolve(config_file=self.properties, environ={})

    def export_line(self) -> str:
        """``export TIDINGS_BOOTSTRAP=... TIDINGS_KAFKA_CONFIG=...`` for a shell."""
        return f"export TIDINGS_BOOTSTRAP={self.bootstrap} TIDINGS_KAFKA_CONFIG={_shell(self.properties)}"


@dataclass(frozen=True)
class SecureLayout:
    """Where a secured node keeps what its plaintext self does not, under ``data_dir``."""

    data_dir: Path

    @property
    def tls(self) -> TlsFiles:
        """The CA, the broker's keystore and the clients' certificates."""
        return TlsFiles(self.data_dir / "tls")

    @property
    def credentials(self) -> Path:
        """The users' passwords (JSON, 0600)."""
        return self.data_dir / "credentials.json"

    @property
    def clients(self) -> Path:
        """The client properties files, ``PRINCIPAL-METHOD.properties``."""
        return self.data_dir / "clients"

    def client_file(self, principal: str, method: str) -> Path:
        """One principal's properties file for one method."""
        return self.clients / f"{principal}-{method}.properties"


def is_secured(data_dir: Path) -> bool:
    """Whether ``data_dir`` is a secured node's (its credentials exist)."""
    return SecureLayout(data_dir).credentials.exists()


def load_credentials(layout: SecureLayout, *, formatted: bool) -> dict[str, str]:
    """The users' passwords: read, or made (random) for a log dir not formatted yet.

    Raises:
        BrokerError: The log dir was formatted but the passwords are gone (or it was
            formatted as a plaintext broker): its SCRAM users cannot be known.
    """
    try:
        raw = json.loads(layout.credentials.read_text())
    except FileNotFoundError:
        raw = None
    except ValueError as exc:
        raise BrokerError(f"{layout.credentials} is not a credentials file; remove "
                          f"{layout.data_dir} to start afresh") from exc
    if isinstance(raw, dict) and all(isinstance(raw.get(name), str) for name in PRINCIPALS):
        return {name: str(raw[name]) for name in PRINCIPALS}
    if formatted:
        raise BrokerError(
            f"{layout.data_dir} holds a Kafka log dir formatted without these users' "
            f"credentials ({layout.credentials} is missing); remove {layout.data_dir} or "
            "pick another --data-dir for a secured broker"
        )
    passwords = {name: secrets.token_urlsafe(24) for name in PRINCIPALS}
    layout.data_dir.mkdir(parents=True, exist_ok=True)
    write_private(layout.credentials, (json.dumps(passwords, indent=2) + "\n").encode())
    return passwords


def prepare(layout: SecureLayout) -> None:
    """Make the certificates that are missing (a restart reuses them)."""
    ensure_certificates(layout.tls, broker=BROKER_PRINCIPAL, clients=PRINCIPALS)


def scram_arguments(passwords: Mapping[str, str]) -> list[str]:
    """``kafka-storage format`` arguments adding every user's SCRAM credentials.

    Given as salt and salted password (RFC 5802 ``Hi``: PBKDF2-HMAC), so no password is ever
    on a command line another local user could read in ``ps``.
    """
    arguments: list[str] = []
    for name, password in passwords.items():
        for mechanism, digest in (("SCRAM-SHA-256", "sha256"), ("SCRAM-SHA-512", "sha512")):
            salt = secrets.token_bytes(16)
            salted = hashlib.pbkdf2_hmac(digest, password.encode(), salt, _SCRAM_ITERATIONS)
            arguments += [
                "--add-scram",
                f"{mechanism}=[name={name},iterations={_SCRAM_ITERATIONS},"
                f'salt="{base64.b64encode(salt).decode()}",'
                f'saltedpassword="{base64.b64encode(salted).decode()}"]',
            ]
    return arguments


def secure_settings(
    ports: SecurePorts, tls: TlsFiles, passwords: Mapping[str, str]
) -> dict[str, str]:
    """The server.properties of a secured node beyond (and instead of) a plaintext one's."""
    listeners = ",".join(
        f"{name}://127.0.0.1:{port}" for name, port in zip(_LISTENERS, ports.as_tuple())
    )
    plain_users = " ".join(f'user_{name}="{password}"' for name, password in passwords.items())
    scram_jaas = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
    return {
        "controller.quorum.voters": f"1@127.0.0.1:{ports.controller}",
        "listeners": listeners,
        "advertised.listeners": f"SASL_SSL://127.0.0.1:{ports.sasl_ssl},"
        f"MTLS://127.0.0.1:{ports.mtls},INTERNAL://127.0.0.1:{ports.internal}",
        "listener.security.protocol.map": "SASL_SSL:SASL_SSL,MTLS:SSL,INTERNAL:SSL,CONTROLLER:SSL",
        "inter.broker.listener.name": "INTERNAL",
        # Every listener's TLS: the broker's key and chain, the local CA (PEM, no keytool).
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(tls.broker_keystore),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(tls.ca),
        # A client certificate on every listener but the SASL one (SASL says who it is).
        "listener.name.mtls.ssl.client.auth": "required",
        "listener.name.internal.ssl.client.auth": "required",
        "listener.name.controller.ssl.client.auth": "required",
        # CN=worker is User:worker, so one set of ACLs serves SCRAM and mutual TLS alike.
        "ssl.principal.mapping.rules": "RULE:^CN=([A-Za-z0-9._-]+)$/$1/,DEFAULT",
        "listener.name.sasl_ssl.sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512,PLAIN",
        "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config": scram_jaas,
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": scram_jaas,
        "listener.name.sasl_ssl.plain.sasl.jaas.config":
            f"org.apache.kafka.common.security.plain.PlainLoginModule required {plain_users};",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "allow.everyone.if.no.acl.found": "false",
        "super.users": ";".join(f"User:{name}" for name in SUPER_USERS),
    }


_PORTS = re.compile(
    r"^listeners=SASL_SSL://127\.0\.0\.1:(\d+),MTLS://127\.0\.0\.1:(\d+),"
    r"INTERNAL://127\.0\.0\.1:(\d+),CONTROLLER://127\.0\.0\.1:(\d+)$", re.M
)


def previous_secure_ports(properties: Path) -> SecurePorts | None:
    """The ports a secured server.properties rendered here names, if any."""
    try:
        match = _PORTS.search(properties.read_text())
    except FileNotFoundError:
        return None
    return SecurePorts(*(int(group) for group in match.groups())) if match else None


def write_client_files(
    layout: SecureLayout, ports: SecurePorts, passwords: Mapping[str, str]
) -> None:
    """Write every principal's properties file for every method (0600: passwords)."""
    layout.clients.mkdir(parents=True, exist_ok=True)
    layout.clients.chmod(0o700)
    tls = layout.tls
    for principal, password in passwords.items():
        for method in METHODS:
            if method == "mtls":
                settings = {
                    "bootstrap.servers": f"127.0.0.1:{ports.mtls}",
                    "security.protocol": "SSL",
                    "ssl.ca.location": str(tls.ca),
                    "ssl.certificate.location": str(tls.certificate(principal)),
                    "ssl.key.location": str(tls.key(principal)),
                }
            else:
                settings = {
                    "bootstrap.servers": f"127.0.0.1:{ports.sasl_ssl}",
                    "security.protocol": "SASL_SSL",
                    "sasl.mechanism": _MECHANISMS[method],
                    "sasl.username": principal,
                    "sasl.password": password,
                    "ssl.ca.location": str(tls.ca),
                }
            text = f"# User:{principal} over {method} (tidings broker start --secure)\n" + "".join(
                f"{key}={_escape(value)}\n" for key, value in settings.items()
            )
            write_private(layout.client_file(principal, method), text.encode())


def client_settings(layout: SecureLayout, principal: str, method: Method) -> ClientSettings:
    """The settings file of ``principal`` over ``method``, with the bootstrap it names.

    Raises:
        BrokerError: Unknown principal or method, or the broker never wrote the file.
    """
    if principal not in PRINCIPALS or method not in METHODS:
        raise BrokerError(f"no client settings for {principal!r} over {method!r}: principals are "
                          f"{', '.join(PRINCIPALS)}; methods {', '.join(METHODS)}")
    path = layout.client_file(principal, method)
    try:
        entries = {key: value for key, value, _ in read_properties(path)}
    except Exception as exc:  # noqa: BLE001 - DefinitionError: missing or unreadable
        raise BrokerError(f"{path} cannot be read: start the broker with secure=True "
                          "(`tidings broker start --secure`) first") from exc
    return ClientSettings(principal, method, entries["bootstrap.servers"], path)


def _escape(value: str) -> str:
    # java.util.Properties: a backslash escapes, leading blanks are dropped.
    value = value.replace("\\", "\\\\")
    return "\\" + value if value[:1] in (" ", "\t") else value


def _shell(path: Path) -> str:
    text = str(path)
    return text if re.fullmatch(r"[\w@%+=:,./-]+", text) else "'" + text.replace("'", "'\\''") + "'"


def read_passwords(data_dir: Path) -> dict[str, str]:
    """The passwords of a secured node's users (tests check logs for them)."""
    return load_credentials(SecureLayout(data_dir), formatted=True)

