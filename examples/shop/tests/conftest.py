"""The shop's test suite: which App the tidings pytest plugin builds for each test.

A project of its own would rather set the ini option once, in its pyproject.toml::

    [tool.pytest.ini_options]
    tidings_app = "examples.shop.app:build"
"""

from __future__ import annotations

import pytest


@pytest.fixture
def tidings_app_spec() -> str:
    """The shop's factory: ``build(name)`` declares its workflows on an App of that name."""
    return "examples.shop.app:build"
