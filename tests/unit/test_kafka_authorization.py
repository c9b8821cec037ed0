"""Kafka's authorization refusals become one line that says who was refused and what to do.

A cluster with an authorizer answers TOPIC_AUTHORIZATION_FAILED for a topic the principal
may not describe whether it exists or not: the message must never say "not there"
(issue 18, item 3). The secured broker shows the same end to end
(``tests/integration/test_acls_secured.py``).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AclOperation

from tidings.errors import BrokerError
from tidings.shell.runtime.admin import KafkaAdmin
from tidings.shell.runtime.connection import KafkaConnection
from tidings.shell.runtime.kafka import PartitionRange, TopicCheck, not_authorized, topic_partitions

SCRAM = KafkaConnection("broker:9093", {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                                        "sasl.username": "teller", "sasl.password": "secret"})


class _Metadata:
    def __init__(self, error: KafkaError | None) -> None:
        self.topics = {"bank.replies.teller": SimpleNamespace(error=error, partitions={0: None, 1: None})}

    def __call__(self, topic: str, timeout: float) -> Any:
        return self


def _consumer(error: KafkaError | None) -> Any:
    return SimpleNamespace(list_topics=_Metadata(error))


def test_a_topic_the_principal_may_not_describe_is_not_called_missing() -> None:
    with pytest.raises(BrokerError) as refused:
        topic_partitions(_consumer(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)), "bank.replies.teller",
                         connection=SCRAM)
    message = str(refused.value)
    assert message.startswith("User:teller is not authorized to describe topic bank.replies.teller"), message
    assert "TOPIC_AUTHORIZATION_FAILED" in message and "tidings acls" in message
    assert "not there" not in message and "secret" not in message
    # A topic that is really missing still says how to make it.
    with pytest.raises(BrokerError, match="is not there .*tidings topics apply"):
        topic_partitions(_consumer(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)), "bank.replies.teller")
    assert topic_partitions(_consumer(None), "bank.replies.teller") == [0, 1]


@pytest.mark.parametrize("code, kind", [
    (KafkaError.TOPIC_AUTHORIZATION_FAILED, "topic"),
    (KafkaError.GROUP_AUTHORIZATION_FAILED, "consumer group"),
    (KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "transactional id"),
])
def test_each_authorization_refusal_names_what_was_refused(code: int, kind: str) -> None:
    for error in (KafkaError(code), KafkaException(KafkaError(code))):
        refused = not_authorized(error, SCRAM, "to read bank.journal/0")
        assert refused is not None
        assert f"refuse it on the {kind} ({KafkaError(code).name()})" in str(refused)
    assert not_authorized(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART), SCRAM, "x") is None


def test_a_reader_refused_its_group_says_so() -> None:
    message = SimpleNamespace(error=lambda: KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED))
    with pytest.raises(BrokerError, match="User:teller is not authorized to read bank.journal/0: .*consumer group"):
        PartitionRange("bank.journal", 0, 0, 10, SCRAM).take([message])  # type: ignore[list-item]


def test_the_admin_s_refusals_say_so_too() -> None:
    admin = KafkaAdmin(SCRAM)
    error = admin._error("reading the offsets of group bank", KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED))
    assert str(error).startswith("User:teller is not authorized to read the offsets of group bank"), error


class _Admin:
    """describe_topics as a secured cluster answers it: per topic, authorized operations or an error."""

    def __init__(self, answers: dict[str, Any]) -> None:
        self.answers = answers
        self.asked: list[str] = []

    def describe_topics(self, topics: Any, **kwargs: Any) -> dict[str, Any]:
        (name,) = topics.topic_names
        self.asked.append(name)
        answer = self.answers[name]

        class Future:
            def result(self, timeout: float) -> Any:
                if isinstance(answer, KafkaError):
                    raise KafkaException(answer)
                return SimpleNamespace(authorized_operations=answer)

        return {name: Future()}


def test_topic_check_tells_a_writable_topic_from_a_read_only_one_a_hidden_one_and_a_missing_one() -> None:
    check = TopicCheck(SCRAM)
    admin = _Admin({
        "mine": [AclOperation.READ, AclOperation.WRITE, AclOperation.DESCRIBE],
        "no-authorizer": None,  # an older broker that does not say: assumed writable
        "read-only": [AclOperation.DESCRIBE],
        "hidden": KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED),
        "missing": KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART),
    })
    check._admin = admin
    assert check.refusal("mine") is None and check.exists("mine")
    assert check.refusal("no-authorizer") is None
    assert "User:teller may describe topic 'read-only' but not write it" in (check.refusal("read-only") or "")
    assert check.exists("read-only")
    assert "User:teller may not describe topic 'hidden'" in (check.refusal("hidden") or "")
    assert not check.exists("hidden")
    assert "no topic 'missing'" in (check.refusal("missing") or "") and not check.exists("missing")
    assert admin.asked == ["mine", "no-authorizer", "read-only", "hidden", "missing"]  # each asked once
    check.forget("mine")
    check.refusal("mine")
    assert admin.asked[-1] == "mine"
    admin.answers["odd"] = KafkaError(KafkaError.POLICY_VIOLATION)  # any other answer: one record's
    assert "Kafka refused to describe topic 'odd'" in (check.refusal("odd") or "")
    admin.answers["down"] = KafkaError(KafkaError._TIMED_OUT)
    with pytest.raises(BrokerError, match="describing topic 'down'"):
        check.refusal("down")


def test_a_connection_names_its_principal_as_far_as_it_can() -> None:
    assert SCRAM.principal == "User:teller"
    assert KafkaConnection("b:9093", {"ssl.certificate.location": "/c.pem"}).principal == "the client certificate's principal"
    assert KafkaConnection("b:9092").principal == "this connection's principal"
