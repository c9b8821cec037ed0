"""The OAUTHBEARER token hook: one function of yours gives every Kafka client its token.

librdkafka logs in with SASL/OAUTHBEARER two ways: its built-in OIDC client
(``sasl.oauthbearer.method=oidc`` with a client id, secret and token endpoint: plain
properties, nothing here), or a callback that returns a token. The second is how AWS MSK IAM
works (a token signed with the pod's AWS credentials) and any identity provider librdkafka's
OIDC client cannot talk to. A callback cannot be a librdkafka property, so tidings names it:

- ``tidings.oauth.token.provider=package.module:function`` in any source of the connection
  (the properties file, ``TIDINGS_KAFKA_TIDINGS_OAUTH_TOKEN_PROVIDER``, ``App(kafka=...)``);
- or ``App(kafka={"oauth_cb": function})`` in code.

The function is confluent-kafka's ``oauth_cb``: called with the ``sasl.oauthbearer.config``
string, it returns ``(token, expiry[, principal[, extensions]])``, ``expiry`` in seconds
since the epoch (milliseconds, as ``MSKAuthTokenProvider.generate_auth_token`` gives it, are
taken as such). ``KafkaConnection`` hands a :class:`TokenHook` around it to every
confluent-kafka client as ``oauth_cb`` and, as an aiokafka ``AbstractTokenProvider``
(:meth:`TokenHook.aiokafka`), to the aiokafka clients. The hook keeps the last token: clients
built together share it while it is young, and when the function fails the last token is used
while it is still valid, so one failed refresh is a warning, not a lost connection.

A token is a secret: it is never logged, recorded or shown; only the function's name is.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final
from tidings.errors import TokenProviderError

from ...errors import DefinitionError

log = logging.getLogger(__name__)

#: The property naming the token provider (never given to librdkafka).
PROVIDER_PROPERTY: Final = "tidings.oauth.token.provider"
#: confluent-kafka's config key for the callback; also accepted in ``App(kafka=...)``.
OAUTH_CB: Final = "oauth_cb"
#: An expiry above this is milliseconds since the epoch (1e11 s is the year 5138).
_MILLISECONDS_FROM: Final = 1e11
#: A failed refresh falls back to the last token only while it has this long left.
_FALLBACK_MIN_S: Final = 5.0

_SPEC = re.compile(r"[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*")

#: (token, expiry in epoch seconds, principal, extensions), as confluent-kafka takes it.
Token = tuple[str, float, str, dict[str, str]]



@dataclass
class _Last:
    token: Token | None = None
    issued: float = 0.0  # time.time() when it was made
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass(frozen=True)
class TokenHook:
    """A token provider function, as every client's ``oauth_cb`` (call it) and for aiokafka."""

    provider: Callable[[str], Any]
    name: str  # package.module:function, what logs and redacted() show
    _last: _Last = field(default_factory=_Last, compare=False, repr=False, hash=False)

    def __call__(self, config: str = "") -> Token:
        """A token for a client: the shared one while younger than half its life, else new.

        Raises:
            TokenProviderError: the provider failed and no earlier token is still valid,
                or it returned something that is not (token, expiry[, principal[, extensions]]).
        """
        last = self._last
        with last.lock:
            now = time.time()
            if last.token is not None and now < last.issued + (last.token[1] - last.issued) / 2:
                return last.token
            try:
                token = _checked(self.provider(config), self.name, now)
            except Exception as exc:
                if last.token is not None and last.token[1] - now > _FALLBACK_MIN_S:
                    # The exception's type only: its message may quote what the provider read.
                    log.warning("the OAUTHBEARER token provider %s failed (%s); using the last token, "
                                "valid for %.0f s more", self.name, type(exc).__name__, last.token[1] - now)
                    return last.token
                if isinstance(exc, TokenProviderError):
                    raise
                raise TokenProviderError(f"the OAUTHBEARER token provider {self.name} failed: "
                                         f"{type(exc).__name__}; check its credentials and logs") from None
            last.token, last.issued = token, now
            return token

    def aiokafka(self, config: str = "") -> Any:
        """This hook as an aiokafka ``AbstractTokenProvider`` (``sasl_oauth_token_provider``)."""
        from aiokafka.abc import AbstractTokenProvider

        hook = self

        class _Provider(AbstractTokenProvider):  # type: ignore[misc]
            """aiokafka asks for a token at each connection; the hook may call the provider."""

            async def token(self) -> str:
                # The provider may block (AWS credentials, an HTTP call): not on the event loop.
                value = await asyncio.get_running_loop().run_in_executor(None, hook, config)
                return value[0]

            def extensions(self) -> dict[str, str]:
                last = hook._last.token
                return dict(last[3]) if last is not None else {}

        return _Provider()


def load(spec: str, where: str) -> TokenHook:
    """The hook of ``package.module:function`` (set by ``where``), imported.

    Raises:
        DefinitionError: the name is malformed, the module does not import, or the
            attribute is missing or not callable (one reason, naming ``where``).
    """
    text = spec.strip()
    if not _SPEC.fullmatch(text):
        raise _refused(f"{PROVIDER_PROPERTY} ({where}): {text!r} is not package.module:function")
    module_name, _, attribute = text.partition(":")
    try:
        target: Any = importlib.import_module(module_name)
    except Exception as exc:
        raise _refused(f"{PROVIDER_PROPERTY} ({where}): cannot import {module_name} "
                       f"({type(exc).__name__}: {exc}); is it installed in this image or on PYTHONPATH?") from None
    for part in attribute.split("."):
        target = getattr(target, part, None)
    if target is None or not callable(target):
        raise _refused(f"{PROVIDER_PROPERTY} ({where}): {module_name} has no function {attribute}")
    return TokenHook(target, text)


def of_callable(value: object, where: str) -> TokenHook:
    """The hook of a callable given as ``oauth_cb`` in code (``App(kafka={"oauth_cb": f})``).

    Raises:
        DefinitionError: ``value`` is not callable.
    """
    if not callable(value):
        raise _refused(f"{OAUTH_CB} ({where}): must be a function (config) -> (token, expiry, ...), "
                       f"not {type(value).__name__}; or name one with {PROVIDER_PROPERTY}=package.module:function")
    module = getattr(value, "__module__", None) or "?"
    name = getattr(value, "__qualname__", None) or type(value).__qualname__
    return TokenHook(value, f"{module}:{name}")


def _checked(value: object, name: str, now: float) -> Token:
    """``value`` as (token, expiry in seconds, principal, extensions), or a one-line error."""
    if isinstance(value, (tuple, list)) and 2 <= len(value) <= 4:
        token, expiry, *rest = value
        principal = rest[0] if rest else ""
        extensions = rest[1] if len(rest) > 1 else {}
        if (isinstance(token, str) and token and isinstance(expiry, (int, float))
                and not isinstance(expiry, bool) and isinstance(principal, str)
                and isinstance(extensions, Mapping)
                and all(isinstance(k, str) and isinstance(v, str) for k, v in extensions.items())):
            seconds = float(expiry) / 1000 if expiry > _MILLISECONDS_FROM else float(expiry)
            if seconds <= now:
                raise TokenProviderError(f"the OAUTHBEARER token provider {name} returned a token that "
                                         f"expired {now - seconds:.0f} s ago: the expiry is seconds since the epoch")
            return token, seconds, principal, dict(extensions)
    # Never the value itself: it may hold the token.
    raise TokenProviderError(f"the OAUTHBEARER token provider {name} returned a {type(value).__name__}, "
                             "not (token, expiry[, principal[, extensions]])")


def _refused(reason: str) -> DefinitionError:
    return DefinitionError("the Kafka configuration", [reason])
