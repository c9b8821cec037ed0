"""The secured local node's files, without a broker: server.properties, certificates, users,
client properties files (tidings/broker/_security.py, _certs.py)."""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import re
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tidings.broker import render_server_properties
from tidings.broker._certs import TlsFiles, ensure_certificates, issue, new_ca
from tidings.broker._security import (
    METHODS,
    PRINCIPALS,
    SecureLayout,
    SecurePorts,
    client_settings,
    load_credentials,
    prepare,
    previous_secure_ports,
    scram_arguments,
    secure_settings,
    write_client_files,
)
from tidings.errors import BrokerError
from tidings.shell.runtime.kafka_properties import read_properties

PORTS = SecurePorts(sasl_ssl=40001, mtls=40002, internal=40003, controller=40004)


def properties(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines())


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def verifies(cert: x509.Certificate, issuer: x509.Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(issuer)
    except (InvalidSignature, ValueError):  # ValueError: another issuer altogether
        return False
    return True


@pytest.fixture
def layout(tmp_path: Path) -> SecureLayout:
    made = SecureLayout(tmp_path / "node")
    prepare(made)
    return made


def test_the_server_properties_have_the_listeners_the_authorizer_and_the_super_users(tmp_path: Path) -> None:
    tls = TlsFiles(tmp_path / "tls")
    passwords = {name: f"pw-{name}" for name in PRINCIPALS}
    rendered = properties(render_server_properties(
        port=PORTS.sasl_ssl, controller_port=PORTS.controller, log_dirs=tmp_path / "logs",
        extra=secure_settings(PORTS, tls, passwords)))
    assert rendered["listeners"] == ("SASL_SSL://127.0.0.1:40001,MTLS://127.0.0.1:40002,"
                                     "INTERNAL://127.0.0.1:40003,CONTROLLER://127.0.0.1:40004")
    assert rendered["advertised.listeners"] == ("SASL_SSL://127.0.0.1:40001,MTLS://127.0.0.1:40002,"
                                                "INTERNAL://127.0.0.1:40003")
    assert rendered["listener.security.protocol.map"] == "SASL_SSL:SASL_SSL,MTLS:SSL,INTERNAL:SSL,CONTROLLER:SSL"
    assert "PLAINTEXT" not in rendered["listeners"] + rendered["listener.security.protocol.map"]
    assert rendered["inter.broker.listener.name"] == "INTERNAL"
    assert rendered["controller.listener.names"] == "CONTROLLER"
    assert rendered["controller.quorum.voters"] == "1@127.0.0.1:40004"
    # Mutual TLS on every listener but the SASL one.
    for name in ("mtls", "internal", "controller"):
        assert rendered[f"listener.name.{name}.ssl.client.auth"] == "required"
    assert "ssl.client.auth" not in rendered and "listener.name.sasl_ssl.ssl.client.auth" not in rendered
    assert rendered["listener.name.sasl_ssl.sasl.enabled.mechanisms"] == "SCRAM-SHA-256,SCRAM-SHA-512,PLAIN"
    plain = rendered["listener.name.sasl_ssl.plain.sasl.jaas.config"]
    assert plain.startswith("org.apache.kafka.common.security.plain.PlainLoginModule required ")
    assert all(f'user_{name}="pw-{name}"' in plain for name in PRINCIPALS) and plain.endswith(";")
    assert rendered["ssl.keystore.type"] == rendered["ssl.truststore.type"] == "PEM"
    assert rendered["ssl.keystore.location"] == str(tls.broker_keystore)
    assert rendered["ssl.truststore.location"] == str(tls.ca)
    assert rendered["authorizer.class.name"] == "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
    assert rendered["allow.everyone.if.no.acl.found"] == "false"
    assert rendered["super.users"] == "User:admin;User:broker"
    # What a single node needs stays.
    assert rendered["offsets.topic.replication.factor"] == "1"


def test_the_secure_ports_are_read_back_from_the_rendered_file(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text(render_server_properties(port=1, controller_port=2, log_dirs=tmp_path,
                                             extra=secure_settings(PORTS, TlsFiles(tmp_path), {})))
    assert previous_secure_ports(path) == PORTS
    path.write_text(render_server_properties(port=1, controller_port=2, log_dirs=tmp_path))
    assert previous_secure_ports(path) is None  # a plaintext node's
    assert previous_secure_ports(tmp_path / "missing") is None


def test_the_server_certificate_is_the_cas_for_localhost_and_127_0_0_1(layout: SecureLayout) -> None:
    tls = layout.tls
    ca = x509.load_pem_x509_certificate(tls.ca.read_bytes())
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    # Kafka's PEM keystore: a PKCS#8 key, then the chain, leaf first.
    text = tls.broker_keystore.read_text()
    assert text.startswith("-----BEGIN PRIVATE KEY-----")
    chain = x509.load_pem_x509_certificates(text.encode())
    assert [c.subject.rfc4514_string() for c in chain] == ["CN=broker", ca.subject.rfc4514_string()]
    server = chain[0]
    assert verifies(server, ca)
    names = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["localhost"]
    assert names.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    usages = server.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    # The broker is the client of its own INTERNAL and CONTROLLER listeners too.
    assert set(usages) == {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}


def test_each_client_certificate_maps_to_its_user(layout: SecureLayout) -> None:
    tls = layout.tls
    ca = x509.load_pem_x509_certificate(tls.ca.read_bytes())
    rendered = secure_settings(PORTS, tls, {})
    rule, default = rendered["ssl.principal.mapping.rules"].split(",")
    assert default == "DEFAULT"
    # Kafka's RULE:pattern/replacement/ applied to the RFC 2253 subject, as Java writes it.
    pattern, replacement = re.fullmatch(r"RULE:(.*)/(.*)/", rule).groups()  # type: ignore[union-attr]
    for principal in PRINCIPALS:
        cert = x509.load_pem_x509_certificate(tls.certificate(principal).read_bytes())
        assert verifies(cert, ca)
        subject = cert.subject.rfc4514_string()
        assert re.sub(pattern, replacement.replace("$1", r"\1"), subject) == principal, subject
        assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
        usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        assert list(usages) == [ExtendedKeyUsageOID.CLIENT_AUTH]
        assert tls.key(principal).read_text().startswith("-----BEGIN PRIVATE KEY-----")
    # A certificate of another CA, even one of the same name, is not the CA's.
    other, other_key = new_ca(str(ca.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value))
    assert other.subject == ca.subject
    forged = issue(other, other_key, ec.generate_private_key(ec.SECP256R1()), "worker", server=False)
    assert not verifies(forged, ca)


def test_the_files_are_the_owners_only_and_a_restart_reuses_them(layout: SecureLayout) -> None:
    tls = layout.tls
    assert mode(tls.directory) == 0o700
    for path in tls.directory.iterdir():
        assert mode(path) == 0o600, path
    before = {path.name: path.read_bytes() for path in tls.directory.iterdir()}
    prepare(layout)
    assert {path.name: path.read_bytes() for path in tls.directory.iterdir()} == before
    # A missing client certificate is issued again by the same CA; the rest stays.
    tls.certificate("client").unlink()
    prepare(layout)
    after = {path.name: path.read_bytes() for path in tls.directory.iterdir()}
    assert after["client.crt"] != before["client.crt"] and after["ca.pem"] == before["ca.pem"]
    assert after["worker.crt"] == before["worker.crt"]
    # Without the CA's key nothing can be issued: everything is made anew.
    tls.ca_key.unlink()
    ensure_certificates(tls, broker="broker", clients=PRINCIPALS)
    assert tls.ca.read_bytes() != before["ca.pem"] and tls.certificate("worker").read_bytes() != before["worker.crt"]


def test_passwords_are_random_per_data_dir_kept_0600_and_never_remade_for_a_formatted_dir(tmp_path: Path) -> None:
    first, second = SecureLayout(tmp_path / "a"), SecureLayout(tmp_path / "b")
    passwords = load_credentials(first, formatted=False)
    assert set(passwords) == set(PRINCIPALS) and len(set(passwords.values())) == len(PRINCIPALS)
    assert all(len(p) >= 24 for p in passwords.values())
    assert load_credentials(first, formatted=True) == passwords
    assert load_credentials(second, formatted=False) != passwords
    assert mode(first.credentials) == 0o600
    first.credentials.unlink()
    with pytest.raises(BrokerError, match="formatted without these users' credentials"):
        load_credentials(first, formatted=True)


def test_the_scram_arguments_carry_salted_passwords_only() -> None:
    passwords = {"admin": "pw-admin-123", "worker": "pw-worker-456"}
    arguments = scram_arguments(passwords)
    assert arguments[::2] == ["--add-scram"] * 4
    assert all(p not in " ".join(arguments) for p in passwords.values())
    for value in arguments[1::2]:
        found = re.fullmatch(r'(SCRAM-SHA-(?:256|512))=\[name=(\w+),iterations=4096,'
                             r'salt="([^"]+)",saltedpassword="([^"]+)"\]', value)
        assert found, value
        mechanism, name, salt, salted = found.groups()
        digest = "sha256" if mechanism.endswith("256") else "sha512"
        # RFC 5802: SaltedPassword := Hi(password, salt, i), PBKDF2 with HMAC.
        expected = hashlib.pbkdf2_hmac(digest, passwords[name].encode(), base64.b64decode(salt), 4096)
        assert base64.b64decode(salted) == expected
    assert {v.split("=")[0] for v in arguments[1::2]} == {"SCRAM-SHA-256", "SCRAM-SHA-512"}


def test_the_client_files_name_each_user_and_method_and_tidings_reads_them(layout: SecureLayout) -> None:
    passwords = load_credentials(layout, formatted=False)
    write_client_files(layout, PORTS, passwords)
    assert mode(layout.clients) == 0o700
    assert sorted(p.name for p in layout.clients.iterdir()) == sorted(
        f"{user}-{method}.properties" for user in PRINCIPALS for method in METHODS)
    for path in layout.clients.iterdir():
        assert mode(path) == 0o600
    scram = client_settings(layout, "worker", "scram")
    assert scram.bootstrap == "127.0.0.1:40001"
    read = {key: value for key, value, _ in read_properties(scram.properties)}
    assert read == {"bootstrap.servers": "127.0.0.1:40001", "security.protocol": "SASL_SSL",
                    "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "worker",
                    "sasl.password": passwords["worker"], "ssl.ca.location": str(layout.tls.ca)}
    connection = scram.connection()
    assert connection.bootstrap == "127.0.0.1:40001"
    assert connection.redacted()["sasl.password"] == "[redacted]"
    assert passwords["worker"] not in repr(connection)
    assert scram.environ() == {"TIDINGS_BOOTSTRAP": "127.0.0.1:40001",
                               "TIDINGS_KAFKA_CONFIG": str(scram.properties)}
    assert client_settings(layout, "client", "scram-sha-256").connection().properties["sasl.mechanism"] == "SCRAM-SHA-256"
    assert client_settings(layout, "client", "plain").connection().properties["sasl.mechanism"] == "PLAIN"
    mtls = client_settings(layout, "client2", "mtls")
    assert mtls.bootstrap == "127.0.0.1:40002"
    assert dict(mtls.connection().properties) == {
        "security.protocol": "SSL", "ssl.ca.location": str(layout.tls.ca),
        "ssl.certificate.location": str(layout.tls.certificate("client2")),
        "ssl.key.location": str(layout.tls.key("client2"))}
    # And aiokafka gets the same: SCRAM credentials, a TLS context with the client certificate.
    kwargs = mtls.connection().aiokafka("producer")
    assert kwargs["security_protocol"] == "SSL" and kwargs["ssl_context"] is not None
    sasl = scram.connection().aiokafka("consumer")
    assert (sasl["sasl_mechanism"], sasl["sasl_plain_username"]) == ("SCRAM-SHA-512", "worker")
    with pytest.raises(BrokerError, match="principals are admin, worker, client, client2"):
        client_settings(layout, "mallory", "scram")
