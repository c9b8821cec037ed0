"""The OAUTHBEARER token hook (shell/runtime/oauth.py) and librdkafka's built-in OIDC.

No broker: confluent-kafka clients are built against 127.0.0.1:9 (nothing listens there);
librdkafka asks for the first token when the client polls, before any connection succeeds,
so a real client proves the hook reaches it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from tidings import DefinitionError
from tidings.shell.runtime import oauth
from tidings.shell.runtime.connection import KafkaConnection
from tidings.shell.runtime.oauth import TokenHook, TokenProviderError

NOWHERE = "127.0.0.1:9"
TOKEN = "eyJ0b2tlbi1zZWNyZXQtN2Qy"  # what a provider returns: a secret
OAUTH = {"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER"}
CALLS: list[str] = []


def provide(config: str) -> tuple[str, float, str, dict[str, str]]:
    """A token provider as a user writes one (named by module:function below)."""
    CALLS.append(config)
    return TOKEN, time.time() + 900, "worker", {"logicalCluster": "lkc-1"}


def provide_ms(config: str) -> tuple[str, int]:
    """Like MSKAuthTokenProvider.generate_auth_token: the expiry in milliseconds."""
    return TOKEN, int((time.time() + 900) * 1000)


SPEC = f"{__name__}:provide"


def resolve(**kwargs: Any) -> KafkaConnection:
    kwargs.setdefault("environ", {})
    kwargs.setdefault("bootstrap", NOWHERE)
    return KafkaConnection.resolve(**kwargs)


@pytest.fixture(autouse=True)
def no_calls() -> None:
    CALLS.clear()


# -- naming the provider ------------------------------------------------------------------


def test_the_property_from_a_file_the_environment_or_the_app_resolves_to_the_function(tmp_path: Path) -> None:
    file = tmp_path / "client.properties"
    file.write_text("security.protocol=SASL_SSL\nsasl.mechanism=OAUTHBEARER\n"
                    f"tidings.oauth.token.provider={SPEC}\n", encoding="utf-8")
    environ = {"TIDINGS_KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "TIDINGS_KAFKA_SASL_MECHANISM": "OAUTHBEARER",
               "TIDINGS_KAFKA_TIDINGS_OAUTH_TOKEN_PROVIDER": SPEC}
    for connection in (resolve(config_file=file), resolve(environ=environ),
                       resolve(kafka={**OAUTH, oauth.PROVIDER_PROPERTY: SPEC})):
        assert connection.token_hook is not None
        assert connection.token_hook.provider is provide
        assert connection.token_hook.name == SPEC
        # Never a librdkafka property: librdkafka would refuse the unknown key.
        assert oauth.PROVIDER_PROPERTY not in connection.properties
    assert resolve(config_file=file) == resolve(environ=environ)  # the same function both ways


def test_a_function_given_in_code_as_oauth_cb_is_the_hook_and_wins_over_the_property() -> None:
    connection = resolve(kafka={**OAUTH, "oauth_cb": provide_ms},
                         environ={"TIDINGS_KAFKA_TIDINGS_OAUTH_TOKEN_PROVIDER": SPEC})
    assert connection.token_hook is not None and connection.token_hook.provider is provide_ms
    assert connection.token_hook.name == f"{__name__}:provide_ms"


@pytest.mark.parametrize(("spec", "reason"), [
    ("no_colon_here", "'no_colon_here' is not package.module:function"),
    ("tidings.no_such_module:f", "cannot import tidings.no_such_module (ModuleNotFoundError"),
    (f"{__name__}:missing", f"{__name__} has no function missing"),
    (f"{__name__}:TOKEN", f"{__name__} has no function TOKEN"),  # there, but not callable
])
def test_a_bad_module_function_is_one_line_naming_where_it_was_set(spec: str, reason: str) -> None:
    with pytest.raises(DefinitionError) as caught:
        resolve(environ={"TIDINGS_KAFKA_TIDINGS_OAUTH_TOKEN_PROVIDER": spec}, kafka=OAUTH)
    (line,) = caught.value.reasons
    assert "\n" not in line
    assert line.startswith("tidings.oauth.token.provider (TIDINGS_KAFKA_TIDINGS_OAUTH_TOKEN_PROVIDER): ")
    assert reason in line


def test_oauth_cb_in_code_must_be_callable() -> None:
    with pytest.raises(DefinitionError, match="oauth_cb .*must be a function .*not str"):
        resolve(kafka={**OAUTH, "oauth_cb": "module:function"})


def test_a_provider_needs_sasl_mechanism_oauthbearer_and_not_librdkafkas_oidc() -> None:
    with pytest.raises(DefinitionError, match=r"sasl.mechanism is SCRAM-SHA-512: set sasl.mechanism=OAUTHBEARER"):
        resolve(kafka={"sasl.mechanism": "SCRAM-SHA-512", oauth.PROVIDER_PROPERTY: SPEC})
    with pytest.raises(DefinitionError, match="sasl.oauthbearer.method=oidc are both given"):
        resolve(kafka={**OAUTH, "sasl.oauthbearer.method": "oidc", oauth.PROVIDER_PROPERTY: SPEC})
    with pytest.raises(DefinitionError, match="consumer.tidings.oauth.token.provider .*every client"):
        resolve(kafka={**OAUTH, f"consumer.{oauth.PROVIDER_PROPERTY}": SPEC})


# -- reaching the clients -----------------------------------------------------------------


def test_every_confluent_kafka_client_gets_the_hook_as_oauth_cb() -> None:
    connection = resolve(kafka={**OAUTH, oauth.PROVIDER_PROPERTY: SPEC, "sasl.oauthbearer.config": "region=eu-west-1"})
    for role in ("consumer", "producer", "admin"):
        config = connection.config(role)  # type: ignore[arg-type]
        assert config["oauth_cb"] is connection.token_hook
        assert oauth.PROVIDER_PROPERTY not in config
    assert connection.with_bootstrap("other:1").token_hook is connection.token_hook


def test_a_real_client_calls_the_provider_with_sasl_oauthbearer_config() -> None:
    connection = resolve(kafka={"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
                                oauth.PROVIDER_PROPERTY: SPEC, "sasl.oauthbearer.config": "region=eu-west-1"})
    producer = connection.producer()
    try:
        deadline = time.monotonic() + 10
        while not CALLS and time.monotonic() < deadline:
            producer.poll(0.1)  # librdkafka asks for the first token here
    finally:
        producer.flush(0)
    assert CALLS and CALLS[0] == "region=eu-west-1"
    assert isinstance(producer, Producer)


def test_aiokafka_gets_a_token_provider_over_the_same_function() -> None:
    connection = resolve(kafka={**OAUTH, oauth.PROVIDER_PROPERTY: SPEC, "sasl.oauthbearer.config": "cfg"})
    kwargs = connection.aiokafka("consumer")
    from aiokafka.abc import AbstractTokenProvider

    provider = kwargs.pop("sasl_oauth_token_provider")
    assert isinstance(provider, AbstractTokenProvider)
    assert {key: kwargs[key] for key in ("security_protocol", "sasl_mechanism")} == {
        "security_protocol": "SASL_SSL", "sasl_mechanism": "OAUTHBEARER"}
    assert "sasl_plain_password" not in kwargs
    assert asyncio.run(provider.token()) == TOKEN
    assert provider.extensions() == {"logicalCluster": "lkc-1"}
    assert CALLS == ["cfg"]


def test_librdkafkas_own_oidc_passes_through_as_properties_and_its_secret_is_hidden() -> None:
    secret = "oidc-Secret-4b1d"
    connection = resolve(kafka={**OAUTH, "sasl.oauthbearer.method": "oidc", "sasl.oauthbearer.client.id": "tidings",
                                "sasl.oauthbearer.client.secret": secret, "sasl.oauthbearer.scope": "kafka",
                                "sasl.oauthbearer.token.endpoint.url": "https://idp.example.com/oauth2/token"})
    assert connection.token_hook is None
    config = connection.config("admin")
    assert config["sasl.oauthbearer.method"] == "oidc" and config["sasl.oauthbearer.client.secret"] == secret
    assert "oauth_cb" not in config
    connection.admin()  # librdkafka takes the configuration
    assert secret not in repr(connection) and secret not in json.dumps(connection.redacted())


# -- secrets --------------------------------------------------------------------------------


def test_no_token_in_redacted_repr_logs_or_the_build_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    record = tmp_path / "clients.jsonl"
    monkeypatch.setenv("TIDINGS_KAFKA_RECORD_CLIENTS", str(record))
    caplog.set_level(logging.DEBUG)
    connection = resolve(kafka={"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
                                oauth.PROVIDER_PROPERTY: SPEC})
    producer = connection.producer()
    deadline = time.monotonic() + 10
    while not CALLS and time.monotonic() < deadline:
        producer.poll(0.1)
    producer.flush(0)
    assert CALLS, "the provider was never asked: the checks below would prove nothing"
    shown = connection.redacted()
    assert shown[oauth.PROVIDER_PROPERTY] == SPEC  # which function, for the operator
    for text in (json.dumps(shown), repr(connection), record.read_text(encoding="utf-8"), caplog.text):
        assert TOKEN not in text


# -- the hook itself ------------------------------------------------------------------------


def test_clients_share_a_young_token_and_a_new_one_is_made_past_half_its_life() -> None:
    now = [1_000_000.0]
    made: list[float] = []

    def counting(config: str) -> tuple[str, float]:
        made.append(now[0])
        return f"t{len(made)}", now[0] + 100

    hook = TokenHook(counting, "m:counting")
    original = time.time
    try:
        time.time = lambda: now[0]  # type: ignore[assignment]
        assert hook("") == ("t1", now[0] + 100, "", {})
        now[0] += 49
        assert hook("")[0] == "t1"  # a second client, 49 s later: the same token
        now[0] += 2
        assert hook("")[0] == "t2"  # past half of 100 s: a new one
    finally:
        time.time = original  # type: ignore[assignment]
    assert len(made) == 2


def test_a_failed_refresh_keeps_the_last_valid_token_and_else_says_so_in_one_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    answers: list[Any] = [("tok", time.time() + 20)]

    def flaky(config: str) -> Any:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    caplog.set_level(logging.WARNING, logger=oauth.__name__)
    hook = TokenHook(flaky, "m:flaky")
    assert hook("")[0] == "tok"
    hook._last.issued -= 25  # past half of its life: the next call asks the provider
    answers.append(ConnectionError(f"credentials {TOKEN} expired"))
    assert hook("")[0] == "tok"
    assert "m:flaky failed (ConnectionError); using the last token" in caplog.text
    assert TOKEN not in caplog.text  # the exception's message may quote a secret: never logged
    fresh = TokenHook(flaky, "m:flaky")
    answers.append(ConnectionError(f"credentials {TOKEN} expired"))
    with pytest.raises(TokenProviderError) as caught:
        fresh("")
    assert str(caught.value) == ("the OAUTHBEARER token provider m:flaky failed: ConnectionError; "
                                 "check its credentials and logs")


def test_an_expiry_in_milliseconds_is_taken_as_such() -> None:
    token, expiry, principal, extensions = TokenHook(provide_ms, "m:ms")("")
    assert token == TOKEN and time.time() + 800 < expiry < time.time() + 1000
    assert (principal, extensions) == ("", {})


@pytest.mark.parametrize("answer", [TOKEN, (TOKEN,), ("", 2e9), (TOKEN, "2e9"), (TOKEN, 2e9, 7),
                                    (TOKEN, 2e9, "p", {"k": 1})])
def test_a_provider_answer_that_is_not_a_token_is_refused_without_quoting_it(answer: Any) -> None:
    with pytest.raises(TokenProviderError, match=r"m:bad returned a \w+, not \(token, expiry") as caught:
        TokenHook(lambda config: answer, "m:bad")("")
    assert TOKEN not in str(caught.value)


def test_an_expired_token_is_refused_saying_the_expiry_is_epoch_seconds() -> None:
    with pytest.raises(TokenProviderError, match="expired .* s ago: the expiry is seconds since the epoch"):
        TokenHook(lambda config: (TOKEN, 900), "m:relative")("")


# -- docs/security.md ---------------------------------------------------------------------------

SECURITY_DOC = Path(__file__).resolve().parents[2] / "docs" / "security.md"


def _properties_blocks() -> list[str]:
    blocks: list[str] = []
    current: list[str] | None = None
    for line in SECURITY_DOC.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            if current is None:
                current = []
                kind = line[3:]
            else:
                if kind == "" and any(text.startswith("bootstrap.servers=") for text in current):
                    blocks.append("\n".join(current) + "\n")
                current = None
            continue
        if current is not None:
            current.append(line)
    return blocks


def test_every_properties_file_of_docs_security_resolves(tmp_path: Path) -> None:
    """The recipes' files are read as written: no Java key refused, no malformed line."""
    blocks = _properties_blocks()
    assert len(blocks) >= 7, "the recipes of docs/security.md are gone"
    for number, block in enumerate(blocks):
        # The MSK IAM recipe names a module of the reader's image: any importable function stands in.
        block = block.replace("bank_auth.msk:token", SPEC)
        file = tmp_path / f"recipe-{number}.properties"
        file.write_text(block, encoding="utf-8")
        connection = resolve(bootstrap=None, config_file=file)
        assert connection.bootstrap and "security.protocol" in connection.properties
        for role in ("consumer", "producer", "admin"):
            connection.config(role)  # type: ignore[arg-type]
        if oauth.PROVIDER_PROPERTY in block:
            assert connection.token_hook is not None and connection.token_hook.provider is provide
