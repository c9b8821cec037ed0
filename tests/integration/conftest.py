"""Integration tests run against the real broker of ``kafka_bootstrap`` (tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

_HERE = Path(__file__).parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test under tests/integration with ``integration``, so ``-m`` can select them."""
    for item in items:
        if _HERE in Path(item.path).parents:
            item.add_marker(pytest.mark.integration)
