"""Records <-> bytes: Avro single-object envelopes, JSON envelopes and user payloads. Pure.

- ``encode``/``decode``/``decode_as``: Avro single-object encoding of the envelopes in
  ``tidings.core.records``, any shipped schema version readable (``avro``).
- ``decode_json``/``encode_json``: JSON envelopes for non-Avro producers (``json``).
- ``decode_record``: either, chosen by the ``content-type`` header (``content``).
- ``payload_of``/``load_payload``: user values <-> (type name, JSON bytes) (``payloads``).
- each other record family's Avro mapping, merged into ``avro``'s catalogue: ``orchestration``
  and ``workflow`` (which also reads JSON workflow inbox envelopes, ``inbox_from_json``).
"""

from tidings.codec.avro import CATALOGUE as CATALOGUE
from tidings.codec.avro import Record as Record
from tidings.codec.avro import decode as decode
from tidings.codec.avro import decode_as as decode_as
from tidings.codec.avro import encode as encode
from tidings.codec.content import content_type as content_type
from tidings.codec.content import decode_record as decode_record
from tidings.codec.json import CONTENT_TYPE as CONTENT_TYPE
from tidings.codec.json import decode_json as decode_json
from tidings.codec.json import encode_json as encode_json
from tidings.codec.payloads import JSON_TYPE as JSON_TYPE
from tidings.codec.payloads import TypeRegistry as TypeRegistry
from tidings.codec.payloads import load_payload as load_payload
from tidings.codec.payloads import payload_of as payload_of
from tidings.codec.payloads import type_name as type_name
from tidings.codec.payloads import type_registry as type_registry

__all__ = [
    "CATALOGUE",
    "CONTENT_TYPE",
    "JSON_TYPE",
    "Record",
    "TypeRegistry",
    "content_type",
    "decode",
    "decode_as",
    "decode_json",
    "decode_record",
    "encode",
    "encode_json",
    "load_payload",
    "payload_of",
    "type_name",
    "type_registry",
]
