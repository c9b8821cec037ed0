"""Find the App a command line names as ``MODULE:ATTRIBUTE``."""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any


def load_app(spec: str) -> Any:
    """Import ``MODULE`` and return its attribute ``ATTRIBUTE`` (default ``app``).

    The current directory is put on ``sys.path`` first, as ``python -m`` would, so
    ``tidings worker examples.bank.app:app`` works from a checkout.

    Raises:
        SystemExit: with a message saying what was wrong with ``spec``.
    """
    module_name, _, attribute = spec.partition(":")
    attribute = attribute or "app"
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise SystemExit(f"tidings: cannot import {module_name!r}: {exc}") from exc
    try:
        return getattr(module, attribute)
    except AttributeError:
        raise SystemExit(
            f"tidings: module {module_name!r} has no attribute {attribute!r} "
            "(give MODULE:ATTRIBUTE, e.g. examples.bank.app:app)"
        ) from None
