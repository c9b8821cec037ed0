"""The App a test's worker runs: ``tidings worker tidings.testing.app_under_test:app``.

The pytest plugin's worker fixture starts workers on this module with ``TIDINGS_TEST_APP``
(the suite's factory, ``MODULE:FUNCTION``) and ``TIDINGS_TEST_APP_ID`` (the test's app
name) set, so a worker hosts the same App, under the same name, as the test built with the
same factory (``tidings.testing.app_factory``).
"""

from __future__ import annotations

from tidings.testing.app_factory import AppFactoryError, app_from_environment

try:
    app = app_from_environment()
except AppFactoryError as exc:
    # `tidings worker` prints a SystemExit's message and exits 2, as for a bad MODULE:APP.
    raise SystemExit(f"tidings: {exc}") from exc
