"""User values <-> the JSON text the journal stores.

Every value a body receives goes through the journal's form, live and on replay alike:
a result is encoded, decoded as the declared type and only then given to the body, so a
live run and its replay see equal values and a result that cannot be read back fails at
once (NOT_RETRYABLE) instead of on the next restart.
"""

from __future__ import annotations

import json
from typing import Any

import pydantic_core
from pydantic import TypeAdapter

from tidings.core.limits import MAX_VALUE_BYTES

# MAX_VALUE_BYTES bounds the JSON text (UTF-8) of a step's or a body's result. Inputs and
# signal payloads from outside are held to the smaller MAX_PAYLOAD_BYTES first.


class ValueCodec:
    """Encodes values to JSON text and decodes them as a declared type.

    One codec belongs to one workflow definition; it caches a pydantic ``TypeAdapter`` per
    declared type because building one costs far more than using it.
    """

    __slots__ = ("_adapters",)

    def __init__(self) -> None:
        self._adapters: dict[Any, TypeAdapter[Any]] = {}

    def encode(self, value: Any) -> str:
        """Return ``value`` as JSON text.

        Raises:
            ValueError: ``value`` cannot be written as JSON.
        """
        if value is None or type(value) in (int, bool):
            return json.dumps(value)
        try:
            text = json.dumps(value) if type(value) is str else pydantic_core.to_json(value).decode()
        except pydantic_core.PydanticSerializationError as exc:
            raise ValueError(f"cannot store a value of type {type(value).__name__} as JSON: {exc}") from exc
        # Journaled as one Kafka record: a larger value would be refused by the broker at
        # every attempt (a crash loop); the step or the instance fails instead.
        if len(text) * 4 > MAX_VALUE_BYTES and (size := len(text.encode())) > MAX_VALUE_BYTES:
            raise ValueError(f"a value of {size:,} bytes of JSON is larger than the "
                             f"{MAX_VALUE_BYTES:,} a journal record may hold")
        return text

    def decode(self, text: str, declared: Any = None) -> Any:
        """Read JSON text back, as ``declared`` when given (a type or type expression).

        Raises:
            ValueError: The text is not JSON or does not validate as ``declared``.
        """
        if declared is None or declared is Any:
            return json.loads(text)
        adapter = self._adapters.get(declared)
        if adapter is None:
            adapter = self._adapters[declared] = TypeAdapter(declared)
        try:
            return adapter.validate_json(text)
        except pydantic_core.ValidationError as exc:
            raise ValueError(str(exc)) from exc

    def convert(self, value: Any, declared: Any = None) -> tuple[str, Any]:
        """Encode ``value`` and decode it back as ``declared``: ``(stored text, value for the body)``.

        Raises:
            ValueError: The value cannot be stored or read back.
        """
        text = self.encode(value)
        return text, self.decode(text, declared)
