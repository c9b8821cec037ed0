"""Build the App a test runs, under the test's own name, in the test and in its workers.

A test suite names a factory as ``MODULE:FUNCTION`` (pytest's ini option ``tidings_app``,
or the ``tidings_app_spec`` fixture): a function that takes the app's name and returns the
App with its definitions declared on it, e.g. ``examples.shop.app:build``. The plugin calls
it with a fresh name per test, so each test has topics and consumer groups of its own, and
its workers (``tidings worker tidings.testing.app_under_test:app``) call the same factory
with the same name from ``TIDINGS_TEST_APP`` and ``TIDINGS_TEST_APP_ID``.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from tidings.errors import DefinitionError

if TYPE_CHECKING:
    from tidings.shell.app import App

#: The factory, ``MODULE:FUNCTION``, in a test's worker.
APP_ENV = "TIDINGS_TEST_APP"
#: The app name the factory is given, in a test's worker.
APP_ID_ENV = "TIDINGS_TEST_APP_ID"


def load_factory(spec: str) -> Callable[[str], App]:
    """Import ``MODULE`` and return its callable ``FUNCTION`` (``spec`` is ``MODULE:FUNCTION``).

    Raises:
        DefinitionError: ``spec`` is malformed, its module does not import, or it names no
            callable (an App itself is refused: it has one fixed name, so tests would share
            its topics).
    """
    from tidings.shell.app import App

    if not isinstance(spec, str) or spec.count(":") != 1 or not all(spec.split(":")):
        raise _unusable(f"the app factory must be MODULE:FUNCTION (e.g. examples.shop.app:build), not {spec!r}")
    module_name, attribute = spec.split(":")
    if os.getcwd() not in sys.path:  # as `tidings worker` does: a checkout's modules import
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise _unusable(f"cannot import {module_name!r} for the app factory {spec!r}: {exc}") from exc
    factory = getattr(module, attribute, None)
    if isinstance(factory, App):
        raise _unusable(f"{spec} is an App with a fixed name; name a function that builds it from a "
                              f"name instead (def build(name: str) -> App)")
    if not callable(factory):
        raise _unusable(f"{module_name!r} has no function {attribute!r} for the app factory {spec!r}")
    return factory  # type: ignore[no-any-return]


def build_app(spec: str, app_id: str) -> App:
    """Call the factory ``spec`` names with ``app_id`` and check that it built that App.

    Raises:
        DefinitionError: As ``load_factory``, or the factory returned no App, or one with
            another name (it must use the name it is given, or tests would share topics).
    """
    from tidings.shell.app import App

    built = load_factory(spec)(app_id)
    if not isinstance(built, App):
        raise _unusable(f"the app factory {spec} returned {type(built).__name__}, not an App")
    if built.name != app_id:
        raise _unusable(f"the app factory {spec} named its App {built.name!r}, not {app_id!r}: "
                              f"use the name it is given (App(name))")
    return built


def app_from_environment(environ: Mapping[str, str] = os.environ) -> App:
    """The App a test's worker hosts: ``build_app($TIDINGS_TEST_APP, $TIDINGS_TEST_APP_ID)``.

    Raises:
        DefinitionError: A variable is missing, or as ``build_app``.
    """
    spec, app_id = environ.get(APP_ENV), environ.get(APP_ID_ENV)
    if not spec or not app_id:
        raise _unusable(f"set {APP_ENV} (MODULE:FUNCTION) and {APP_ID_ENV} (the app name): the pytest "
                              f"plugin's tidings_worker fixture sets both")
    return build_app(spec, app_id)


def _unusable(reason: str) -> DefinitionError:
    # One reason, said as DefinitionError says every reason: "... is invalid: - reason".
    return DefinitionError("the tidings test app", [reason])
