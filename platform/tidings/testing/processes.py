"""Worker processes for tests: start ``tidings worker`` in a child, SIGKILL it, restart it.

Each worker runs in its own process group so that a kill reaches everything it started.
Output goes to a log file whose tail is shown when a test needs to know what happened.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path


class WorkerProcess:
    """One ``tidings worker MODULE:APP`` child process.

    Args:
        app_spec: ``MODULE:ATTRIBUTE`` of the App.
        bootstrap: Kafka bootstrap servers.
        data_dir: The worker's RocksDB directory.
        log_path: Where its output goes.
        env: Extra environment variables (e.g. which app id a test module builds).
        cwd: Working directory (the module must be importable from it).
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
    ) -> None:
        self.app_spec = app_spec
        self.bootstrap = bootstrap
        self.data_dir = data_dir
        self.log_path = log_path
        self.env = dict(env or {})
        self.cwd = cwd or Path.cwd()
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def start(self) -> WorkerProcess:
        """Start the worker (it joins the group on its own; commands wait for it)."""
        if self.running:
            raise RuntimeError(f"worker {self.pid} is already running")
        env = {**os.environ, **self.env, "TIDINGS_BOOTSTRAP": self.bootstrap}
        with open(self.log_path, "ab") as log:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "tidings.cli.main", "worker", self.app_spec,
                 "--data-dir", str(self.data_dir), "--loglevel", "INFO"],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=self.cwd,
                start_new_session=True,
            )
        return self

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

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

    def _signal(self, sig: signal.Signals) -> None:
        if self._process is None:
            return
        if self._process.poll() is None:
            try:
                os.killpg(self._process.pid, sig)
            except ProcessLookupError:
                pass
        self._process.wait(30)

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
