"""The state file that lets ``tidings broker start|stop|status`` work across invocations."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from tidings.errors import BrokerError


@dataclass(frozen=True)
class BrokerState:
    """What a started local broker leaves behind.

    Attributes:
        pid: The JVM's process id (also its process group id).
        bootstrap: ``host:port`` of the PLAINTEXT (or, secured, the SASL_SSL) listener.
        data_dir: The broker's data directory (logs, config, Kafka log dirs).
        secure: A secured node (``bootstrap`` is its SASL_SSL listener).
    """

    pid: int
    bootstrap: str
    data_dir: str
    secure: bool = False


def default_state_file(cwd: Path | None = None) -> Path:
    """Return ``.tidings/broker.json`` under ``cwd`` (the current directory by default)."""
    return (cwd or Path.cwd()) / ".tidings" / "broker.json"


def read_state(path: Path) -> BrokerState | None:
    """Read the state file.

    Args:
        path: The state file.

    Returns:
        The state, or None when the file does not exist.

    Raises:
        BrokerError: The file exists but is not a state file.
    """
    try:
        raw = json.loads(path.read_text())
        return BrokerState(
            pid=int(raw["pid"]), bootstrap=str(raw["bootstrap"]), data_dir=str(raw["data_dir"]),
            secure=raw.get("secure") is True,
        )
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError) as exc:
        raise BrokerError(f"{path} is not a tidings broker state file; remove it") from exc


def write_state(path: Path, state: BrokerState) -> None:
    """Write the state file atomically (a reader never sees half a file).

    Args:
        path: The state file; its directory is created.
        state: The state to record.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = path.with_name(f".{path.name}.{os.getpid()}")
    scratch.write_text(json.dumps(asdict(state), indent=2) + "\n")
    scratch.replace(path)


def remove_state(path: Path) -> None:
    """Remove the state file if it exists."""
    path.unlink(missing_ok=True)
