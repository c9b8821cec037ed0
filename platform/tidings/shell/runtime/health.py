"""The worker's HTTP port: ``/metrics``, ``/livez`` and ``/readyz``; every other path is 404.

A stdlib ``http.server`` in a daemon thread, as prometheus_client's own ``start_http_server``
is, so a wedged event loop still answers (and ``/livez`` can say so):

- ``/metrics``: the worker's registry in the format the scraper asks for (``Accept``);
- ``/livez``: the worker is alive and not deaf (``Liveness.verdict``): 200, or 503 with the
  reason. A broker outage alone does not fail it;
- ``/readyz``: the worker is a member of its group and every assigned partition's recovery
  is done (``Readiness.verdict``): 200, or 503 with the reason.

The probes answer one line of text, or JSON (``{"ok", "reason", "details"}``) when the
request's ``Accept`` names ``application/json``. ``GET`` and ``HEAD`` only (405 otherwise).

Every request is hostile: a request line is at most ``MAX_TARGET`` bytes (414 beyond), the
standard library already refuses over-long or too many headers (431) and malformed request
lines (400), each connection has ``TIMEOUT_S`` to send its request, at most
``MAX_CONNECTIONS`` are served at once (more are closed unanswered), one request per
connection (HTTP/1.0), and nothing a request sends is logged beyond a bounded ``repr``.
docs/operations.md, "Health".
"""

from __future__ import annotations

import json
import logging
import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from .readiness import Verdict

log = logging.getLogger(__name__)

#: Bytes of a request target (path and query) served; longer ones get 414.
MAX_TARGET = 2048
#: Seconds a connection has to send its request (a slow client holds a thread no longer).
TIMEOUT_S = 10.0
#: Requests served at once; a connection beyond them is closed at once.
MAX_CONNECTIONS = 16
ALLOWED = "GET, HEAD"
TEXT = "text/plain; charset=utf-8"


class HealthServer:
    """Serves the worker's port from a daemon thread until ``close``.

    Args:
        registry: What ``/metrics`` shows.
        live: What ``/livez`` answers (called from the server's threads).
        ready: What ``/readyz`` answers (likewise).
        port: The port (0: any free one, see ``port``).
        host: The address to bind.

    Raises:
        OSError: The port is taken.
    """

    def __init__(self, registry: CollectorRegistry, *, live: Callable[[], Verdict],
                 ready: Callable[[], Verdict], port: int, host: str = "0.0.0.0") -> None:
        handler = type("Handler", (_Handler,), {
            "registry": registry, "probes": {"/livez": live, "/readyz": ready}})
        self._server = _Server((host, port), handler)
        # A short poll: close() (the worker's stop) waits for it.
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.1,),
                                        name="tidings-http", daemon=True)
        self._thread.start()
        log.info("serving /metrics, /livez and /readyz on http://%s:%d", host, self.port)

    @property
    def port(self) -> int:
        """The port it listens on (the one chosen when asked for port 0)."""
        return int(self._server.server_address[1])

    def close(self) -> None:
        """Stop serving and close the socket."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]) -> None:
        # Bounds the threads a flood of connections can make: beyond it, close at once.
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that went away mid-answer, a reset: nothing to do, and no traceback on stderr.
        log.debug("HTTP request from %s failed", client_address, exc_info=True)


class _Handler(BaseHTTPRequestHandler):
    registry: CollectorRegistry
    probes: dict[str, Callable[[], Verdict]]
    timeout = TIMEOUT_S
    protocol_version = "HTTP/1.0"
    server_version = "tidings"
    sys_version = ""

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self._answer(body=True)

    def do_HEAD(self) -> None:  # noqa: N802
        self._answer(body=False)

    def __getattr__(self, name: str) -> Any:
        # http.server looks up do_<METHOD> and answers 501 when it is missing: any method
        # but GET and HEAD is one this port knows and refuses (405), whatever it is called.
        if name.startswith("do_"):
            return self._not_allowed
        raise AttributeError(name)

    def _not_allowed(self) -> None:
        self._send(405, TEXT, b"method not allowed: GET or HEAD\n",
                   body=self.command != "HEAD", extra={"Allow": ALLOWED})

    def _answer(self, *, body: bool) -> None:
        if len(self.path) > MAX_TARGET:
            answer = 414, TEXT, b"request target too long\n"
        else:
            path = self.path.split("?", 1)[0]
            try:
                answer = self._route(path)
            except Exception:  # noqa: BLE001 - a failing collector or probe is a 500, never a dead thread
                log.exception("answering %r failed", path[:100])
                answer = 500, TEXT, b"internal error\n"
        self._send(*answer, body=body)

    def _route(self, path: str) -> tuple[int, str, bytes]:
        if path == "/metrics":
            encoder, content_type = choose_encoder(self._accept())
            return 200, content_type, encoder(self.registry)
        probe = self.probes.get(path)
        if probe is None:
            return 404, TEXT, b"not found: this port serves /metrics, /livez and /readyz\n"
        verdict = probe()
        status = 200 if verdict.ok else 503
        if "application/json" in self._accept():
            text = json.dumps({"ok": verdict.ok, "reason": verdict.reason, "details": verdict.details},
                              default=str, sort_keys=True)
            return status, "application/json", (text + "\n").encode()
        return status, TEXT, (verdict.reason + "\n").encode()

    def _accept(self) -> str:
        return str(self.headers.get("Accept", ""))[:1024]

    def _send(self, status: int, content_type: str, payload: bytes, *, body: bool,
              extra: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        self.send_header("Cache-Control", "no-store")
        for name, value in (extra or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if body:
            self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's name
        # Probes come every few seconds: debug only, and bounded (the request line is the client's).
        log.debug("HTTP %s", repr(format % args)[:300])
