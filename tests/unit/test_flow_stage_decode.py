"""How the topic-to-topic flow reads its source's values: JSON, Avro single-object, Confluent framing.

Values are built as an outside producer builds them (``json``, fastavro alone); the
decoder is the one a worker's flow agent uses, so every reason here is a dead letter's.
"""

from __future__ import annotations

import json
import struct
from datetime import datetime, timezone
from io import BytesIO
from typing import Any

import pytest
from fastavro import parse_schema, schemaless_writer
from fastavro.schema import fingerprint, to_parsing_canonical_form
from pydantic import BaseModel, Field

from tidings import App, WorkflowContext
from tidings.errors import DecodeError, DefinitionError, SchemaError
from tidings.shell.kinds.flow.stage import SourceDecoder, SourceSchema

SCHEMA: dict[str, Any] = {
    "type": "record", "name": "Order", "namespace": "shop",
    "fields": [{"name": "id", "type": "string"}, {"name": "n", "type": "int"},
               {"name": "note", "type": "string", "default": ""}],
}
OTHER: dict[str, Any] = {**SCHEMA, "fields": [*SCHEMA["fields"], {"name": "extra", "type": "long"}]}


class Order(BaseModel):
    id: str
    n: int = Field(ge=0)
    note: str = ""


def body(fields: dict[str, Any], schema: dict[str, Any] = SCHEMA) -> bytes:
    out = BytesIO()
    schemaless_writer(out, parse_schema(schema, named_schemas={}), fields)
    return out.getvalue()


def single_object(fields: dict[str, Any], schema: dict[str, Any] = SCHEMA) -> bytes:
    mark = bytes.fromhex(fingerprint(to_parsing_canonical_form(schema), "CRC-64-AVRO"))
    return b"\xc3\x01" + mark + body(fields, schema)


def confluent(fields: dict[str, Any], schema_id: int = 42, schema: dict[str, Any] = SCHEMA) -> bytes:
    return b"\x00" + struct.pack(">I", schema_id) + body(fields, schema)


def app_with(schema: Any = SCHEMA) -> App:
    app = App("shop", partitions=3)

    @app.workflow("enrich")
    async def enrich(ctx: WorkflowContext, order: Order) -> int:
        return order.n

    app.workflow_flow("orders", "shop.orders", "enrich", lambda order: order.id, "shop.enriched", 8, 30,
                      source_schema=schema)
    return app


def decoder(schema: Any = SCHEMA) -> SourceDecoder:
    app = app_with(schema)
    (stage,) = [hosted for hosted in app.hosted if hosted.kind == "flow"]
    return SourceDecoder(app.workflow_handle("enrich").definition, stage.source_schema)  # type: ignore[attr-defined]


GOOD: dict[str, Any] = {"id": "o-1", "n": 17, "note": "hi"}


@pytest.mark.parametrize("value", [
    json.dumps(GOOD).encode(), b"\xef\xbb\xbf" + json.dumps(GOOD).encode(),
    single_object(GOOD), confluent(GOOD), confluent(GOOD, schema_id=0),
], ids=["json", "json-bom", "single-object", "confluent", "confluent-id-0"])
def test_json_and_both_avro_framings_give_the_same_input(value: bytes) -> None:
    assert decoder().element(value) == Order(**GOOD)


def test_the_schema_may_be_given_as_json_text() -> None:
    assert decoder(json.dumps(SCHEMA)).element(single_object(GOOD)) == Order(**GOOD)


@pytest.mark.parametrize(("value", "error", "reason"), [
    (None, DecodeError, "tombstone"),
    (b"", DecodeError, "not a JSON flow element"),
    (b"\xff\xfe\xfd", DecodeError, "not a JSON flow element"),
    (b'{"id": "o-1", "n": ', DecodeError, "not a JSON flow element"),
    (b"[1, 2]", SchemaError, "not an input of workflow 'enrich'"),
    (b'{"id": "o-1", "n": -1}', SchemaError, "greater than or equal to 0"),
    (single_object({**GOOD, "extra": 1}, OTHER), DecodeError, "(expected)"),
    (single_object(GOOD)[:-3], DecodeError, "single-object record does not decode"),
    (single_object(GOOD)[:7], DecodeError, "cut short"),
    (single_object(GOOD) + b"\x00\x00", DecodeError, "2 bytes left after the value"),
    (b"\x00\x00\x00\x00\x07" + b"\xff" * 12, DecodeError, "schema id 7, read with the flow's source_schema"),
    (b"\x00\x00\x01", DecodeError, "Confluent wire-format Avro record cut short"),
    (confluent({**GOOD, "extra": 1}, schema=OTHER), DecodeError, "bytes left after the value"),
    (confluent({**GOOD, "n": -5}), SchemaError, "greater than or equal to 0"),
])
def test_a_bad_value_raises_with_a_reason_naming_the_problem(value: bytes | None, error: type, reason: str) -> None:
    with pytest.raises(error) as raised:
        decoder().element(value)
    assert reason in str(raised.value)


def test_a_wrong_fingerprint_names_both() -> None:
    found = bytes.fromhex(fingerprint(to_parsing_canonical_form(OTHER), "CRC-64-AVRO")).hex()
    expected = bytes.fromhex(fingerprint(to_parsing_canonical_form(SCHEMA), "CRC-64-AVRO")).hex()
    with pytest.raises(DecodeError) as raised:
        decoder().element(single_object({**GOOD, "extra": 1}, OTHER))
    assert found in str(raised.value) and f"has fingerprint {expected}" in str(raised.value)


@pytest.mark.parametrize("value", [single_object(GOOD), confluent(GOOD)], ids=["single-object", "confluent"])
def test_without_a_schema_avro_is_refused_with_the_way_to_read_it(value: bytes) -> None:
    plain = App("shop", partitions=3)

    @plain.workflow("enrich")
    async def enrich(ctx: WorkflowContext, order: Order) -> int:
        return order.n

    stage = plain.workflow_flow("orders", "shop.orders", "enrich", lambda o: o.id, "shop.enriched", 8, 30)
    assert stage.source_schema is None
    with pytest.raises(DecodeError, match=r"pass app\.workflow_flow\(\.\.\., source_schema="):
        SourceDecoder(plain.workflow_handle("enrich").definition, None).element(value)
    # JSON still flows.
    assert SourceDecoder(plain.workflow_handle("enrich").definition, None).element(
        json.dumps(GOOD).encode()) == Order(**GOOD)


@pytest.mark.parametrize(("schema", "reason"), [
    ({"type": "record", "fields": []}, "not a valid Avro schema"),
    ({"type": "record", "name": "X", "fields": [{"name": "a", "type": "nope"}]}, "not a valid Avro schema"),
    ("{not json", "not JSON text of an Avro schema"),
    (42, "must be an Avro schema"),
])
def test_a_bad_schema_is_refused_at_declaration(schema: Any, reason: str) -> None:
    with pytest.raises(DefinitionError) as raised:
        app_with(schema)
    assert reason in str(raised.value)


def test_the_declared_fingerprint_is_the_single_object_one() -> None:
    schema = SourceSchema(SCHEMA)
    assert schema.fingerprint == single_object(GOOD)[2:10]


class Stamped(BaseModel):
    id: str
    at: datetime


def test_avro_logical_types_reach_the_input_type_as_python_values() -> None:
    schema = {"type": "record", "name": "Stamped", "fields": [
        {"name": "id", "type": "string"},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}}]}
    app = App("shop", partitions=3)

    @app.workflow("stamp")
    async def stamp(ctx: WorkflowContext, element: Stamped) -> str:
        return element.id

    stage = app.workflow_flow("stamps", "shop.stamps", "stamp", lambda s: s.id, "shop.stamped", 1, 30,
                              source_schema=schema)
    at = datetime(2026, 11, 15, 8, 0, tzinfo=timezone.utc)
    decoded = SourceDecoder(app.workflow_handle("stamp").definition, stage.source_schema).element(
        single_object({"id": "s-1", "at": at}, schema))
    assert decoded == Stamped(id="s-1", at=at)
