"""Worker processes for tests: start ``tidings worker`` in a child, SIGKILL it, restart it.

Each worker runs in its own process group so that a kill reaches everything it started.
Output goes to a log file whose tail is shown when a test needs to know what happened.

A worker never outlives the process that started it: on Linux the kernel SIGKILLs it when
that process dies, however it dies (``prctl(PR_SET_PDEATHSIG)``, even when the test run is
itself SIGKILLed); and at interpreter exit every worker still running is killed with its
process group. A leftover worker would otherwise keep its consumer group's partitions and
its RocksDB lock, and make the next run wait or fail.
"""

from __future__ import annotations

import atexit
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

from ..shell.runtime.children import die_with_parent

#: Every worker child started and not yet reaped, killed at interpreter exit.
_LIVE: set[subprocess.Popen[bytes]] = set()
_LIVE_LOCK = threading.Lock()


def _kill_live_workers() -> None:
    """SIGKILL every worker still running, with its process group, and reap it."""
    with _LIVE_LOCK:
        live = list(_LIVE)
        _LIVE.clear()
    for process in live:
        if process.poll() is None:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                pass


atexit.register(_kill_live_workers)


class WorkerProcess:
    """One ``tidings worker MODULE:APP`` child process.

    The child dies with the process that started it (see the module docstring). Note that
    on Linux the kernel's signal follows the *thread* that called ``start``: start workers
    from a thread that lives as long as they should (the test's own thread does).

    ``kill`` then ``start`` again on the same object restarts the worker as a crashed pod
    comes back. A restart is fast only with the same ``data_dir`` (its RocksDB state;
    another directory rebuilds everything from the journals) and the same
    ``TIDINGS_INSTANCE_ID`` in ``env`` (a static group member takes its partitions back at
    once; without one, the restarted worker is a new member, and the group waits for the
    session timeout, 6 s, to drop the dead one before it hands out its partitions). A new
    ``WorkerProcess`` for a restart needs both passed again.

    Args:
        app_spec: ``MODULE:ATTRIBUTE`` of the App.
        bootstrap: Kafka bootstrap servers.
        data_dir: The worker's RocksDB directory.
        log_path: Where its output goes (appended to; its directory is created if missing).
        env: Extra environment variables (e.g. which app id a test module builds).
        cwd: Working directory (the module must be importable from it).
        args: More ``tidings worker`` arguments (e.g. ``("--processes", "2")``).
    """

    def __init__(
        self,
        app_spec: str,
        *,
        bootstrap: str,
        data_dir: Path,
        log_path: Path,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        args: Sequence[str] = (),
    ) -> None:
        self.app_spec = app_spec
        self.bootstrap = bootstrap
        self.data_dir = data_dir
        self.log_path = log_path
        self.env = dict(env or {})
        self.cwd = cwd or Path.cwd()
        self.args = tuple(args)
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def start(self) -> WorkerProcess:
        """Start the worker (it joins the group on its own; commands wait for it)."""
        if self.running:
            raise RuntimeError(f"worker {self.pid} is already running")
        env = {**os.environ, **self.env, "TIDINGS_BOOTSTRAP": self.bootstrap}
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "tidings.cli.main", "worker", self.app_spec,
                 "--data-dir", str(self.data_dir), "--loglevel", "INFO", *self.args],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=self.cwd,
                start_new_session=True,
                preexec_fn=die_with_parent(),
            )
        with _LIVE_LOCK:
            _LIVE.add(self._process)
        return self

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def wait(self, timeout: float) -> int | None:
        """Wait up to ``timeout`` seconds for the worker to exit; return its exit status.

        None when it is still running (or was never started). A worker that exits on its
        own (status 70: Kafka or RocksDB failed, or it was fenced) is reaped here.
        """
        if self._process is None:
            return None
        try:
            code = self._process.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        self._forget()
        return code

    def kill(self) -> None:
        """SIGKILL the worker's whole process group, as a crash would, and reap it."""
        self._signal(signal.SIGKILL)

    def stop(self, timeout: float = 20.0) -> None:
        """Stop the worker cleanly (SIGTERM), or kill it if it does not stop in time."""
        if not self.running:
            return
        assert self._process is not None
        os.killpg(self._process.pid, signal.SIGTERM)
        try:
            self._process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
        self._forget()

    def _signal(self, sig: signal.Signals) -> None:
        if self._process is None:
            return
        if self._process.poll() is None:
            try:
                os.killpg(self._process.pid, sig)
            except ProcessLookupError:
                pass
        self._process.wait(30)
        self._forget()

    def _forget(self) -> None:
        with _LIVE_LOCK:
            _LIVE.discard(self._process)  # type: ignore[arg-type]

    def log_tail(self, lines: int = 60) -> str:
        """Return the last lines of the worker's output."""
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"

    def __enter__(self) -> WorkerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.kill()
