"""Inspect and stop the broker JVM by PID, without keeping a handle on it.

The CLI that started the broker has exited by the time ``tidings broker stop`` runs, so all we
have is a PID. Before signalling it we check /proc that it is still a Kafka JVM: PIDs are reused.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

_MAIN_CLASS = "kafka.Kafka"


def is_alive(pid: int) -> bool:
    """Return whether ``pid`` runs (a zombie, dead but not yet reaped, does not count; a
    process whose main thread has ended while others still run does).

    Args:
        pid: The process id.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    except OSError:
        return _signal_zero(pid)
    if _state(stat) not in ("Z", "X"):
        return True
    # A JVM whose main thread has returned shows that thread (the group leader, whose stat
    # this is) as a zombie while its other threads still run the shutdown and hold the
    # ports and the data directory: the process lives until the last of them ends.
    return any(_state(text) not in ("Z", "X") for text in _thread_stats(pid))


def _state(stat: str) -> str:
    # The state letter follows the parenthesised command name, which may itself contain ")".
    return stat.rsplit(")", 1)[-1].split()[0]


def _thread_stats(pid: int) -> list[str]:
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return []
    stats = []
    for task in tasks:
        try:
            stats.append((task / "stat").read_text())
        except OSError:
            continue  # the thread ended meanwhile
    return stats


def _signal_zero(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def is_kafka(pid: int) -> bool:
    """Return whether ``pid`` is a running Kafka server JVM.

    Args:
        pid: The process id.
    """
    if not is_alive(pid):
        return False
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return _MAIN_CLASS.encode() in argv


def terminate(
    pid: int,
    *,
    timeout: float = 30.0,
    reap: Callable[[], object] = lambda: None,
) -> bool:
    """Stop ``pid``: SIGTERM, wait up to ``timeout`` seconds, then SIGKILL.

    Args:
        pid: The process id.
        timeout: Seconds to wait for a clean shutdown (Kafka flushes and closes its logs).
        reap: Called while waiting, so a parent holding the child can collect its exit status.

    Returns:
        True if the process ended on SIGTERM, False if it had to be killed.
    """
    if not _send(pid, signal.SIGTERM):
        return True
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        reap()
        if not is_alive(pid):
            return True
        time.sleep(0.1)
    _send(pid, signal.SIGKILL)
    while is_alive(pid):
        reap()
        time.sleep(0.05)
    return False


def _send(pid: int, sig: signal.Signals) -> bool:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return False
    return True


def log_tail(path: Path, *, lines: int = 40) -> str:
    """Return the last ``lines`` lines of ``path``, or a note that it is empty or missing."""
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return f"({path} does not exist)"
    tail = text.splitlines()[-lines:]
    return "\n".join(tail) if tail else f"({path} is empty)"
