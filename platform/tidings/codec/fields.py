"""A record's fields as the dict fastavro writes, and records built back from such a dict.

The envelopes are slotted dataclasses whose field names are the Avro field names, so the
dict is derived from ``__slots__`` rather than spelled out per record type.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

T = TypeVar("T")


def plain_fields(record: Any) -> dict[str, Any]:
    """Return ``{field name: value}`` of a slotted dataclass record."""
    return {name: getattr(record, name) for name in record.__slots__}


def slotted_builder(cls: type[T]) -> Callable[[Mapping[str, Any]], T]:
    """Return a function that builds ``cls`` from a dict holding exactly its fields.

    For the records a decoder reads: the reader schema's fields are the record's slots,
    so the dict has every field and no other, and ``cls(**fields)`` could not fail. A
    frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``; this
    sets the slots through their descriptors, about three times faster, with the same
    result (the records have no ``__post_init__``; a class with one is refused).

    Raises:
        TypeError: ``cls`` has a ``__post_init__`` or no ``__slots__``.
    """
    if hasattr(cls, "__post_init__") or not hasattr(cls, "__slots__"):
        raise TypeError(f"{cls.__name__} is no plain slotted record")
    slots: tuple[str, ...] = tuple(cls.__slots__)  # type: ignore[attr-defined]
    namespace: dict[str, Any] = {"new": object.__new__, "cls": cls}
    lines = ["def build(fields):", "    record = new(cls)"]
    for index, name in enumerate(slots):
        namespace[f"set{index}"] = getattr(cls, name).__set__
        lines.append(f"    set{index}(record, fields[{name!r}])")
    lines.append("    return record")
    exec(compile("\n".join(lines), f"<builder {cls.__name__}>", "exec"), namespace)  # noqa: S102
    return namespace["build"]  # type: ignore[no-any-return]
