"""The App a test's worker runs: ``tidings worker tidings.testing.app_under_test:app``.

The pytest plugin's worker fixture starts workers on this module with ``TIDINGS_TEST_APP``
(the suite's factory, ``MODULE:FUNCTION``) and ``TIDINGS_TEST_APP_ID`` (the test's app
name) set, so a worker hosts the same App, under the same name, as the test built with the
same factory (``tidings.testing.app_factory``).
"""

from __future__ import annotations

from typing import Any

from tidings.errors import DefinitionError
from tidings.testing.app_factory import app_from_environment


def __getattr__(name: str) -> Any:
    """``app`` is built when it is first asked for (``tidings worker`` does), not on import,
    so importing this module (tidings' own module walks do) needs no variables set."""
    if name != "app":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        app = app_from_environment()
    except DefinitionError as exc:
        # `tidings worker` shows a SystemExit's message and exits, as for a bad MODULE:APP.
        raise SystemExit(f"tidings: {exc}") from exc
    globals()["app"] = app
    return app
