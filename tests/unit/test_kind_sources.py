"""A projection and an orchestration read only aggregates declared in their own app
(``runtime/context.py::source_reasons``): no broker needed, the check runs at declaration."""

from __future__ import annotations

import pytest

from tidings import App, DefinitionError, Persist


def _aggregate(app: App):  # type: ignore[no-untyped-def]
    return app.aggregate("acct", 0, lambda c, s: Persist(c), lambda e, s: s + e, command=int, event=int)


def test_a_projection_refuses_no_sources_and_an_aggregate_of_another_app() -> None:
    app, other = App("a"), App("b")
    foreign = _aggregate(other)
    with pytest.raises(DefinitionError) as empty:
        app.projection("p", [], lambda event, view: None)
    assert "sources must name at least one aggregate handle" in str(empty.value)
    with pytest.raises(DefinitionError) as wrong:
        app.projection("p", [foreign], lambda event, view: None)
    assert "is not an aggregate handle of this app" in str(wrong.value)
    app.projection("p", [_aggregate(app)], lambda event, view: None)  # its own: accepted


def test_an_orchestration_refuses_a_raw_topic_and_says_why() -> None:
    app = App("a")
    with pytest.raises(DefinitionError) as wrong:
        app.orchestration("o", ["a.aggregate.acct.events"], lambda event: "k", lambda key: None)
    assert "is not an aggregate handle of this app (raw topics are not accepted" in str(wrong.value)
