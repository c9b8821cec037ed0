"""The group ids of consumers that never join their group (assign-only readers).

librdkafka needs a ``group.id`` even for a consumer that only ``assign``s partitions at
explicit offsets and never commits; such a group has no members and stores no offsets. Its
id still matters on a cluster with an authorizer: a client's readers take ids under
``{app}.client.`` so one prefixed Group ACL covers every one of them (``acls.py``), where
today's random ``tidings-*`` ids would need a Group ACL on every group.
"""

from __future__ import annotations

import uuid
from typing import Final

#: The prefix of a reader that belongs to no app (a test kit reader, the bench).
DEFAULT_PREFIX: Final = "tidings-"


def reader_group(prefix: str, role: str) -> str:
    """A fresh group id ``{prefix}{role}-{uuid}`` for one assign-only reader."""
    return f"{prefix}{role}-{uuid.uuid4().hex}"
