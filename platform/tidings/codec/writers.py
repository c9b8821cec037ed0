"""Avro binary writers compiled once per envelope schema: the encode hot path.

``fastavro.schemaless_writer`` walks the parsed schema on every call: a dict lookup per
field for its type, a validation pass over each candidate of every union to choose the
branch, and a dict per record built by the caller first. The envelopes have fixed shapes
known at import, so ``compile_writer`` turns one parsed schema into the straight-line
Python function that writes exactly what ``schemaless_writer`` writes: the field values
read in schema order, each written by its type, unions of ``null`` and one type chosen by
``is None`` plus the same type check fastavro's union validation makes.

A writer reads a record's values where the record keeps them, so no dict is built for it:
``ATTRIBUTES`` reads ``record.name`` (slotted dataclasses whose slots are the Avro field
names), ``ITEMS`` reads ``record.get(name, default)`` (the dict fastavro would be given),
``TO_JSON`` calls ``record.to_json()`` first and reads the items of the dict it returns
(``StepError``). Each named record of a schema gets its mode from the caller.

Byte identity with ``schemaless_writer`` is the contract (``tests/unit/test_codec_writers.py``
checks it on random records of every family). A value of a wrong type raises ``TypeError``,
``ValueError``, ``AttributeError`` or ``OverflowError``, as fastavro does (which one may
differ), and ``codec.avro.encode`` turns each into ``SchemaError``. A schema with a type this
module does not compile (float, double, enum, fixed, named references, logical types,
unions of two non-null types) gives None, and the caller keeps ``schemaless_writer``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from tidings.errors import SchemaError

ATTRIBUTES: Final = "attributes"
ITEMS: Final = "items"
TO_JSON: Final = "to_json"

Writer = Callable[[Any, bytearray], None]
"""Appends the Avro binary body of one record to the bytearray."""

_LONG_MIN: Final = -(2**63)
_LONG_MAX: Final = 2**63 - 1
_INT_MIN: Final = -(2**31)
_INT_MAX: Final = 2**31 - 1
_PRIMITIVES: Final = frozenset({"string", "bytes", "long", "int", "boolean", "null"})


def _unsupported(what: str) -> SchemaError:
    return SchemaError(f"no compiled writer for {what}")


def write_long(out: bytearray, n: Any) -> None:
    """Append ``n`` as a zig-zag varint (Avro ``long`` and ``int``), as fastavro does.

    Like fastavro's Cython conversion to a C long, a value that is no int but has
    ``__int__`` (a float, a Decimal) is truncated by it; anything else is refused.

    Raises:
        TypeError: ``n`` is no int and has no ``__int__``.
        OverflowError: ``n`` does not fit 64 bits.
    """
    if not isinstance(n, int):
        as_int = getattr(type(n), "__int__", None)
        if as_int is None:
            raise TypeError("an integer is required")
        n = as_int(n)
    if -64 <= n < 64:
        # The common small values (lengths, counts, versions) in one byte.
        out.append((n << 1) ^ (n >> 63))
        return
    if n < _LONG_MIN or n > _LONG_MAX:
        raise OverflowError(f"{n} does not fit an Avro long")
    z = (n << 1) ^ (n >> 63)
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)


def write_string(out: bytearray, text: Any) -> None:
    """Append ``text`` as an Avro string: its UTF-8 length, then the bytes."""
    if not isinstance(text, str):
        raise TypeError("must be string")
    data = text.encode()
    size = len(data)
    if size < 64:
        out.append(size << 1)
    else:
        write_long(out, size)
    out += data


def write_bytes(out: bytearray, data: Any) -> None:
    """Append ``data`` as Avro bytes: its length, then the bytes.

    Any buffer of single bytes is written (a memoryview too), as fastavro's typed
    memoryview argument takes it; anything else is a ``TypeError`` or ``ValueError``.
    """
    if not isinstance(data, (bytes, bytearray)):
        view = memoryview(data)
        if view.itemsize != 1:
            raise ValueError("Buffer dtype mismatch, expected 'const unsigned char'")
        data = view.tobytes()
    size = len(data)
    if size < 64:
        out.append(size << 1)
    else:
        write_long(out, size)
    out += data


def _union_check(kind: str, value: Any) -> bool:
    """fastavro's union validation of the non-null branch, for values that are not None."""
    if kind == "string":
        return isinstance(value, str)
    if kind == "bytes":
        return isinstance(value, (bytes, bytearray))
    # A bool is no long nor int to fastavro's union validation (it is to a plain field).
    if kind == "long":
        return isinstance(value, int) and not isinstance(value, bool) and _LONG_MIN <= value <= _LONG_MAX
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool) and _INT_MIN <= value <= _INT_MAX
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "map":
        return isinstance(value, Mapping)
    if kind == "array":
        return isinstance(value, (list, tuple))
    raise _unsupported(kind)


def _no_branch(value: Any, schema: Any) -> ValueError:
    return ValueError(f"{value!r} (type {type(value)}) do not match {schema}")


class _Compiler:
    """Emits the source of one writer; one instance per schema."""

    def __init__(self, modes: Mapping[str, str]) -> None:
        self._modes = modes
        self._lines: list[str] = []
        self._names = 0
        self.constants: dict[str, Any] = {}

    def fresh(self, stem: str) -> str:
        self._names += 1
        return f"{stem}{self._names}"

    def constant(self, value: Any) -> str:
        name = self.fresh("_c")
        self.constants[name] = value
        return name

    def emit(self, indent: int, line: str) -> None:
        self._lines.append("    " * indent + line)

    def source(self) -> str:
        return "\n".join(["def write(record, out):", *self._lines, "    return None"])

    def top(self, schema: Mapping[str, Any], sources: Mapping[str, str | None], indent: int) -> None:
        """The top record's fields, each read by its own expression; None: always null."""
        nulls = bytearray()  # the null indexes of absent fields in a row, written at once
        for field in schema["fields"]:
            name = field["name"]
            if name not in sources:
                raise _unsupported(f"no source for field {name}")
            expression = sources[name]
            if expression is None:
                branches = field["type"]
                if not isinstance(branches, list) or "null" not in branches:
                    raise _unsupported(f"an absent field {name} that is not nullable")
                nulls.append(branches.index("null") << 1)  # a null is its branch index alone
                continue
            if nulls:
                self.emit(indent, f"out += {bytes(nulls)!r}")
                nulls.clear()
            value = self.fresh("v")
            self.emit(indent, f"{value} = {expression}")
            self.value(field["type"], value, indent)
        if nulls:
            self.emit(indent, f"out += {bytes(nulls)!r}")

    def record(self, schema: Mapping[str, Any], source: str, indent: int, mode: str) -> None:
        if mode == TO_JSON:
            converted = self.fresh("j")
            self.emit(indent, f"{converted} = {source}.to_json()")
            source, mode = converted, ITEMS
        for field in schema["fields"]:
            value = self.fresh("v")
            name = field["name"]
            if mode == ATTRIBUTES:
                self.emit(indent, f"{value} = {source}.{name}")
            elif mode == ITEMS:
                # fastavro writes ``datum.get(name, default)``: a missing field takes its
                # default, or None (a nullable field takes it, any other refuses it).
                default = self.constant(field.get("default"))
                self.emit(indent, f"{value} = {source}.get({name!r}, {default})")
            else:
                raise _unsupported(f"mode {mode!r}")
            self.value(field["type"], value, indent)

    def value(self, schema: Any, source: str, indent: int) -> None:
        if isinstance(schema, list):
            self.union(schema, source, indent)
            return
        kind = schema if isinstance(schema, str) else schema.get("type")
        if isinstance(schema, dict) and ("logicalType" in schema or kind in _PRIMITIVES):
            if "logicalType" in schema:
                raise _unsupported("logicalType")
            schema = kind
        if kind == "string":
            self.emit(indent, f"write_string(out, {source})")
        elif kind == "bytes":
            self.emit(indent, f"write_bytes(out, {source})")
        elif kind in ("long", "int"):
            # fastavro writes an int field as a long, without a 32-bit range check.
            self.emit(indent, f"write_long(out, {source})")
        elif kind == "boolean":
            self.emit(indent, f"out.append(1 if {source} else 0)")
        elif kind == "null":
            pass
        elif kind == "map":
            self.sequence(schema["values"], source, indent, pairs=True)
        elif kind == "array":
            self.sequence(schema["items"], source, indent, pairs=False)
        elif kind == "record":
            self.record(schema, source, indent, self._mode(schema))
        else:
            raise _unsupported(str(kind))

    def _mode(self, schema: Mapping[str, Any]) -> str:
        mode = self._modes.get(schema["name"])
        if mode is None:
            raise _unsupported(f"no mode for record {schema['name']}")
        return mode

    def sequence(self, items: Any, source: str, indent: int, *, pairs: bool) -> None:
        # fastavro writes one block of every item, then the empty block; nothing for none.
        self.emit(indent, f"if len({source}) > 0:")
        self.emit(indent + 1, f"write_long(out, len({source}))")
        item = self.fresh("i")
        if pairs:
            key = self.fresh("k")
            self.emit(indent + 1, f"for {key}, {item} in {source}.items():")
            self.emit(indent + 2, f"write_string(out, {key})")
        else:
            self.emit(indent + 1, f"for {item} in {source}:")
        self.value(items, item, indent + 2)
        self.emit(indent, "out.append(0)")

    def union(self, branches: list[Any], source: str, indent: int) -> None:
        if len(branches) != 2 or "null" not in branches or branches[0] == branches[1]:
            raise _unsupported("a union other than null and one type")
        null_index = branches.index("null")
        other = branches[1 - null_index]
        other_kind = other if isinstance(other, str) else other.get("type")
        if isinstance(other, dict) and "logicalType" in other:
            raise _unsupported("logicalType")
        self.emit(indent, f"if {source} is None:")
        self.emit(indent + 1, f"out.append({null_index << 1})")
        self.emit(indent, "else:")
        if other_kind == "record" and self._mode(other) == TO_JSON:
            # Checked after the conversion, as fastavro checks the dict it is given.
            converted = self.fresh("j")
            self.emit(indent + 1, f"{converted} = {source}.to_json()")
            self.emit(indent + 1, f"out.append({(1 - null_index) << 1})")
            self.record(other, converted, indent + 1, ITEMS)
            return
        if other_kind != "record":
            _union_check(other_kind, None)  # refuses the kinds it cannot check
            check = self.constant(_union_check)
            schema = self.constant(branches)
            self.emit(indent + 1, f"if not {check}({other_kind!r}, {source}):")
            self.emit(indent + 2, f"raise _no_branch({source}, {schema})")
        self.emit(indent + 1, f"out.append({(1 - null_index) << 1})")
        self.value(other, source, indent + 1)


def compile_writer(schema: Mapping[str, Any], modes: Mapping[str, str],
                   sources: Mapping[str, str | None] | None = None) -> Writer | None:
    """Compile the writer of a parsed Avro record schema.

    Args:
        schema: A record schema as ``fastavro.parse_schema`` returns it (names are full).
        modes: How to read each record of the schema by its full name, the top record
            included: ``ATTRIBUTES``, ``ITEMS`` or ``TO_JSON``.
        sources: Instead of the top record's mode, a Python expression per top field that
            reads its value from ``record`` (``"record.record.seq"``, ``"'Ended'"``), or
            None for a nullable field that is always null (the journal's flat record, one
            writer per journal record type).

    Returns:
        ``write(record, out)``, or None when the schema has a type this module leaves to
        fastavro (or a record without a mode, a field without a source).
    """
    compiler = _Compiler(modes)
    try:
        if sources is None:
            compiler.record(schema, "record", 1, compiler._mode(schema))
        else:
            compiler.top(schema, sources, 1)
    except SchemaError:  # a type left to fastavro, from _unsupported
        return None
    namespace: dict[str, Any] = {
        "write_long": write_long,
        "write_string": write_string,
        "write_bytes": write_bytes,
        "_no_branch": _no_branch,
        **compiler.constants,
    }
    exec(compile(compiler.source(), f"<avro writer {schema['name']}>", "exec"), namespace)  # noqa: S102
    return namespace["write"]  # type: ignore[no-any-return]
