"""Avro binary readers compiled once per envelope schema: the decode hot path.

``fastavro.schemaless_reader`` walks the parsed schema on every call, through a file
object, one function call per value. The envelopes have fixed shapes known at import, so
``compile_reader`` turns one parsed schema into the straight-line Python function that
reads the body from the bytes themselves and returns the dict ``schemaless_reader``
returns for it (the writer's schema is the reader's: records written with an older schema
version still go through fastavro, which resolves them).

Every record is hostile (SPEC §11), so the reader refuses more than fastavro, never less:
whatever it reads, fastavro reads as the same dict and ends at the same byte
(``tests/unit/test_codec_readers.py`` checks it on valid records of every family and on
mutated and random bytes). What it refuses and fastavro takes is what no Avro writer
writes: a union branch index outside the union (fastavro takes ``-1`` as the last
branch) or written in more than one byte, a boolean byte other than 0 or 1 (fastavro
takes any other as true), a varint of more than 64 bits.
Arrays and maps may come in several blocks, with or without their byte sizes, as the
Avro specification lets any writer write them.

A failure raises ``EOFError``, ``IndexError``, ``ValueError``, ``UnicodeDecodeError`` or
``OverflowError``; ``codec.avro.decode`` turns each into ``DecodeError``. A schema with a
type this module does not compile (float, double, enum, fixed, named references,
logical types, unions other than null and one type, items that take no bytes) gives None,
and the caller keeps ``schemaless_reader``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from tidings.errors import SchemaError

Reader = Callable[[bytes, int], tuple[dict[str, Any], int]]
"""``read(data, pos)``: the record's fields from ``data[pos:]`` and the position after it."""

_LONG_BITS: Final = 64


def read_long(data: bytes, pos: int) -> tuple[int, int]:
    """Read the zig-zag varint at ``pos``; return its value and the position after it.

    Raises:
        IndexError: The bytes end inside the varint.
        OverflowError: It holds more than 64 bits.
    """
    byte = data[pos]
    pos += 1
    n = byte & 0x7F
    shift = 7
    while byte & 0x80:
        if shift >= _LONG_BITS:
            raise OverflowError("a varint longer than an Avro long")
        byte = data[pos]
        pos += 1
        n |= (byte & 0x7F) << shift
        shift += 7
    if n >> _LONG_BITS:
        raise OverflowError("a varint longer than an Avro long")
    return (n >> 1) ^ -(n & 1), pos


def read_size(data: bytes, pos: int, what: str) -> tuple[int, int]:
    """Read the length of a string, bytes value or map key at ``pos``, as ``read_long``.

    Raises:
        ValueError: The length is negative.
    """
    size, pos = read_long(data, pos)
    if size < 0:
        raise ValueError(f"a negative length of a {what}")
    return size, pos


def _unsupported(what: str) -> SchemaError:
    return SchemaError(f"no compiled reader for {what}")


class _Compiler:
    """Emits the source of one reader; one instance per schema."""

    def __init__(self) -> None:
        self._lines: list[str] = []
        self._names = 0

    def fresh(self, stem: str) -> str:
        self._names += 1
        return f"{stem}{self._names}"

    def emit(self, indent: int, line: str) -> None:
        self._lines.append("    " * indent + line)

    def source(self, top: str) -> str:
        return "\n".join(["def read(data, pos):", "    end = len(data)", *self._lines,
                          "    if pos > end:", "        raise EOFError('the bytes end inside the record')",
                          f"    return {top}, pos"])

    def long(self, target: str, indent: int) -> None:
        # One byte holds every value in -64..63 (lengths, counts, versions): no call for it.
        byte = self.fresh("b")
        self.emit(indent, f"{byte} = data[pos]")
        self.emit(indent, f"if {byte} < 128:")
        self.emit(indent + 1, f"{target} = ({byte} >> 1) ^ -({byte} & 1)")
        self.emit(indent + 1, "pos += 1")
        self.emit(indent, "else:")
        self.emit(indent + 1, f"{target}, pos = read_long(data, pos)")

    def sized(self, target: str, indent: int, *, text: bool, what: str) -> None:
        # A length below 64 is one even byte: one test tells it from a longer or negative one.
        byte, size = self.fresh("b"), self.fresh("n")
        self.emit(indent, f"{byte} = data[pos]")
        self.emit(indent, f"if {byte} & 0x81:")
        self.emit(indent + 1, f"{size}, pos = read_size(data, pos, {what!r})")
        self.emit(indent, "else:")
        self.emit(indent + 1, f"{size} = {byte} >> 1")
        self.emit(indent + 1, "pos += 1")
        # A slice past the end is short, not an error: the position then passes the end,
        # and the next byte read or the check before returning refuses the record.
        decode = ".decode()" if text else ""
        self.emit(indent, f"{target} = data[pos:pos + {size}]{decode}")
        self.emit(indent, f"pos += {size}")

    def record(self, schema: Mapping[str, Any], target: str, indent: int) -> None:
        if schema.get("type") != "record":
            raise _unsupported(str(schema.get("type")))
        if not schema["fields"]:
            raise _unsupported("a record without fields")
        values = []
        for field in schema["fields"]:
            value = self.fresh("v")
            self.value(field["type"], value, indent)
            values.append(f"{field['name']!r}: {value}")
        self.emit(indent, f"{target} = {{{', '.join(values)}}}")

    def value(self, schema: Any, target: str, indent: int) -> None:
        if isinstance(schema, list):
            self.union(schema, target, indent)
            return
        kind = schema if isinstance(schema, str) else schema.get("type")
        if isinstance(schema, dict) and "logicalType" in schema:
            raise _unsupported("logicalType")
        if kind == "string":
            self.sized(target, indent, text=True, what="string")
        elif kind == "bytes":
            self.sized(target, indent, text=False, what="bytes value")
        elif kind in ("long", "int"):
            # fastavro reads an int as it reads a long, without a 32-bit range check.
            self.long(target, indent)
        elif kind == "boolean":
            byte = self.fresh("b")
            self.emit(indent, f"{byte} = data[pos]")
            self.emit(indent, f"if {byte} > 1:")
            self.emit(indent + 1, f"raise ValueError(f'a boolean byte of {{{byte}}}')")
            self.emit(indent, f"{target} = {byte} == 1")
            self.emit(indent, "pos += 1")
        elif kind == "null":
            self.emit(indent, f"{target} = None")
        elif kind == "map":
            self.blocks(schema["values"], target, indent, pairs=True)
        elif kind == "array":
            self.blocks(schema["items"], target, indent, pairs=False)
        elif kind == "record":
            self.record(schema, target, indent)
        else:
            raise _unsupported(str(kind))

    def blocks(self, items: Any, target: str, indent: int, *, pairs: bool) -> None:
        if not pairs and _takes_no_bytes(items):
            raise _unsupported("array items that take no bytes")  # a count alone would be a loop
        count, item = self.fresh("c"), self.fresh("i")
        self.emit(indent, f"{target} = {{}}" if pairs else f"{target} = []")
        self.emit(indent, "while True:")
        self.long(count, indent + 1)
        self.emit(indent + 1, f"if {count} == 0:")
        self.emit(indent + 2, "break")
        self.emit(indent + 1, f"if {count} < 0:")
        # A block written with its size in bytes (for readers that skip it): read it anyway.
        self.emit(indent + 2, f"{count} = -{count}")
        self.emit(indent + 2, "_, pos = read_long(data, pos)")
        # Each item takes a byte at least: a count beyond the bytes left is refused at once,
        # not after a loop of that length.
        self.emit(indent + 1, f"if {count} > end - pos:")
        self.emit(indent + 2, "raise EOFError('a block counts more items than the bytes left hold')")
        self.emit(indent + 1, f"for _ in range({count}):")
        if pairs:
            key = self.fresh("k")
            self.sized(key, indent + 2, text=True, what="map key")
            self.value(items, item, indent + 2)
            self.emit(indent + 2, f"{target}[{key}] = {item}")
        else:
            self.value(items, item, indent + 2)
            self.emit(indent + 2, f"{target}.append({item})")

    def union(self, branches: list[Any], target: str, indent: int) -> None:
        if len(branches) != 2 or "null" not in branches or branches[0] == branches[1]:
            raise _unsupported("a union other than null and one type")
        null_index = branches.index("null")
        other = branches[1 - null_index]
        index = self.fresh("u")
        self.emit(indent, f"{index} = data[pos]")
        self.emit(indent, "pos += 1")
        self.emit(indent, f"if {index} == {null_index << 1}:")
        self.emit(indent + 1, f"{target} = None")
        self.emit(indent, f"elif {index} == {(1 - null_index) << 1}:")
        self.value(other, target, indent + 1)
        self.emit(indent, "else:")
        self.emit(indent + 1, f"raise ValueError(f'no branch {{{index}}} in a union of two')")


def _takes_no_bytes(schema: Any) -> bool:
    return schema == "null" or (isinstance(schema, dict) and schema.get("type") == "null")


def compile_reader(schema: Mapping[str, Any]) -> Reader | None:
    """Compile the reader of a parsed Avro record schema.

    Args:
        schema: A record schema as ``fastavro.parse_schema`` returns it (names are full).

    Returns:
        ``read(data, pos)``, or None when the schema has a type this module leaves to fastavro.
    """
    compiler = _Compiler()
    try:
        compiler.record(schema, "top", 1)
    except SchemaError:  # a type left to fastavro, from _unsupported
        return None
    namespace: dict[str, Any] = {"read_long": read_long, "read_size": read_size}
    exec(compile(compiler.source("top"), f"<avro reader {schema['name']}>", "exec"), namespace)  # noqa: S102
    return namespace["read"]  # type: ignore[no-any-return]
