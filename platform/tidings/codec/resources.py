"""Locate the data directories tidings ships beside its code: ``schemas/`` and ``topics/``.

One source of truth: the ``.avsc`` files live only in the repository's ``schemas/`` and
the topic specifications only in ``topics/`` (SPEC §1). A wheel carries them as the data
packages ``tidings.schemas`` and ``tidings.topics`` (``pyproject.toml`` maps those package
names onto the two directories, so nothing is copied in the source tree). A source
checkout or an editable install, where those packages do not exist, reads the
directories next to ``platform/``.
"""

from __future__ import annotations

import importlib.util
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

# platform/tidings/codec/resources.py -> the repository root is three levels above tidings/.
_CHECKOUT_ROOT = Path(__file__).resolve().parents[3]


def shipped_data(name: str) -> Traversable:
    """Return the directory of shipped data called ``name`` (``"schemas"`` or ``"topics"``).

    Args:
        name: The directory's name in the repository, which is also the last part of
            its package name in a wheel (``tidings.<name>``).

    Returns:
        A traversable directory; iterate it or ``joinpath`` a file name and ``read_text``.

    Raises:
        FileNotFoundError: Neither the installed package nor the checkout directory exists.
    """
    package = f"tidings.{name}"
    try:
        spec = importlib.util.find_spec(package)
    except ModuleNotFoundError:
        spec = None
    if spec is not None:
        return resources.files(package)
    directory = _CHECKOUT_ROOT / name
    if directory.is_dir():
        return directory
    raise FileNotFoundError(
        f"tidings data {name!r} is missing: neither package {package!r} nor {directory} exists"
    )
