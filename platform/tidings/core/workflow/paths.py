"""Step paths: where a step sits in a body, independent of timing.

Top-level steps are numbered ``1, 2, 3 ...`` in the order the body reaches them. Branch ``b``
of the parallel step at path ``p`` numbers its own steps ``p.b.1, p.b.2 ...``. A path is a
plain string so that it can be a journal field, part of a Kafka key and part of an
idempotency key without conversion.
"""

from __future__ import annotations

ROOT_PREFIX = ""
"""The prefix of the body's own (top-level) steps."""


def step_path(prefix: str, number: int) -> str:
    """Return the path of step ``number`` (1-based) of the branch with ``prefix``."""
    return f"{prefix}{number}"


def branch_prefix(group_path: str, branch: int) -> str:
    """Return the prefix of branch ``branch`` (1-based) of the parallel step at ``group_path``."""
    return f"{group_path}.{branch}."


def split_path(path: str) -> tuple[str, int]:
    """Split a path into its branch prefix and its step number.

    >>> split_path("3.2.7")
    ('3.2.', 7)
    """
    prefix, _, number = path.rpartition(".")
    return (f"{prefix}." if prefix else ROOT_PREFIX), int(number)


def idempotency_key(workflow: str, instance_id: str, path: str) -> str:
    """Return the key every attempt of one step carries: ``{workflow}/{instance_id}/{path}``."""
    return f"{workflow}/{instance_id}/{path}"


def child_id(parent_id: str, path: str) -> str:
    """Return the id of the child started at ``path``: ``{parent_id}:{path}``."""
    return f"{parent_id}:{path}"
