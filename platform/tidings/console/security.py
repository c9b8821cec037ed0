"""Who may ask the console what: the Host, the token, the Origin and the CSRF token. Pure.

The console is a web app on a port any local process and any page a browser opens can
reach, so every request is hostile until shown otherwise:

- **Host.** A request whose ``Host`` is not one of the console's names (its bound address,
  ``127.0.0.1``/``localhost``/``[::1]`` when bound to loopback, each ``--allow-host``) is
  refused: a DNS-rebinding page reaches the port under a name of its own.
- **Token.** Bound beyond loopback the console needs a token (``--token`` or
  ``TIDINGS_CONSOLE_TOKEN``): every request carries it as ``Authorization: Bearer TOKEN`` or
  the session cookie ``/login?token=TOKEN`` sets. The cookie holds an HMAC of the token and a
  secret of this process, never the token, so it dies with the process.
- **State changes** (every POST) need ``--allow-actions``, a JSON body, an ``Origin`` (when a
  browser sends one, and a browser always does on a POST) equal to the console's own, no
  ``Sec-Fetch-Site`` other than ``same-origin``/``none``, and the CSRF token of this process
  in ``X-CSRF-Token`` (the page reads it from ``/api/session``, which a foreign page cannot).

Comparisons of secrets are constant-time (``hmac.compare_digest``).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

#: The session cookie's name.
COOKIE: Final = "tidings_console"
#: The header the CSRF token comes in.
CSRF_HEADER: Final = "x-csrf-token"


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or ``localhost``) is this machine only."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a request is refused: the HTTP status and one line saying what to do."""

    status: int
    message: str


@dataclass(frozen=True, slots=True)
class Guard:
    """The console's checks for one process: its names, its token, its CSRF token.

    Args:
        host: The address the server is bound to.
        port: Its port.
        token: The token every request needs (None: none, only allowed on loopback).
        allow_actions: Whether state changes are allowed at all.
        extra_hosts: More names the console is reached under (``--allow-host``).
    """

    host: str
    port: int
    token: str | None
    allow_actions: bool
    extra_hosts: tuple[str, ...] = ()
    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    secret: bytes = field(default_factory=lambda: secrets.token_bytes(32), repr=False)

    def __post_init__(self) -> None:
        if self.token is None and not is_loopback(self.host):
            raise ValueError(f"binding the console to {self.host} needs a token: pass --token or set "
                             "TIDINGS_CONSOLE_TOKEN (or bind to 127.0.0.1)")
        if self.token is not None and len(self.token) < 16:
            raise ValueError("the console token must be at least 16 characters (e.g. `openssl rand -hex 16`)")

    def hosts(self) -> frozenset[str]:
        """Every ``Host`` header value accepted (lower case, with the port)."""
        names = {self.host, *self.extra_hosts}
        if is_loopback(self.host) or self.host in ("0.0.0.0", "::"):
            names |= {"127.0.0.1", "localhost", "::1"}
        out = set()
        for name in names:
            bare = name.lower().strip("[]")
            shown = f"[{bare}]" if ":" in bare else bare
            out.add(f"{shown}:{self.port}")
            if self.port == 80:
                out.add(shown)
        return frozenset(out)

    def check_host(self, headers: Mapping[str, str]) -> Refusal | None:
        host = headers.get("host", "").lower()
        if host not in self.hosts():
            return Refusal(403, "this console answers only to its own address (Host header); "
                                "start it with --allow-host NAME to add a name")
        return None

    def session_cookie(self) -> str:
        """The cookie value that stands for the token in this process."""
        assert self.token is not None
        return hmac.new(self.secret, self.token.encode(), hashlib.sha256).hexdigest()

    def token_matches(self, offered: str) -> bool:
        return self.token is not None and hmac.compare_digest(offered.encode(), self.token.encode())

    def check_auth(self, headers: Mapping[str, str]) -> Refusal | None:
        """None when no token is needed or the request carries it (bearer header or session cookie)."""
        if self.token is None:
            return None
        authorization = headers.get("authorization", "")
        scheme, _, offered = authorization.partition(" ")
        if scheme.lower() == "bearer" and self.token_matches(offered.strip()):
            return None
        cookie = cookies(headers.get("cookie", "")).get(COOKIE)
        if cookie is not None and hmac.compare_digest(cookie.encode(), self.session_cookie().encode()):
            return None
        return Refusal(401, "this console needs its token: open /login?token=TOKEN once, or send "
                            "Authorization: Bearer TOKEN")

    def check_state_change(self, headers: Mapping[str, str]) -> Refusal | None:
        """None when a POST may change state; else why not (checked after the Host and the token)."""
        if not self.allow_actions:
            return Refusal(403, "the console is read-only: start it with --allow-actions to act")
        host = headers.get("host", "").lower()
        origin = headers.get("origin")
        if origin is not None and origin.lower() != f"http://{host}":
            return Refusal(403, f"a state change from another origin ({origin[:100]!r}) is refused; "
                                "use the console's own page")
        site = headers.get("sec-fetch-site")
        if site is not None and site.lower() not in ("same-origin", "none"):
            return Refusal(403, f"a state change from a {site[:40]!r} request is refused; use the console's own page")
        offered = headers.get(CSRF_HEADER, "")
        if not offered or not hmac.compare_digest(offered.encode(), self.csrf.encode()):
            return Refusal(403, "a state change needs the X-CSRF-Token header that GET /api/session gives")
        content_type = headers.get("content-type", "").split(";")[0].strip().lower()
        if content_type != "application/json":
            return Refusal(415, "send the body as JSON (Content-Type: application/json)")
        return None


def cookies(header: str) -> dict[str, str]:
    """A ``Cookie`` header's pairs (the first of a repeated name wins); malformed parts skipped."""
    found: dict[str, str] = {}
    for part in header.split(";"):
        name, eq, value = part.strip().partition("=")
        if eq and name and name not in found:
            found[name] = value
    return found


def lower_keys(pairs: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Header pairs by lower-case name; a repeated header keeps its first value."""
    out: dict[str, str] = {}
    for name, value in pairs:
        out.setdefault(name.lower(), value)
    return out
