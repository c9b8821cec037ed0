"""Which client a workflow handle's calls go through (no Kafka: clients connect on first use)."""

from __future__ import annotations

from pathlib import Path

from tests.integration.workflow_apps import build
from tidings import Client

NOWHERE = "127.0.0.1:9"  # nothing listens there; nothing here may reach Kafka


def test_a_handle_goes_through_the_client_that_took_it_up_until_that_client_is_closed(tmp_path: Path) -> None:
    app = build("serving", tmp_path)
    one = next(h for h in app.hosted if h.name == "one-activity")
    assert one.client(NOWHERE) is app.client(NOWHERE)
    direct = Client(NOWHERE, app=app)
    assert direct.workflow("one-activity") is one
    assert one.client(NOWHERE) is direct and one.client(NOWHERE).requester is direct.requester
    direct.close()
    assert one.client(NOWHERE) is app.client(NOWHERE)


def test_a_client_of_another_app_does_not_take_a_handle_up(tmp_path: Path) -> None:
    app, other = build("serving", tmp_path), build("other", tmp_path)
    one = next(h for h in app.hosted if h.name == "one-activity")
    assert Client(NOWHERE, app=other).workflow_for(one) is one
    assert one.client(NOWHERE) is app.client(NOWHERE)


def test_closing_a_handle_closes_the_shared_client_which_opens_again_on_its_next_request(tmp_path: Path) -> None:
    app = build("serving", tmp_path)
    one = next(h for h in app.hosted if h.name == "one-activity")
    client = one.client(NOWHERE)
    one.close()
    assert one._clients == {}
    assert one.client(NOWHERE) is client  # the app's client, closed and reusable
