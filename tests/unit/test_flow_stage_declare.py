"""``app.workflow_flow`` refuses bad arguments with every reason, and declares only the sink."""

from __future__ import annotations

import pytest

from tidings import App, WorkflowContext
from tidings.errors import DefinitionError


def app_with_workflow() -> App:
    app = App("shop", partitions=3)

    @app.workflow("score")
    async def score(ctx: WorkflowContext, n: int) -> int:
        return n

    return app


def test_the_stage_is_a_flow_kind_that_declares_its_sink_and_not_its_source() -> None:
    app = app_with_workflow()
    stage = app.workflow_flow("numbers", "shop.numbers", "score", lambda n: f"s-{n}", "shop.scored", 8, 30)
    assert (stage.kind, stage.name, stage.parallelism, stage.timeout) == ("flow", "numbers", 8, 30.0)
    names = {spec.name: spec for spec in app.topic_specs()}
    assert "shop.numbers" not in names
    assert names["shop.scored"].partitions == 3
    assert names["shop.scored"].config["cleanup.policy"] == "compact"
    assert stage in app.hosted


def test_every_problem_is_listed_at_once() -> None:
    app = app_with_workflow()
    with pytest.raises(DefinitionError) as raised:
        app.workflow_flow("bad", "shop.same", "nope", "not callable", "shop.same", 0, -1)  # type: ignore[arg-type]
    text = str(raised.value)
    for part in ("no workflow 'nope'", "id_of must be callable", "parallelism must be an int",
                 "timeout must be a positive", "source_topic and sink_topic are both"):
        assert part in text, text


def test_the_sink_cannot_be_one_of_the_apps_own_topics() -> None:
    app = app_with_workflow()
    with pytest.raises(DefinitionError, match="already one of the app's topics"):
        app.workflow_flow("bad", "shop.numbers", "score", str, "shop.workflow.score.outcomes", 1, 1)


def test_a_second_flow_of_the_same_name_is_refused() -> None:
    app = app_with_workflow()
    app.workflow_flow("numbers", "shop.numbers", "score", str, "shop.scored", 1, 1)
    with pytest.raises(DefinitionError, match="already declared"):
        app.workflow_flow("numbers", "shop.numbers", "score", str, "shop.scored2", 1, 1)
