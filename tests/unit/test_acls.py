"""``tidings acls``: the generated bindings are least privilege, short and stable.

Checked against the bank and shop example apps: a new workflow adds no worker binding;
every topic a worker uses is covered by a worker binding; no client binding allows WRITE on
anything but commands and inboxes, or READ on anything but outcomes, status and its own
replies; each client reads only its own replies topic.
"""

from __future__ import annotations

import pytest

from tidings import App
from tidings.cli.acls import app_topics
from tidings.cli.main import main
from tidings.errors import DefinitionError
from tidings.shell.runtime.acls import Binding, app_bindings, client_replies_topic
from tidings.shell.runtime.groups import reader_group

WORKER, TELLER, AUDITOR = "User:bank-worker", "User:teller", "User:auditor"


def bank() -> App:
    from examples.bank.app import app

    return app


def covers(binding: Binding, resource: str, name: str, operation: str) -> bool:
    return (binding.resource_type == resource and binding.operation == operation and (
        binding.name == name if binding.pattern_type == "LITERAL" else name.startswith(binding.name)))


def allowed(bindings: list[Binding], principal: str, resource: str, name: str, operation: str) -> bool:
    return any(b.principal == principal and covers(b, resource, name, operation) for b in bindings)


def an_app(workflows: int) -> App:
    app = App("grows")
    for index in range(workflows):
        async def body(ctx: object, x: object) -> object:
            return x

        app.workflow(f"w{index}")(body)
    return app


def test_a_new_workflow_adds_no_worker_binding() -> None:
    one, three = an_app(1), an_app(3)
    assert app_bindings("grows", app_topics(one), worker=WORKER) == \
        app_bindings("grows", app_topics(three), worker=WORKER)


def test_every_topic_the_worker_uses_is_covered_for_every_operation_it_makes() -> None:
    app = bank()
    bindings = app_bindings(app.name, app_topics(app), worker=WORKER, clients=[TELLER])
    for topic in app_topics(app) + [client_replies_topic(app.name, TELLER)]:
        for operation in ("READ", "WRITE", "CREATE", "DESCRIBE", "DESCRIBE_CONFIGS"):
            assert allowed(bindings, WORKER, "TOPIC", topic, operation), (topic, operation)
    assert allowed(bindings, WORKER, "GROUP", app.name, "READ")
    assert allowed(bindings, WORKER, "TRANSACTIONAL_ID", f"{app.name}-pod-0", "WRITE")
    # A neighbouring app's topics are not the worker's.
    assert not allowed(bindings, WORKER, "TOPIC", "bank2.aggregate.account.events", "READ")


def test_a_client_writes_only_commands_and_inboxes_and_reads_only_outcomes_status_and_its_replies() -> None:
    app = bank()
    topics = app_topics(app) + ["bank.workflow.w.inbox", "bank.workflow.w.journal", "bank.workflow.w.outcomes",
                                "bank.workflow.w.status", "bank.workflow.w.replies", "bank.saga.transfer.inbox"]
    bindings = app_bindings(app.name, topics, worker=WORKER, clients=[TELLER, AUDITOR])
    teller = [b for b in bindings if b.principal == TELLER]
    written = {b.name for b in teller if b.operation == "WRITE"}
    read = {b.name for b in teller if b.operation == "READ" and b.resource_type == "TOPIC"}
    assert written == {"bank.aggregate.account.commands", "bank.workflow.w.inbox"}
    assert read == {"bank.workflow.w.outcomes", "bank.workflow.w.status", "bank.replies.teller"}
    assert all(b.pattern_type == "LITERAL" for b in teller if b.resource_type == "TOPIC")
    for topic in topics + ["bank.replies", "bank.replies.auditor", "bank.deadletter"]:
        if topic.endswith((".journal", ".events", ".replies", ".auditor", ".status", ".verdicts", ".deadletter")) \
                or topic == "bank.saga.transfer.inbox":
            assert not allowed(bindings, TELLER, "TOPIC", topic, "WRITE"), topic
    assert not allowed(bindings, TELLER, "TOPIC", "bank.replies.auditor", "READ")
    assert not allowed(bindings, TELLER, "TOPIC", "bank.replies", "READ")
    assert allowed(bindings, TELLER, "GROUP", reader_group("bank.client.", "replies"), "READ")
    assert not allowed(bindings, TELLER, "GROUP", "bank", "READ")
    assert not any(b.resource_type == "TRANSACTIONAL_ID" for b in teller)


@pytest.mark.parametrize("principal", ["teller", "User:", "User:CN=teller,OU=bank", "User:a/b", ":x"])
def test_a_principal_that_cannot_name_a_replies_topic_is_refused(principal: str) -> None:
    with pytest.raises(DefinitionError):
        app_bindings("bank", [], worker=None, clients=[principal])


def test_a_named_client_asks_for_replies_on_its_own_topic_and_reads_under_the_app_prefix(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("TIDINGS_CLIENT_NAME", raising=False)
    app = App("named")
    shared, own = app.client("127.0.0.1:1"), app.client("127.0.0.1:1", name="teller")
    assert shared.replies_topic == "named.replies" and own.replies_topic == "named.replies.teller"
    assert own.requester.replies_topic == "named.replies.teller"
    assert own.requester.group_prefix == "named.client."
    monkeypatch.setenv("TIDINGS_CLIENT_NAME", "auditor")
    assert app.client("127.0.0.1:1").replies_topic == "named.replies.auditor"
    with pytest.raises(DefinitionError):
        app.client("127.0.0.1:1", name="CN=x,OU=y")


def test_tidings_acls_prints_every_binding_without_kafka(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["acls", "examples.bank.app:app", "--worker", WORKER, "--client", TELLER,
                 "--bootstrap", "127.0.0.1:1"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == "14 ACLs for app 'bank'"
    assert "User:teller ALLOW WRITE on TOPIC LITERAL 'bank.aggregate.account.commands' from *" in out
