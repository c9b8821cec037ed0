"""The console's HTTP server: the page's static files and the JSON API, stdlib only.

``ThreadingHTTPServer`` answers each request on a thread of its own; every request passes
the ``Guard`` (``security.py``) before anything is read, and a POST's body is bounded before
it is read (413 past ``MAX_BODY``) and parsed with the JSON limits of ``core/limits.py``.
Every answer carries headers that keep the page from being framed or sniffed and the API
from being cached. Request lines are logged without their query (a ``/login?token=`` must
not land in a log).
"""

from __future__ import annotations

import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any, Final
from urllib.parse import parse_qs, unquote, urlsplit

from ..core.limits import MAX_PAYLOAD_BYTES, check_json_text
from ..errors import BrokerError, ConsoleRefusal, LimitError
from .api import Answer, ConsoleApi
from .security import COOKIE, Guard, Refusal, lower_keys

log = logging.getLogger(__name__)

#: Most bytes of a POST body: a signal's largest payload and room for the rest.
MAX_BODY: Final = MAX_PAYLOAD_BYTES + 4096
#: Most bytes of a refused body read (and dropped) before the 413; beyond, the connection is just closed.
MAX_DRAINED: Final = 8 * 1024 * 1024
#: Most requests read from Kafka at once; more wait for a slot (then 503).
MAX_READINGS: Final = 4
#: The page's files and their types.
STATIC: Final = {"/": ("index.html", "text/html; charset=utf-8"),
                 "/console.js": ("console.js", "text/javascript; charset=utf-8"),
                 "/console.css": ("console.css", "text/css; charset=utf-8")}
SECURITY_HEADERS: Final = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; "
                               "base-uri 'none'; form-action 'none'",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Resource-Policy": "same-origin",
    "Cache-Control": "no-store",
}


def static_file(name: str) -> bytes:
    return resources.files("tidings.console").joinpath("static", name).read_bytes()


class ConsoleServer(ThreadingHTTPServer):
    """The HTTP server of one console: its API and its guard."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], api: ConsoleApi, guard: Guard) -> None:
        self.api = api
        self.guard = guard
        self.readings = threading.BoundedSemaphore(MAX_READINGS)
        super().__init__(address, Handler)


class Handler(BaseHTTPRequestHandler):
    server: ConsoleServer
    # A client that sends less than its Content-Length (or nothing) loses its thread after this.
    timeout = 30
    server_version = "tidings-console"
    sys_version = ""
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
        log.debug("%s %s", self.address_string(), format % args)

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        path = urlsplit(self.path).path  # never the query: /login?token= carries a secret
        log.info("%s %s %s", self.command, path[:200], code)

    # -- answering -------------------------------------------------------------------------

    def _send(self, status: int, body: bytes, content_type: str, extra: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for name, value in {**SECURITY_HEADERS, **(extra or {})}.items():
            self.send_header(name, value)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, status: int, body: dict[str, Any]) -> None:
        self._send(status, json.dumps(body).encode(), "application/json")

    def _refuse(self, refusal: Refusal) -> None:
        self._json(refusal.status, {"error": refusal.message})

    def _headers(self) -> dict[str, str]:
        return lower_keys(self.headers.items())

    def _guarded(self, headers: dict[str, str]) -> bool:
        """Answer and return False when the Host or the token is wrong."""
        refusal = self.server.guard.check_host(headers) or (
            None if urlsplit(self.path).path == "/login" else self.server.guard.check_auth(headers))
        if refusal is not None:
            self.close_connection = True
            self._refuse(refusal)
            return False
        return True

    def _api(self, call: Any) -> None:
        if not self.server.readings.acquire(timeout=30):
            self._json(503, {"error": "the console is busy reading; try again in a moment"})
            return
        try:
            answer: Answer = call()
        except ConsoleRefusal as exc:
            self._json(exc.status, {"error": exc.message})
            return
        except BrokerError as exc:
            self._json(502, {"error": f"Kafka: {exc}"})
            return
        except TimeoutError:
            self._json(504, {"error": "no answer in time (is a worker running? `tidings worker MODULE:APP`)"})
            return
        except Exception:  # noqa: BLE001 - one request's failure is its 500, never the server's end
            log.exception("the console failed to answer %s %s", self.command, urlsplit(self.path).path[:200])
            self._json(500, {"error": "the console failed to answer (see its log)"})
            return
        finally:
            self.server.readings.release()
        self._json(answer.status, answer.body)

    @staticmethod
    def _parts(path: str) -> list[str]:
        # Split before unquoting, so an id may hold an encoded "/".
        return [unquote(part, errors="strict") for part in path.split("/")[2:]]

    # -- methods ---------------------------------------------------------------------------------

    def do_GET(self) -> None:
        headers = self._headers()
        if not self._guarded(headers):
            return
        url = urlsplit(self.path)
        if url.path == "/login":
            self._login(parse_qs(url.query))
            return
        if url.path in STATIC:
            name, content_type = STATIC[url.path]
            self._send(200, static_file(name), content_type)
            return
        if url.path.startswith("/api/"):
            try:
                parts = self._parts(url.path)
                query = parse_qs(url.query, keep_blank_values=True, max_num_fields=50, errors="strict")
            except (UnicodeDecodeError, ValueError):
                self._json(400, {"error": "the path or query is not valid UTF-8 URL encoding"})
                return
            self._api(lambda: self.server.api.get(parts, query))
            return
        self._json(404, {"error": "no such page; the console is at /"})

    do_HEAD = do_GET

    def do_POST(self) -> None:
        headers = self._headers()
        if not self._guarded(headers):
            return
        self.close_connection = True  # a refused body is never read: the connection cannot be reused
        refusal = self.server.guard.check_state_change(headers)
        if refusal is not None:
            self._refuse(refusal)
            return
        url = urlsplit(self.path)
        if not url.path.startswith("/api/") or url.query:
            self._json(404, {"error": "state changes are POSTs to /api/... with a JSON body and no query"})
            return
        length_text = headers.get("content-length", "")
        if not length_text.isdigit():
            self._json(411, {"error": "send a Content-Length with the JSON body"})
            return
        length = int(length_text)
        if length > MAX_BODY:
            if length <= MAX_DRAINED:
                # Read and drop it, so a client still sending hears the 413 instead of a broken pipe.
                left = length
                while left > 0 and (chunk := self.rfile.read(min(left, 65536))):
                    left -= len(chunk)
            self._json(413, {"error": f"the body is {length} bytes; at most {MAX_BODY} are taken"})
            return
        raw = self.rfile.read(length)
        try:
            parts = self._parts(url.path)
            check_json_text(raw, "the body")
            body = json.loads(raw) if raw else {}
        except LimitError as exc:
            self._json(413 if "bytes" in str(exc) else 400, {"error": str(exc)})
            return
        except (UnicodeDecodeError, ValueError) as exc:
            self._json(400, {"error": f"the body is not JSON: {str(exc)[:200]}"})
            return
        self._api(lambda: self.server.api.post(parts, body))

    def do_PUT(self) -> None:
        self._json(405, {"error": "the console takes GET and POST only"})

    do_DELETE = do_PATCH = do_OPTIONS = do_PUT

    def _login(self, query: dict[str, list[str]]) -> None:
        guard = self.server.guard
        offered = (query.get("token") or [""])[0]
        if guard.token is None:
            self._send(303, b"", "text/plain", {"Location": "/"})
            return
        if not guard.token_matches(offered):
            self._json(401, {"error": "wrong token: open /login?token=TOKEN with the console's token"})
            return
        cookie = f"{COOKIE}={guard.session_cookie()}; HttpOnly; SameSite=Strict; Path=/"
        self._send(303, b"", "text/plain", {"Location": "/", "Set-Cookie": cookie})


def serve(api: ConsoleApi, guard: Guard) -> ConsoleServer:
    """A server bound to the guard's address, not yet serving (``serve_forever``)."""
    return ConsoleServer((guard.host, guard.port), api, guard)
