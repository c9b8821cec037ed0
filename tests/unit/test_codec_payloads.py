"""User payloads <-> (type name, JSON bytes)."""

from __future__ import annotations

from typing import ClassVar

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel

from tidings.codec import JSON_TYPE, load_payload, payload_of, type_name, type_registry
from tidings.errors import DefinitionError, SchemaError


class Deposit(BaseModel):
    amount: int
    note: str = ""


class Withdrawn(BaseModel):
    __tidings_type__: ClassVar[str] = "bank.Withdrawn.v1"
    amount: int


REGISTRY = type_registry([Deposit, Withdrawn])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(), children, max_size=3),
    max_leaves=10,
)


def test_a_model_is_named_by_its_class_name() -> None:
    assert payload_of(Deposit(amount=5)) == ("Deposit", b'{"amount":5,"note":""}')


def test_an_explicit_tidings_type_wins_over_the_class_name() -> None:
    assert type_name(Withdrawn) == "bank.Withdrawn.v1"
    assert payload_of(Withdrawn(amount=1))[0] == "bank.Withdrawn.v1"


@pytest.mark.parametrize("value", [Deposit(amount=5, note="ü"), Withdrawn(amount=-3)])
def test_a_model_round_trips(value: BaseModel) -> None:
    assert load_payload(*payload_of(value), REGISTRY) == value


@given(json_values)
def test_a_plain_json_value_round_trips_under_the_json_type(value: object) -> None:
    name, data = payload_of(value)
    assert name == JSON_TYPE
    assert load_payload(name, data, REGISTRY) == value


def test_an_unknown_type_name_is_a_schema_error_listing_the_known_ones() -> None:
    with pytest.raises(SchemaError, match=r"unknown payload type 'Refund' \(known: Deposit, bank.Withdrawn.v1\)"):
        load_payload("Refund", b"{}", REGISTRY)


def test_an_invalid_payload_is_a_schema_error_caused_by_the_validation_error() -> None:
    with pytest.raises(SchemaError, match="invalid 'Deposit' payload") as raised:
        load_payload("Deposit", b'{"amount": "lots"}', REGISTRY)
    assert type(raised.value.__cause__).__name__ == "ValidationError"


def test_bytes_that_are_not_json_under_the_json_type_are_a_schema_error() -> None:
    with pytest.raises(SchemaError, match="not JSON"):
        load_payload(JSON_TYPE, b"{oops", REGISTRY)


def test_a_value_that_is_neither_model_nor_json_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="neither a pydantic model nor JSON-compatible"):
        payload_of(object())


def test_a_registry_lists_every_clash_at_once() -> None:
    class Other(BaseModel):
        __tidings_type__: ClassVar[str] = "Deposit"

    class Json(BaseModel):
        __tidings_type__: ClassVar[str] = "json"

    with pytest.raises(DefinitionError) as raised:
        type_registry([Deposit, Deposit, Other, Json])
    assert len(raised.value.reasons) == 2
