"""Fixtures and helpers for the console's tests: the console App, its workers, a console
process (``tidings console``) and an HTTP client that sends any header a hostile one would."""

from __future__ import annotations

import http.client
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tidings import App

from .integration.console_apps import build
from .workers import ROOT, Workers, applied

APP_SPEC = "tests.integration.console_apps:app"


@pytest.fixture
def console_state(tmp_path: Path) -> Path:
    """The directory of the ledger's ``closed`` switch, shared by the test and its workers."""
    state = tmp_path / "console-state"
    state.mkdir()
    return state


@pytest.fixture
def console_app(kafka_bootstrap: str, app_id: str, console_state: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[App]:
    """The console test App named for this test, its topics applied; handles use the broker."""
    monkeypatch.setenv("TIDINGS_BOOTSTRAP", kafka_bootstrap)
    yield from applied(kafka_bootstrap, build(app_id, console_state))


@pytest.fixture
def console_workers(kafka_bootstrap: str, app_id: str, tmp_path: Path, console_state: Path) -> Iterator[Workers]:
    started = Workers(kafka_bootstrap, app_id, tmp_path, app_spec=APP_SPEC, env={"CONSOLE_STATE_DIR": str(console_state)})
    yield started
    started.kill_all()


class Answer:
    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body

    def json(self) -> Any:
        return json.loads(self.body)

    def __repr__(self) -> str:
        return f"<{self.status} {self.body[:300]!r}>"


class ConsoleProcess:
    """``tidings console`` as a child process on a free port; stopped (SIGTERM, then SIGKILL) by ``stop``."""

    def __init__(self, bootstrap: str, app_id: str, state_dir: Path, *args: str, env: dict[str, str] | None = None,
                 app_spec: str = APP_SPEC) -> None:
        self.args = args
        environment = {**os.environ, "TIDINGS_BOOTSTRAP": bootstrap, "TEST_APP_ID": app_id,
                       "CONSOLE_STATE_DIR": str(state_dir), **(env or {})}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tidings.cli.main", "console", app_spec, "--port", "0", *args],
            cwd=ROOT, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        self.port = self._port()
        self.csrf = ""

    def _port(self) -> int:
        assert self.process.stdout is not None
        deadline = time.monotonic() + 60
        line = b""
        while time.monotonic() < deadline and not line.endswith(b"\n"):
            ready, _, _ = select.select([self.process.stdout], [], [], 1)
            if ready:
                chunk = os.read(self.process.stdout.fileno(), 1)
                if not chunk:
                    break
                line += chunk
        if b"http://" not in line:
            self.stop()
            raise AssertionError(f"the console did not start: {line!r} {self.stderr()}")
        return int(line.split(b"http://", 1)[1].split(b"/", 1)[0].rsplit(b":", 1)[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def request(self, method: str, path: str, body: Any = None, *, headers: dict[str, str] | None = None,
                raw: bytes | None = None, csrf: bool = True, timeout: float = 60) -> Answer:
        """One request as the page makes it (Origin, CSRF token, JSON), ``headers`` overriding any."""
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        sent: dict[str, str] = {"Host": f"127.0.0.1:{self.port}"}
        data = raw
        if method == "POST":
            sent.update({"Origin": self.url, "Content-Type": "application/json"})
            if csrf:
                sent["X-CSRF-Token"] = self.csrf
            if data is None:
                data = json.dumps(body if body is not None else {}).encode()
        sent.update(headers or {})
        try:
            connection.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
            for name, value in sent.items():
                connection.putheader(name, value)
            if data is not None and "Content-Length" not in sent:
                connection.putheader("Content-Length", str(len(data)))
            connection.endheaders(data)
            response = connection.getresponse()
            return Answer(response.status, {k.lower(): v for k, v in response.getheaders()}, response.read())
        finally:
            connection.close()

    def get(self, path: str, **kwargs: Any) -> Answer:
        return self.request("GET", path, **kwargs)

    def post(self, path: str, body: Any = None, **kwargs: Any) -> Answer:
        return self.request("POST", path, body, **kwargs)

    def session(self) -> dict[str, Any]:
        answer = self.get("/api/session")
        assert answer.status == 200, answer
        data: dict[str, Any] = answer.json()
        self.csrf = data["csrf"]
        return data

    def stderr(self) -> str:
        return ""

    def stop(self) -> str:
        """Stop it; return what it wrote on stderr."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(10)
        assert self.process.stderr is not None
        return self.process.stderr.read().decode("utf-8", "replace")


@pytest.fixture
def consoles(kafka_bootstrap: str, app_id: str, console_state: Path) -> Iterator[Any]:
    """Start consoles with ``consoles(*args)``; each is stopped when the test ends."""
    started: list[ConsoleProcess] = []

    def start(*args: str, env: dict[str, str] | None = None) -> ConsoleProcess:
        console = ConsoleProcess(kafka_bootstrap, app_id, console_state, *args, env=env)
        started.append(console)
        return console

    yield start
    for console in started:
        console.stop()
