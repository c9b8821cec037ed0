"""KafkaConnection: where each property comes from, how Java keys are read, what is hidden.

No broker: clients are built against 127.0.0.1:9 (nothing listens there) and closed at once.
Each rule of docs/kafka.md has a test here.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from tidings import BrokerError, DefinitionError
from tidings.shell.runtime import connection as module
from tidings.shell.runtime.connection import KafkaConnection, env_property
from tidings.shell.runtime import kafka_properties
from tidings.shell.runtime.kafka_properties import parse_jaas, read_properties

NOWHERE = "127.0.0.1:9"
SECRET = "s3cr3t-Value-9f2c"


def resolve(**kwargs: object) -> KafkaConnection:
    kwargs.setdefault("environ", {})
    return KafkaConnection.resolve(**kwargs)  # type: ignore[arg-type]


def write(tmp_path: Path, text: str, name: str = "client.properties") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


# -- sources and precedence ------------------------------------------------------------------


def test_environment_names_are_upper_cased_properties_with_dots_as_underscores() -> None:
    assert env_property("TIDINGS_KAFKA_SECURITY_PROTOCOL") == "security.protocol"
    assert env_property("TIDINGS_KAFKA_SASL_OAUTHBEARER_CLIENT_ID") == "sasl.oauthbearer.client.id"


def test_two_underscores_in_an_environment_name_are_one_underscore_in_the_property() -> None:
    assert env_property("TIDINGS_KAFKA_LOG__LEVEL") == "log_level"
    assert env_property("TIDINGS_KAFKA_A__B_C") == "a_b.c"
    connection = resolve(bootstrap=NOWHERE, environ={"TIDINGS_KAFKA_LOG__LEVEL": "3"})
    assert connection.properties == {"log_level": "3"}


def test_the_environment_gives_properties_and_tidings_own_names_are_not_properties(tmp_path: Path) -> None:
    environ = {
        "TIDINGS_KAFKA_CLIENT_RACK": "rack-7",
        "TIDINGS_KAFKA_CONFIG": str(write(tmp_path, "")),
        "TIDINGS_KAFKA_RECORD_CLIENTS": str(tmp_path / "clients.jsonl"),
        "TIDINGS_DATA_DIR": "/tmp/x",  # not under TIDINGS_KAFKA_
    }
    connection = resolve(bootstrap=NOWHERE, environ=environ)
    assert connection.properties == {"client.rack": "rack-7"}


def test_tidings_bootstrap_is_bootstrap_servers_and_wins_over_the_long_name() -> None:
    assert resolve(environ={"TIDINGS_BOOTSTRAP": "a:1"}).bootstrap == "a:1"
    assert resolve(environ={"TIDINGS_KAFKA_BOOTSTRAP_SERVERS": "b:1"}).bootstrap == "b:1"
    both = resolve(environ={"TIDINGS_BOOTSTRAP": "a:1", "TIDINGS_KAFKA_BOOTSTRAP_SERVERS": "b:1"})
    assert both.bootstrap == "a:1"


def test_the_bootstrap_argument_wins_over_bootstrap_servers_in_kafka() -> None:
    assert resolve(kafka={"bootstrap.servers": "k:1"}).bootstrap == "k:1"
    assert resolve(bootstrap="arg:1", kafka={"bootstrap.servers": "k:1"}).bootstrap == "arg:1"


def test_explicit_arguments_win_over_the_environment_which_wins_over_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "bootstrap.servers=file:1\nclient.rack=file\nclient.id=file\nlinger.ms=7\n")
    environ = {"TIDINGS_BOOTSTRAP": "env:1", "TIDINGS_KAFKA_CLIENT_RACK": "env",
               "TIDINGS_KAFKA_CLIENT_ID": "env", "TIDINGS_KAFKA_CONFIG": str(path)}
    only_file = resolve(environ={"TIDINGS_KAFKA_CONFIG": str(path)})
    assert (only_file.bootstrap, only_file.properties["client.rack"]) == ("file:1", "file")
    connection = resolve(kafka={"client.rack": "explicit"}, environ=environ)
    assert connection.bootstrap == "env:1"
    assert connection.properties == {"client.rack": "explicit", "client.id": "env", "linger.ms": "7"}
    assert resolve(bootstrap="arg:1", environ=environ).bootstrap == "arg:1"


def test_the_config_file_argument_wins_over_tidings_kafka_config(tmp_path: Path) -> None:
    named = write(tmp_path, "client.id=named\n", "named.properties")
    from_env = write(tmp_path, "client.id=env\n", "env.properties")
    connection = resolve(bootstrap=NOWHERE, config_file=named, environ={"TIDINGS_KAFKA_CONFIG": str(from_env)})
    assert connection.properties == {"client.id": "named"}


def test_no_bootstrap_anywhere_says_every_way_to_give_it() -> None:
    with pytest.raises(BrokerError, match="--bootstrap.*TIDINGS_BOOTSTRAP.*--kafka-config"):
        resolve(kafka={"client.id": "x"})


def test_kafka_values_are_strings_numbers_or_bools() -> None:
    connection = resolve(bootstrap=NOWHERE, kafka={"socket.keepalive.enable": True, "linger.ms": 5})
    assert connection.properties == {"socket.keepalive.enable": "true", "linger.ms": "5"}
    with pytest.raises(DefinitionError, match="error_cb must be a string, a number or a bool"):
        resolve(bootstrap=NOWHERE, kafka={"error_cb": print})


# -- the properties file -----------------------------------------------------------------------


def test_the_properties_file_format_is_javas(tmp_path: Path) -> None:
    path = write(tmp_path, "\n".join([
        "# a comment",
        "   ! another comment",
        "a=1",
        "b: 2",
        "c 3",
        "  d  =  spaced value  ",
        "e=one \\",
        "    two \\",
        "    three",
        "f=tab\\there\\u0041\\\\",
        "g\\=h=key with an equals sign",
        "a=later wins",
        "empty=",
        "ends.in.backslashes=x\\\\",
        "next=line",
    ]))
    entries = {key: value for key, value, _ in read_properties(path)}
    assert entries == {
        "a": "later wins", "b": "2", "c": "3", "d": "spaced value  ", "e": "one two three",
        "f": "tab\there" + "A\\", "g=h": "key with an equals sign", "empty": "",
        "ends.in.backslashes": "x\\", "next": "line",
    }


def test_each_file_entry_knows_its_line(tmp_path: Path) -> None:
    path = write(tmp_path, "# c\nfoo.bar=1\n")
    assert read_properties(path) == [("foo.bar", "1", f"{path} line 2")]


def test_an_unreadable_file_is_refused_naming_it(tmp_path: Path) -> None:
    with pytest.raises(DefinitionError, match=r"cannot read the properties file .*missing.properties \(from --kafka-config\)"):
        resolve(bootstrap=NOWHERE, config_file=tmp_path / "missing.properties")
    with pytest.raises(DefinitionError, match="from TIDINGS_KAFKA_CONFIG"):
        resolve(bootstrap=NOWHERE, environ={"TIDINGS_KAFKA_CONFIG": str(tmp_path / "missing")})


def test_a_malformed_unicode_escape_names_its_line(tmp_path: Path) -> None:
    path = write(tmp_path, "ok=1\nbad=\\u12G4\n")
    with pytest.raises(DefinitionError, match=r"line 2: malformed \\u escape"):
        read_properties(path)


# -- per-role overrides and what a client gets -----------------------------------------------------


def test_role_prefixes_are_overrides_from_every_source(tmp_path: Path) -> None:
    path = write(tmp_path, "consumer.fetch.max.bytes=100\nadmin.client.id=from-file\n")
    environ = {"TIDINGS_KAFKA_CONFIG": str(path), "TIDINGS_KAFKA_PRODUCER_LINGER_MS": "9"}
    connection = resolve(bootstrap=NOWHERE, kafka={"consumer.client.id": "explicit"}, environ=environ)
    assert connection.properties == {}
    assert connection.overrides == {
        "consumer": {"fetch.max.bytes": "100", "client.id": "explicit"},
        "producer": {"linger.ms": "9"},
        "admin": {"client.id": "from-file"},
    }


def test_a_client_gets_common_properties_then_its_role_then_the_call_site() -> None:
    connection = resolve(bootstrap=NOWHERE, kafka={
        "client.id": "common", "client.rack": "r1", "consumer.client.id": "consumer-only",
        "consumer.fetch.wait.max.ms": "900", "producer.client.id": "producer-only",
    })
    config = connection.config("consumer", **{"fetch.wait.max.ms": 10, "group.id": "g"})
    hooks = module.kafka_log.hooks("consumer")
    assert {key: value for key, value in config.items() if key not in hooks} == {
        "bootstrap.servers": NOWHERE, "client.id": "consumer-only", "client.rack": "r1",
        "fetch.wait.max.ms": 10, "group.id": "g",
    }
    assert connection.config("producer")["client.id"] == "producer-only"
    assert connection.config("admin")["client.id"] == "common"


def test_a_role_override_wins_over_a_common_property_of_a_stronger_source(tmp_path: Path) -> None:
    path = write(tmp_path, "consumer.client.rack=file-consumer\n")
    connection = resolve(bootstrap=NOWHERE, kafka={"client.rack": "explicit"}, config_file=path)
    assert connection.config("consumer")["client.rack"] == "file-consumer"
    assert connection.config("producer")["client.rack"] == "explicit"


def test_a_common_property_of_one_role_only_is_given_to_that_role_only() -> None:
    # Confluent Cloud's Java file sets both; librdkafka warns on each client of the other role.
    connection = resolve(bootstrap=NOWHERE, kafka={"acks": "all", "session.timeout.ms": "45000"})
    assert "session.timeout.ms" not in connection.config("producer")
    assert connection.config("producer")["acks"] == "all"
    assert "acks" not in connection.config("consumer")
    assert connection.config("consumer")["session.timeout.ms"] == "45000"
    assert {"acks", "session.timeout.ms"}.isdisjoint(connection.config("admin"))


def test_the_log_hooks_come_last_and_chain_a_callback_the_call_site_sets(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    hooked = logging.getLogger("kafka-hook")
    monkeypatch.setattr(module.kafka_log, "hooks", lambda role: {
        "logger": hooked, "log_level": 6, "error_cb": lambda error: calls.append(f"hook {role} {error}"),
    })
    connection = resolve(bootstrap=NOWHERE, kafka={"log_level": "2"})
    config = connection.config("consumer", log_level=0, error_cb=lambda error: calls.append(f"site {error}"))
    assert config["logger"] is hooked and config["log_level"] == 6
    config["error_cb"]("boom")  # type: ignore[operator]
    assert calls == ["hook consumer boom", "site boom"]
    alone = connection.config("producer")["error_cb"]
    alone("x")  # type: ignore[operator]
    assert calls[-1] == "hook producer x"


def test_every_client_gets_the_log_hooks_and_a_call_site_callback_runs_after_the_hook() -> None:
    seen: list[str] = []
    config = resolve(bootstrap=NOWHERE).config("consumer", error_cb=lambda error: seen.append("site"))
    assert set(module.kafka_log.hooks("consumer")) <= set(config)
    assert config["error_cb"] is not module.kafka_log.error_hook  # chained, not replaced

    class Error:
        def code(self) -> int:
            return -195  # _TRANSPORT: the hook throttles it

        def str(self) -> str:
            return "127.0.0.1:1/bootstrap: Connect to ipv4#127.0.0.1:1 failed: Connection refused"

        def fatal(self) -> bool:
            return False

    config["error_cb"](Error())  # type: ignore[operator]
    assert seen == ["site"]


# -- Java client keys ------------------------------------------------------------------------------


def test_a_plain_jaas_config_is_sasl_username_and_password() -> None:
    jaas = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
            f"username='API-KEY' password='{SECRET}';")
    connection = resolve(bootstrap=NOWHERE, kafka={"sasl.jaas.config": jaas, "sasl.mechanism": "PLAIN"})
    assert connection.properties == {"sasl.mechanism": "PLAIN", "sasl.username": "API-KEY", "sasl.password": SECRET}
    implied = resolve(bootstrap=NOWHERE, kafka={"sasl.jaas.config": jaas})
    assert implied.properties["sasl.mechanism"] == "PLAIN"


def test_a_scram_jaas_config_needs_its_mechanism() -> None:
    jaas = ('org.apache.kafka.common.security.scram.ScramLoginModule required '
            'username="alice" password="a \\"quoted\\" secret";')
    connection = resolve(bootstrap=NOWHERE, kafka={"sasl.jaas.config": jaas, "sasl.mechanism": "SCRAM-SHA-512"})
    assert connection.properties["sasl.username"] == "alice"
    assert connection.properties["sasl.password"] == 'a "quoted" secret'
    with pytest.raises(DefinitionError, match="ScramLoginModule needs sasl.mechanism=SCRAM-SHA-256 or SCRAM-SHA-512"):
        resolve(bootstrap=NOWHERE, kafka={"sasl.jaas.config": jaas})


def test_an_oauthbearer_jaas_config_with_a_client_secret_is_oidc() -> None:
    jaas = ("org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
            f'clientId="my-client" clientSecret="{SECRET}" scope="kafka" '
            'extension_logicalCluster="lkc-1" extension_identityPoolId="pool-2";')
    kafka = {"sasl.jaas.config": jaas, "sasl.mechanism": "OAUTHBEARER",
             "sasl.oauthbearer.token.endpoint.url": "https://idp.example/token",
             "sasl.login.callback.handler.class": "org.apache.kafka...OAuthBearerLoginCallbackHandler"}
    connection = resolve(bootstrap=NOWHERE, kafka=kafka)
    assert connection.properties == {
        "sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.token.endpoint.url": "https://idp.example/token",
        "sasl.oauthbearer.method": "oidc", "sasl.oauthbearer.client.id": "my-client",
        "sasl.oauthbearer.client.secret": SECRET, "sasl.oauthbearer.scope": "kafka",
        "sasl.oauthbearer.extensions": "logicalCluster=lkc-1,identityPoolId=pool-2",
    }
    del kafka["sasl.oauthbearer.token.endpoint.url"]
    with pytest.raises(DefinitionError, match="needs sasl.oauthbearer.token.endpoint.url"):
        resolve(bootstrap=NOWHERE, kafka=kafka)


def test_an_unsecured_oauthbearer_login_is_refused_saying_what_to_set() -> None:
    jaas = ("org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
            'unsecuredLoginStringClaim_sub="alice";')
    with pytest.raises(DefinitionError, match="without clientId and clientSecret.*sasl.oauthbearer.method=oidc"):
        resolve(bootstrap=NOWHERE, kafka={"sasl.jaas.config": jaas})


def test_msk_iam_is_refused_saying_what_to_use_instead() -> None:
    kafka = {"security.protocol": "SASL_SSL", "sasl.mechanism": "AWS_MSK_IAM",
             "sasl.jaas.config": "software.amazon.msk.auth.iam.IAMLoginModule required;"}
    with pytest.raises(DefinitionError, match="AWS MSK IAM .*OAUTHBEARER and tidings.oauth.token.provider.*"
                       "MSKAuthTokenProvider.generate_auth_token.*docs/security.md"):
        resolve(bootstrap=NOWHERE, kafka=kafka)


def test_a_kerberos_keytab_login_is_librdkafkas_keytab_and_principal() -> None:
    jaas = ('com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true storeKey=true '
            'keyTab="/etc/kafka/client.keytab" principal="client@EXAMPLE.COM";')
    connection = resolve(bootstrap=NOWHERE, kafka={"sasl.jaas.config": jaas})
    assert connection.properties == {"sasl.mechanism": "GSSAPI", "sasl.kerberos.keytab": "/etc/kafka/client.keytab",
                                     "sasl.kerberos.principal": "client@EXAMPLE.COM"}


def test_an_unknown_login_module_or_garbage_is_refused_naming_the_key_and_its_source(tmp_path: Path) -> None:
    path = write(tmp_path, "sasl.jaas.config=com.example.Custom required;\n")
    with pytest.raises(DefinitionError, match=rf"sasl.jaas.config \({path} line 1\): login module com.example.Custom"):
        resolve(bootstrap=NOWHERE, config_file=path)
    with pytest.raises(DefinitionError, match=r"sasl.jaas.config \(TIDINGS_KAFKA_SASL_JAAS_CONFIG\): not a JAAS"):
        resolve(bootstrap=NOWHERE, environ={"TIDINGS_KAFKA_SASL_JAAS_CONFIG": "user=x"})


def test_a_jaas_config_that_disagrees_with_sasl_password_is_refused_without_showing_either() -> None:
    jaas = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
            f"username='u' password='{SECRET}';")
    with pytest.raises(DefinitionError, match="disagree") as raised:
        resolve(bootstrap=NOWHERE, kafka={"sasl.jaas.config": jaas, "sasl.password": "other"})
    assert SECRET not in str(raised.value) and "other" not in str(raised.value)


def test_parse_jaas_reads_quoted_and_bare_options() -> None:
    assert parse_jaas("a.B required x=1 y='two words' z=\"3\";") == ("a.B", {"x": "1", "y": "two words", "z": "3"})
    assert parse_jaas("not jaas") == (None, {})


def test_a_pem_truststore_is_ssl_ca_location() -> None:
    typed = resolve(bootstrap=NOWHERE, kafka={"ssl.truststore.location": "/certs/ca", "ssl.truststore.type": "PEM",
                                              "ssl.truststore.password": "unused"})
    assert typed.properties == {"ssl.ca.location": "/certs/ca"}
    by_name = resolve(bootstrap=NOWHERE, kafka={"ssl.truststore.location": "/certs/ca.pem"})
    assert by_name.properties == {"ssl.ca.location": "/certs/ca.pem"}
    inline = resolve(bootstrap=NOWHERE, kafka={"ssl.truststore.certificates": "-----BEGIN CERTIFICATE-----..."})
    assert inline.properties == {"ssl.ca.pem": "-----BEGIN CERTIFICATE-----..."}


@pytest.mark.parametrize("given", [
    {"ssl.truststore.location": "/tmp/kafka.client.truststore.jks"},
    {"ssl.truststore.location": "/tmp/truststore", "ssl.truststore.type": "PKCS12"},
    {"ssl.truststore.location": "/tmp/truststore"},  # Java's default type is JKS
])
def test_a_jks_or_pkcs12_truststore_is_refused_saying_how_to_convert_it(given: dict[str, str]) -> None:
    with pytest.raises(DefinitionError, match="ssl.truststore.location .*convert it to PEM and set ssl.ca.location.*keytool.*openssl"):
        resolve(bootstrap=NOWHERE, kafka=given)


def test_a_pkcs12_keystore_is_librdkafkas_own_and_a_jks_one_is_refused() -> None:
    kept = resolve(bootstrap=NOWHERE, kafka={"ssl.keystore.location": "/c/client.p12", "ssl.keystore.type": "PKCS12",
                                             "ssl.keystore.password": SECRET})
    assert kept.properties == {"ssl.keystore.location": "/c/client.p12", "ssl.keystore.password": SECRET}
    with pytest.raises(DefinitionError, match="no JKS keystore; convert it to PKCS12 .*keytool -importkeystore"):
        resolve(bootstrap=NOWHERE, kafka={"ssl.keystore.location": "/c/kafka.client.keystore.jks"})
    with pytest.raises(DefinitionError, match="set ssl.certificate.location and ssl.key.location"):
        resolve(bootstrap=NOWHERE, kafka={"ssl.keystore.location": "/c/client.pem", "ssl.keystore.type": "PEM"})


def test_endpoint_identification_https_stays_and_empty_is_none() -> None:
    https = resolve(bootstrap=NOWHERE, kafka={"ssl.endpoint.identification.algorithm": "HTTPS"})
    assert https.properties == {"ssl.endpoint.identification.algorithm": "https"}
    off = resolve(bootstrap=NOWHERE, environ={"TIDINGS_KAFKA_SSL_ENDPOINT_IDENTIFICATION_ALGORITHM": ""})
    assert off.properties == {"ssl.endpoint.identification.algorithm": "none"}


def test_java_keys_with_no_meaning_for_librdkafka_are_dropped_with_a_debug_line(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger=kafka_properties.__name__)
    kafka = {"key.serializer": "org.apache.kafka.common.serialization.StringSerializer",
             "schema.registry.url": "https://psrc.example", "basic.auth.user.info": f"SR:{SECRET}",
             "client.dns.lookup": "use_all_dns_ips"}
    connection = resolve(bootstrap=NOWHERE, kafka=kafka)
    # client.dns.lookup is librdkafka's too (since 2.2): kept.
    assert connection.properties == {"client.dns.lookup": "use_all_dns_ips"}
    assert "basic.auth.user.info" in caplog.text and "key.serializer" in caplog.text
    assert SECRET not in caplog.text


def test_java_keys_are_translated_in_role_overrides_too() -> None:
    connection = resolve(bootstrap=NOWHERE, kafka={"consumer.ssl.truststore.location": "/certs/ca.pem"})
    assert connection.overrides == {"consumer": {"ssl.ca.location": "/certs/ca.pem"}}


def test_a_confluent_cloud_java_file_is_read_as_librdkafka_properties(tmp_path: Path) -> None:
    path = write(tmp_path, f"""\
# Required connection configs for Kafka producer, consumer, and admin
bootstrap.servers=pkc-abc12.us-east-1.aws.confluent.cloud:9092
security.protocol=SASL_SSL
sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username='KEY123' password='{SECRET}';
sasl.mechanism=PLAIN
# Required for correctness in Apache Kafka clients prior to 2.6
client.dns.lookup=use_all_dns_ips

# Best practice for higher availability in Apache Kafka clients prior to 3.0
session.timeout.ms=45000

# Best practice for Kafka producer to prevent data loss
acks=all

# Required connection configs for Confluent Cloud Schema Registry
schema.registry.url=https://psrc-xyz.us-east-2.aws.confluent.cloud
basic.auth.credentials.source=USER_INFO
basic.auth.user.info=SRKEY:SRSECRET
""")
    connection = resolve(config_file=path)
    assert connection.bootstrap == "pkc-abc12.us-east-1.aws.confluent.cloud:9092"
    assert connection.properties == {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.username": "KEY123",
        "sasl.password": SECRET, "client.dns.lookup": "use_all_dns_ips", "session.timeout.ms": "45000",
        "acks": "all",
    }
    producer = connection.producer()
    producer.flush(0)
    consumer = connection.consumer(**{"group.id": "g"})
    consumer.close()


def test_an_msk_scram_file_is_read_as_librdkafka_properties(tmp_path: Path) -> None:
    path = write(tmp_path, """\
security.protocol=SASL_SSL
sasl.mechanism=SCRAM-SHA-512
sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\
    username="alice" \\
    password="alice-secret";
""")
    connection = resolve(bootstrap="b-1.msk.example:9096", config_file=path)
    assert connection.properties == {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                                     "sasl.username": "alice", "sasl.password": "alice-secret"}


# -- librdkafka's own validation ---------------------------------------------------------------------


def test_a_key_librdkafka_does_not_know_is_refused_at_build_naming_it_and_its_source() -> None:
    connection = resolve(bootstrap=NOWHERE, environ={"TIDINGS_KAFKA_NO_SUCH_THING": "1"})
    with pytest.raises(DefinitionError, match=r'No such configuration property: "no.such.thing" \(no.such.thing is set by TIDINGS_KAFKA_NO_SUCH_THING\)') as raised:
        connection.producer()
    assert raised.value.__cause__ is None and raised.value.__suppress_context__


def test_a_java_key_librdkafka_refuses_says_what_to_use_instead() -> None:
    connection = resolve(bootstrap=NOWHERE, kafka={"max.request.size": "2000000"})
    with pytest.raises(DefinitionError, match="max.request.size is a Java client setting: use message.max.bytes"):
        connection.producer()


def test_an_invalid_value_is_refused_at_build_for_the_role_that_reads_it() -> None:
    connection = resolve(bootstrap=NOWHERE, kafka={"consumer.session.timeout.ms": "soon"})
    connection.producer().flush(0)
    with pytest.raises(DefinitionError, match='consumer.s configuration: Invalid value for configuration property "session.timeout.ms"'):
        connection.consumer(**{"group.id": "g"})



def test_a_refused_enum_value_is_attributed_to_its_property_not_to_the_value() -> None:
    connection = resolve(bootstrap=NOWHERE, environ={"TIDINGS_KAFKA_SSL_ENDPOINT_IDENTIFICATION_ALGORITHM": "bogus"})
    with pytest.raises(DefinitionError, match=r"ssl.endpoint.identification.algorithm is set by "
                                              r"TIDINGS_KAFKA_SSL_ENDPOINT_IDENTIFICATION_ALGORITHM\)"):
        connection.admin()

# -- secrets ----------------------------------------------------------------------------------------


def secret_connection() -> KafkaConnection:
    return resolve(bootstrap=NOWHERE, kafka={
        "sasl.password": SECRET, "ssl.key.password": SECRET + "1", "ssl.keystore.password": SECRET + "2",
        "sasl.oauthbearer.client.secret": SECRET + "3", "ssl.key.pem": SECRET + "4",
        "my.custom.secret": SECRET + "5", "producer.sasl.password": SECRET + "6", "client.rack": "r",
    })


def test_repr_and_redacted_hide_every_secret() -> None:
    connection = secret_connection()
    assert SECRET not in repr(connection)
    shown = connection.redacted()
    assert SECRET not in json.dumps(shown)
    assert shown["sasl.password"] == shown["producer.sasl.password"] == shown["ssl.key.pem"] == "[redacted]"
    assert shown["client.rack"] == "r" and shown["bootstrap.servers"] == NOWHERE
    assert str(connection) == NOWHERE
    assert connection.config("producer")["sasl.password"] == SECRET + "6"  # librdkafka gets them


def test_a_refusal_message_never_shows_a_secret() -> None:
    connection = resolve(bootstrap=NOWHERE, kafka={"sasl.password": SECRET})
    assert connection.redact(f"auth failed for {SECRET}!") == "auth failed for [redacted]!"


def test_every_client_built_is_recorded_with_its_site_and_no_secret(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    record = tmp_path / "clients.jsonl"
    monkeypatch.setenv("TIDINGS_KAFKA_RECORD_CLIENTS", str(record))
    connection = resolve(bootstrap=NOWHERE, kafka={
        "sasl.password": SECRET, "producer.sasl.password": SECRET + "6", "client.rack": "r"})
    connection.producer().flush(0)
    connection.admin()
    connection.consumer(**{"group.id": "g", "error_cb": print}).close()
    text = record.read_text()
    assert SECRET not in text
    lines = [json.loads(line) for line in text.splitlines()]
    assert [line["role"] for line in lines] == ["producer", "admin", "consumer"]
    site = f"{__name__}.test_every_client_built_is_recorded_with_its_site_and_no_secret"
    assert {line["site"] for line in lines} == {site}
    assert all(line["config"]["client.rack"] == "r" and line["config"]["sasl.password"] == "[redacted]" for line in lines)
    assert "error_cb" not in lines[2]["config"]


def test_connections_compare_and_hash_by_value() -> None:
    one = resolve(bootstrap=NOWHERE, kafka={"client.rack": "r", "consumer.client.id": "c"})
    two = resolve(bootstrap=NOWHERE, kafka={"consumer.client.id": "c", "client.rack": "r"})
    assert one == two and hash(one) == hash(two) and len({one, two}) == 1
    assert one != resolve(bootstrap=NOWHERE)
    assert one.with_bootstrap("other:1").properties == one.properties


def test_aiokafka_gets_the_same_security_settings() -> None:
    connection = resolve(bootstrap=NOWHERE, kafka={
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "u",
        "sasl.password": SECRET, "client.id": "bench", "client.rack": "r",
    })
    assert connection.aiokafka("producer") == {
        "bootstrap_servers": NOWHERE, "security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "SCRAM-SHA-256",
        "sasl_plain_username": "u", "sasl_plain_password": SECRET, "client_id": "bench",
    }
    with pytest.raises(DefinitionError, match="OAUTHBEARER: aiokafka has no built-in OIDC client; give a token provider"):
        resolve(bootstrap=NOWHERE, kafka={"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER"}).aiokafka("consumer")
    with pytest.raises(DefinitionError, match="GSSAPI: the aiokafka clients here do PLAIN, SCRAM and OAUTHBEARER"):
        resolve(bootstrap=NOWHERE, kafka={"security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI"}).aiokafka("consumer")


# -- the App and the CLI ---------------------------------------------------------------------------


@pytest.fixture
def clean_environ(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No TIDINGS_BOOTSTRAP or TIDINGS_KAFKA_* of the machine running the tests."""
    import os

    for name in list(os.environ):
        if name == "TIDINGS_BOOTSTRAP" or name.startswith("TIDINGS_KAFKA_"):
            monkeypatch.delenv(name)
    return monkeypatch


def test_app_kafka_is_checked_when_the_app_is_declared() -> None:
    from tidings import App

    with pytest.raises(DefinitionError, match="App 'a' is invalid:\n  - ssl.truststore.location"):
        App("a", kafka={"ssl.truststore.location": "/tmp/kafka.client.truststore.jks"})


def test_the_app_connection_keeps_its_properties_for_another_bootstrap(clean_environ: pytest.MonkeyPatch) -> None:
    from tidings import App

    app = App("a", bootstrap="app:1", kafka={"client.rack": "r1", "sasl.password": SECRET})
    clean_environ.setenv("TIDINGS_KAFKA_CLIENT_ID", "from-env")
    assert app.connection.bootstrap == "app:1" and app.bootstrap() == "app:1"
    assert app.connection.properties == {"client.rack": "r1", "sasl.password": SECRET, "client.id": "from-env"}
    other = app.connection_for("other:1")
    assert other.bootstrap == "other:1" and other.properties == app.connection.properties
    assert app.connection_for(other) is other


def test_an_app_without_bootstrap_says_how_to_give_it(clean_environ: pytest.MonkeyPatch) -> None:
    from tidings import App

    with pytest.raises(BrokerError, match="no Kafka bootstrap servers"):
        App("a").bootstrap()


def test_app_client_is_one_client_per_connection(clean_environ: pytest.MonkeyPatch) -> None:
    from tidings import App

    app = App("a", bootstrap=NOWHERE, kafka={"client.rack": "r1"})
    client = app.client()
    assert app.client(NOWHERE) is client and app.client(app.connection) is client
    assert client.connection == app.connection and client.bootstrap == NOWHERE
    assert app.client("127.0.0.1:10") is not client


def test_a_client_given_an_address_keeps_the_apps_properties(clean_environ: pytest.MonkeyPatch) -> None:
    from tidings import App, Client

    app = App("a", kafka={"client.rack": "r1"})
    assert Client(NOWHERE, app=app).connection.properties == {"client.rack": "r1"}


def kafka_commands() -> dict[str, list[str]]:
    """Every (sub)command of ``tidings`` and its long options."""
    import argparse

    from tidings.cli.main import build_parser

    found: dict[str, list[str]] = {}

    def walk(parser: argparse.ArgumentParser, name: str) -> None:
        subparsers = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subparsers:
            found[name] = [o for a in parser._actions for o in a.option_strings if o.startswith("--")]
        for action in subparsers:
            for sub_name, sub in action.choices.items():
                walk(sub, f"{name} {sub_name}".strip())

    walk(build_parser(), "")
    return found


def test_every_command_that_talks_to_kafka_takes_bootstrap_and_kafka_config() -> None:
    commands = kafka_commands()
    without = sorted(name for name, options in commands.items() if "--kafka-config" not in options)
    # These talk to no Kafka but their own local broker (or none at all).
    assert without == ["broker start", "broker status", "broker stop", "demo", "topics show"]
    assert all("--bootstrap" in options for name, options in commands.items() if name not in without)


def test_the_cli_reads_kafka_config_and_the_flag_wins_over_the_environment(
    tmp_path: Path, clean_environ: pytest.MonkeyPatch,
) -> None:
    from tidings import App
    from tidings.cli import kafka as cli_kafka
    from tidings.cli.main import build_parser

    flagged = write(tmp_path, "bootstrap.servers=file:1\nclient.rack=flag\n", "flag.properties")
    from_env = write(tmp_path, "client.rack=env\n", "env.properties")
    clean_environ.setenv("TIDINGS_KAFKA_CONFIG", str(from_env))
    app = App("a", kafka={"client.id": "app"})
    args = build_parser().parse_args(["send", "m:app", "tally", "t-1", "Add", "--kafka-config", str(flagged)])
    connection = cli_kafka.connection(args, app)
    assert connection.bootstrap == "file:1"
    assert connection.properties == {"client.rack": "flag", "client.id": "app"}
    args = build_parser().parse_args(["offsets", "show", "m:app", "--bootstrap", "flag:2"])
    assert cli_kafka.connection(args, app).redacted() == {
        "bootstrap.servers": "flag:2", "client.rack": "env", "client.id": "app"}


def test_no_help_shows_a_secret(clean_environ: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import argparse

    from tidings.cli.main import build_parser

    clean_environ.setenv("TIDINGS_KAFKA_SASL_PASSWORD", SECRET)
    clean_environ.setenv("TIDINGS_KAFKA_CONFIG", str(write(tmp_path, f"sasl.password={SECRET}\n")))
    parser = build_parser()
    texts = [parser.format_help()]
    stack = [parser]
    while stack:
        for action in stack.pop()._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub in action.choices.values():
                    texts.append(sub.format_help())
                    stack.append(sub)
    assert "--kafka-config" in "".join(texts) and SECRET not in "".join(texts)


def test_the_app_connection_follows_every_change_of_the_tidings_environment(clean_environ: pytest.MonkeyPatch) -> None:
    """``connection_for`` keys its cache on a cheap stamp of the TIDINGS_* variables: each
    change of one (set, changed, removed) resolves again; other variables do not matter."""
    from tidings import App
    from tidings.shell.runtime.connection import environment_stamp

    app = App("a", bootstrap="app:1")
    first = app.connection_for("other:1")
    clean_environ.setenv("UNRELATED_TO_TIDINGS", "x")
    assert app.connection_for("other:1") is first
    clean_environ.setenv("TIDINGS_KAFKA_CLIENT_ID", "one")
    stamp = environment_stamp()
    assert app.connection_for("other:1").properties == {"client.id": "one"}
    clean_environ.setenv("TIDINGS_KAFKA_CLIENT_ID", "two")
    assert environment_stamp() != stamp
    assert app.connection_for("other:1").properties == {"client.id": "two"}
    clean_environ.delenv("TIDINGS_KAFKA_CLIENT_ID")
    assert app.connection_for("other:1").properties == {}
