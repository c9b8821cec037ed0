"""The one Kafka connection every client of a process is built from (docs/kafka.md).

A ``KafkaConnection`` is the cluster's bootstrap servers and the librdkafka properties
every client uses (security, client.rack, timeouts, ...), plus per-role overrides. It is
resolved once from three sources, the first that gives a property winning:

1. explicit arguments: a CLI flag (``--bootstrap``), ``App(bootstrap=..., kafka={...})``;
2. the environment: ``TIDINGS_BOOTSTRAP`` and ``TIDINGS_KAFKA_<PROPERTY>``;
3. a properties file (``client.properties``, as Confluent Cloud and MSK hand them out),
   named by ``--kafka-config FILE`` or ``TIDINGS_KAFKA_CONFIG``.

Within each source, Java client keys are translated where librdkafka has an equivalent
(``sasl.jaas.config``, PEM truststores, ...), dropped where they mean nothing to librdkafka
(serializers, Schema Registry settings), and refused with a one-line reason otherwise
(``kafka_properties.py``).
Keys prefixed ``consumer.``, ``producer.`` or ``admin.`` apply to that kind of client only.

Every Kafka client of tidings is built here (``consumer``, ``producer``, ``admin``, and the
bench's aiokafka clients), so each gets the same properties and the same log hooks
(``kafka_log.hooks``). Secrets never leave this module in a readable form: ``repr``,
``redacted()``, error messages and the build records show them as ``[redacted]``.
"""

from __future__ import annotations

import inspect
import json
import logging
import os
import re
import threading
import types
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Literal

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from ...errors import BrokerError, DefinitionError
from . import kafka_log, oauth
from .kafka_properties import (
    JAVA_HINTS, ROLES, SCRAM_MECHANISMS, Layer, Role, is_secret, read_properties, text_value,
)
from .oauth import TokenHook

if TYPE_CHECKING:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

log = logging.getLogger(__name__)


#: Environment variables of tidings' own under the property prefix: never a property.
ENV_PREFIX: Final = "TIDINGS_KAFKA_"
CONFIG_ENV: Final = "TIDINGS_KAFKA_CONFIG"
#: Set to a file: every client built appends one JSON line there (role, where, properties
#: with secrets redacted). For tests and for an operator who wants to see what was built.
RECORD_ENV: Final = "TIDINGS_KAFKA_RECORD_CLIENTS"
RESERVED_ENV: Final = frozenset({CONFIG_ENV, RECORD_ENV})
BOOTSTRAP_ENV: Final = "TIDINGS_BOOTSTRAP"

REDACTED: Final = "[redacted]"


def environment_stamp() -> tuple[tuple[Any, Any], ...]:
    """What of the environment ``KafkaConnection.resolve`` reads (the ``TIDINGS_*`` variables),
    as a key that changes whenever that does.

    Every handle call without a connection of its own asks for it, so it must be cheap:
    reading ``os.environ`` decodes every variable of the process each time (19 µs with 40,
    a sixth of a workflow client's CPU per ``execute``). The encoded mapping behind it is
    read instead where there is one (POSIX: 2 µs); its bytes change exactly when the
    variables do."""
    encoded = getattr(os.environ, "_data", None)  # CPython's, bytes to bytes where supports_bytes_environ
    if os.supports_bytes_environ and isinstance(encoded, dict):
        return tuple(sorted((k, v) for k, v in encoded.items() if k.startswith(b"TIDINGS_")))
    return tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("TIDINGS_")))

#: librdkafka's consumer-only (C) and producer-only (P) properties, from its
#: CONFIGURATION.md: a common property of one role is given to that role's clients only,
#: so librdkafka does not warn on every other client that it ignores it.
CONSUMER_ONLY: Final = frozenset(
    {
        "group.id", "group.instance.id", "partition.assignment.strategy", "session.timeout.ms",
        "heartbeat.interval.ms", "group.protocol.type", "group.protocol", "group.remote.assignor",
        "coordinator.query.interval.ms", "max.poll.interval.ms", "enable.auto.commit",
        "auto.commit.interval.ms", "enable.auto.offset.store", "queued.min.messages",
        "queued.max.messages.kbytes", "fetch.wait.max.ms", "fetch.queue.backoff.ms",
        "fetch.message.max.bytes", "max.partition.fetch.bytes", "fetch.max.bytes", "fetch.min.bytes",
        "fetch.error.backoff.ms", "isolation.level", "enable.partition.eof", "check.crcs",
        "auto.offset.reset", "consume.callback.max.messages",
    }
)
PRODUCER_ONLY: Final = frozenset(
    {
        "transactional.id", "transaction.timeout.ms", "enable.idempotence", "enable.gapless.guarantee",
        "queue.buffering.max.messages", "queue.buffering.max.kbytes", "queue.buffering.max.ms",
        "linger.ms", "message.send.max.retries", "retries", "queue.buffering.backpressure.threshold",
        "compression.codec", "compression.type", "compression.level", "batch.num.messages",
        "batch.size", "delivery.report.only.error", "sticky.partitioning.linger.ms",
        "request.required.acks", "acks", "request.timeout.ms", "message.timeout.ms",
        "delivery.timeout.ms", "partitioner", "queuing.strategy",
    }
)
_ONLY_FOR: Final[Mapping[str, frozenset[str]]] = {
    "consumer": PRODUCER_ONLY,  # what a consumer does not get
    "producer": CONSUMER_ONLY,
    "admin": CONSUMER_ONLY | PRODUCER_ONLY,
}

def env_property(name: str) -> str:
    """The property an environment variable names: ``TIDINGS_KAFKA_SECURITY_PROTOCOL`` ->
    ``security.protocol``; ``__`` is a literal ``_`` (``TIDINGS_KAFKA_LOG__LEVEL`` ->
    ``log_level``), read left to right."""
    return name[len(ENV_PREFIX):].lower().replace("__", "\0").replace("_", ".").replace("\0", "_")


@dataclass(frozen=True)
class KafkaConnection:
    """The Kafka cluster and client properties every client of one process uses."""

    bootstrap: str  # bootstrap.servers
    properties: Mapping[str, str] = field(default_factory=dict)  # librdkafka properties for every client
    # "consumer" / "producer" / "admin" -> properties of that kind of client only
    overrides: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    # property (role-prefixed for overrides) -> where it was set, for error messages
    sources: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)
    # the OAUTHBEARER token provider every client gets as oauth_cb (oauth.py), if any
    token_hook: TokenHook | None = None

    def __post_init__(self) -> None:
        # Frozen all the way down: the connection is shared by every client of the process.
        object.__setattr__(self, "properties", types.MappingProxyType(dict(self.properties)))
        unknown = set(self.overrides) - set(ROLES)
        if unknown:
            raise ValueError(f"overrides are per role ({', '.join(ROLES)}), not {sorted(unknown)}")
        object.__setattr__(self, "overrides", types.MappingProxyType(
            {role: types.MappingProxyType(dict(props)) for role, props in self.overrides.items() if props}))
        object.__setattr__(self, "sources", types.MappingProxyType(dict(self.sources)))

    # -- resolving -------------------------------------------------------------------------

    @classmethod
    def resolve(
        cls,
        *,
        bootstrap: str | None = None,
        kafka: Mapping[str, object] | None = None,
        config_file: str | os.PathLike[str] | None = None,
        environ: Mapping[str, str] = os.environ,
    ) -> KafkaConnection:
        """Resolve the connection from explicit arguments, the environment and a file.

        ``bootstrap`` and ``kafka`` are the explicit arguments (``bootstrap`` wins over a
        ``bootstrap.servers`` in ``kafka``); ``config_file`` (else ``TIDINGS_KAFKA_CONFIG``)
        names the properties file. See the module docstring for the precedence.

        Raises:
            DefinitionError: a source is malformed, or gives a Java key librdkafka cannot
                use (every problem listed, each naming its key and where it was set).
            BrokerError: no source gives the bootstrap servers.
        """
        reasons: list[str] = []
        explicit = Layer("explicit")
        hook: TokenHook | None = None
        for key, value in (kafka or {}).items():
            if key == oauth.OAUTH_CB:
                try:
                    hook = oauth.of_callable(value, "App(kafka=...)")
                except DefinitionError as exc:
                    reasons.extend(exc.reasons)
                continue
            text = text_value(key, value, reasons)
            if text is not None:
                explicit.set(key, text, "App(kafka=...)")
        if bootstrap:
            explicit.set("bootstrap.servers", bootstrap, "the bootstrap argument")
        environment = Layer("environment")
        for name in sorted(environ):
            if name.startswith(ENV_PREFIX) and name not in RESERVED_ENV:
                environment.set(env_property(name), environ[name], name)
        if environ.get(BOOTSTRAP_ENV):
            environment.set("bootstrap.servers", environ[BOOTSTRAP_ENV], BOOTSTRAP_ENV)
        path = config_file or environ.get(CONFIG_ENV) or None
        file = Layer("file")
        if path is not None:
            origin = "--kafka-config" if config_file else CONFIG_ENV
            for key, value, where in read_properties(path, origin=origin):
                file.set(key, value, where)
        properties: dict[str, str] = {}
        overrides: dict[str, dict[str, str]] = {role: {} for role in ROLES}
        sources: dict[str, str] = {}
        # Lowest precedence first: each layer overwrites what a weaker one set.
        for layer in (file, environment, explicit):
            common, roles = layer.translated(reasons)
            properties.update(common)
            for role in ROLES:
                overrides[role].update(roles[role])
            sources.update(layer.sources)
        hook = _token_hook(hook, properties, overrides, sources, reasons)
        if reasons:
            raise DefinitionError("the Kafka configuration", reasons)
        servers = properties.pop("bootstrap.servers", None) or properties.pop("metadata.broker.list", None)
        properties.pop("metadata.broker.list", None)
        if not servers:
            raise BrokerError(
                "no Kafka bootstrap servers: pass --bootstrap or App(bootstrap=...), set "
                "TIDINGS_BOOTSTRAP, or give bootstrap.servers in the --kafka-config / "
                "TIDINGS_KAFKA_CONFIG file (`tidings broker start` runs a local broker and "
                "prints the address)"
            )
        return cls(servers, properties, overrides, sources, hook)

    @classmethod
    def of(cls, bootstrap: str | KafkaConnection) -> KafkaConnection:
        """``bootstrap`` as a connection: a connection as it is; an address with the
        environment's properties and its ``TIDINGS_KAFKA_CONFIG`` file (``resolve``)."""
        if isinstance(bootstrap, KafkaConnection):
            return bootstrap
        return cls.resolve(bootstrap=bootstrap)

    def with_bootstrap(self, bootstrap: str) -> KafkaConnection:
        """This connection with other bootstrap servers (the same cluster's properties)."""
        return KafkaConnection(bootstrap, self.properties, self.overrides, self.sources, self.token_hook)

    # -- building clients -------------------------------------------------------------------

    def config(self, role: Role, **extra: object) -> dict[str, object]:
        """librdkafka config for one client: common properties, then role overrides, then
        ``extra`` (the call site's own settings such as group.id), then the log hooks.

        A common property that is librdkafka's for another role only (``acks`` on a
        consumer, ``session.timeout.ms`` on a producer) is left out. A hook callback the
        call site sets too (``error_cb``) is chained: the hook's runs first.
        """
        if role not in ROLES:
            raise ValueError(f"role must be one of {', '.join(ROLES)}, not {role!r}")
        skip = _ONLY_FOR[role]
        config: dict[str, object] = {"bootstrap.servers": self.bootstrap}
        config.update((key, value) for key, value in self.properties.items() if key not in skip)
        config.update(self.overrides.get(role, {}))
        if self.token_hook is not None:
            config[oauth.OAUTH_CB] = self.token_hook
        config.update(extra)
        for key, hook in kafka_log.hooks(role).items():
            site = config.get(key)
            if key.endswith("_cb") and callable(hook) and callable(site) and site is not hook:
                config[key] = _chained(hook, site)
            else:
                config[key] = hook
        return config

    def consumer(self, **extra: object) -> Consumer:
        """A confluent-kafka ``Consumer`` with this connection's properties and ``extra``."""
        return self._build("consumer", Consumer, self.config("consumer", **extra))

    def producer(self, **extra: object) -> Producer:
        """A confluent-kafka ``Producer`` with this connection's properties and ``extra``."""
        return self._build("producer", Producer, self.config("producer", **extra))

    def admin(self, **extra: object) -> AdminClient:
        """A confluent-kafka ``AdminClient`` with this connection's properties and ``extra``."""
        return self._build("admin", AdminClient, self.config("admin", **extra))

    def aiokafka(self, role: Literal["consumer", "producer"]) -> dict[str, Any]:
        """This connection as aiokafka keyword arguments (the bench's aiokafka clients).

        Translated: bootstrap servers, ``security.protocol``, ``sasl.mechanism``,
        ``sasl.username``/``sasl.password``, the PEM files of ``ssl.ca.location``,
        ``ssl.certificate.location``, ``ssl.key.location`` (an SSL context), and
        ``client.id``; other librdkafka properties have no aiokafka equivalent and are
        left out (logged at debug level).

        OAUTHBEARER with the connection's token provider (``tidings.oauth.token.provider``)
        becomes ``sasl_oauth_token_provider``, an aiokafka ``AbstractTokenProvider`` over it.

        Raises:
            DefinitionError: a property aiokafka cannot do (GSSAPI, OAUTHBEARER without a token
                provider, librdkafka's built-in OIDC, a PKCS#12 keystore).
        """
        props = {key: value for key, value in self.properties.items() if key not in _ONLY_FOR[role]}
        props.update(self.overrides.get(role, {}))
        kwargs: dict[str, Any] = {"bootstrap_servers": self.bootstrap}
        reasons: list[str] = []
        protocol = props.pop("security.protocol", "plaintext").upper()
        kwargs["security_protocol"] = protocol
        mechanism = (props.pop("sasl.mechanism", None) or props.pop("sasl.mechanisms", None) or "").upper()
        props.pop("sasl.mechanisms", None)
        if protocol.startswith("SASL"):
            mechanism = mechanism or "GSSAPI"
            if mechanism == "OAUTHBEARER" and self.token_hook is not None:
                kwargs["sasl_oauth_token_provider"] = self.token_hook.aiokafka(props.pop("sasl.oauthbearer.config", ""))
            elif mechanism == "OAUTHBEARER":
                reasons.append("sasl.mechanism=OAUTHBEARER: aiokafka has no built-in OIDC client; give a token "
                               f"provider ({oauth.PROVIDER_PROPERTY}=package.module:function)")
            elif mechanism not in {"PLAIN", *SCRAM_MECHANISMS}:
                reasons.append(f"sasl.mechanism={mechanism}: the aiokafka clients here do PLAIN, SCRAM and "
                               "OAUTHBEARER with a token provider only")
            kwargs["sasl_mechanism"] = mechanism
            if mechanism != "OAUTHBEARER":
                kwargs["sasl_plain_username"] = props.pop("sasl.username", None)
                kwargs["sasl_plain_password"] = props.pop("sasl.password", None)
        if protocol.endswith("SSL"):
            if "ssl.keystore.location" in props:
                reasons.append("ssl.keystore.location: aiokafka takes PEM files (ssl.certificate.location, ssl.key.location)")
            from aiokafka.helpers import create_ssl_context

            context = create_ssl_context(
                cafile=props.pop("ssl.ca.location", None),
                certfile=props.pop("ssl.certificate.location", None),
                keyfile=props.pop("ssl.key.location", None),
                password=props.pop("ssl.key.password", None),
            )
            if props.pop("ssl.endpoint.identification.algorithm", "https") == "none":
                context.check_hostname = False
            kwargs["ssl_context"] = context
        if "client.id" in props:
            kwargs["client_id"] = props.pop("client.id")
        if reasons:
            raise DefinitionError("the Kafka configuration for aiokafka", reasons)
        if props:
            log.debug("aiokafka %s: no equivalent of %s", role, ", ".join(sorted(props)))
        return kwargs

    def aiokafka_producer(self, **extra: Any) -> AIOKafkaProducer:
        """An aiokafka producer with this connection's settings and ``extra`` (keyword args).

        Idempotent with ``acks="all"`` unless ``extra`` says otherwise, as every producer of
        tidings (aiokafka's own defaults are ``acks=1`` without idempotence).
        """
        from aiokafka import AIOKafkaProducer

        kwargs = {"acks": "all", "enable_idempotence": True, **self.aiokafka("producer"), **extra}
        _record("producer", "aiokafka", self._shown(kwargs))
        return AIOKafkaProducer(**kwargs)

    def aiokafka_consumer(self, *topics: str, **extra: Any) -> AIOKafkaConsumer:
        """An aiokafka consumer of ``topics`` with this connection's settings and ``extra``."""
        from aiokafka import AIOKafkaConsumer

        kwargs = {**self.aiokafka("consumer"), **extra}
        _record("consumer", "aiokafka", self._shown(kwargs))
        return AIOKafkaConsumer(*topics, **kwargs)

    # -- showing ----------------------------------------------------------------------------

    def redacted(self) -> dict[str, str]:
        """Every property, secrets as ``[redacted]``: role overrides prefixed with their role."""
        shown = {"bootstrap.servers": self.bootstrap}
        shown.update(self.properties)
        for role, props in self.overrides.items():
            shown.update((f"{role}.{key}", value) for key, value in props.items())
        if self.token_hook is not None:
            shown[oauth.PROVIDER_PROPERTY] = self.token_hook.name  # a function's name, never a token
        return {key: REDACTED if is_secret(key) else value for key, value in shown.items()}

    @property
    def principal(self) -> str:
        """Who the brokers see, as far as the properties tell, for an authorization error.

        ``User:NAME`` for a SASL PLAIN/SCRAM login (the brokers' default principal); else a
        description (a certificate's or a token's principal depends on the brokers'
        mapping rules, which a client cannot know).
        """
        username = self.properties.get("sasl.username")
        if username:
            return f"User:{username}"
        if self.properties.get("sasl.mechanism") == "OAUTHBEARER":
            return "the OAUTHBEARER token's principal"
        if self.properties.get("ssl.certificate.location") or self.properties.get("ssl.keystore.location"):
            return "the client certificate's principal"
        return "this connection's principal"

    def __str__(self) -> str:
        """The bootstrap servers only, for one-line errors."""
        return self.bootstrap

    def __repr__(self) -> str:
        overrides = {role: {key: REDACTED if is_secret(key) else value for key, value in props.items()}
                     for role, props in self.overrides.items()}
        properties = {key: REDACTED if is_secret(key) else value for key, value in self.properties.items()}
        hook = f", token_hook={self.token_hook.name!r}" if self.token_hook is not None else ""
        return (f"KafkaConnection(bootstrap={self.bootstrap!r}, properties={properties!r}, "
                f"overrides={overrides!r}{hook})")

    def __hash__(self) -> int:
        return hash((self.bootstrap, tuple(sorted(self.properties.items())),
                     tuple(sorted((role, tuple(sorted(props.items()))) for role, props in self.overrides.items())),
                     self.token_hook))

    def redact(self, text: str) -> str:
        """``text`` with every secret value of this connection replaced by ``[redacted]``."""
        for value in self._secret_values():
            text = text.replace(value, REDACTED)
        return text

    # -- internals --------------------------------------------------------------------------

    def _secret_values(self) -> Iterator[str]:
        for key, value in self.properties.items():
            if is_secret(key) and value:
                yield value
        for props in self.overrides.values():
            for key, value in props.items():
                if is_secret(key) and value:
                    yield value

    def _shown(self, config: Mapping[str, object]) -> dict[str, str]:
        # What a record or a log line may show of a client's config: no callables, no secrets.
        shown: dict[str, str] = {}
        for key, value in config.items():
            if callable(value) or isinstance(value, logging.Logger):
                continue
            text = str(value)
            shown[key] = REDACTED if is_secret(key) else self.redact(text)
        return shown

    def _build(self, role: Role, factory: Callable[..., Any], config: dict[str, object]) -> Any:
        _record(role, "confluent-kafka", self._shown(config))
        try:
            return factory(config)
        except KafkaException as exc:
            # ``from None``: the original message may quote a value, and a traceback shows it.
            raise self._refused(role, exc) from None

    def _refused(self, role: Role, exc: KafkaException) -> DefinitionError:
        error = exc.args[0] if exc.args else None
        message = error.str() if isinstance(error, KafkaError) else str(exc)
        message = self.redact(message)
        # 'No such configuration property: "k"', 'Invalid value [...] for configuration
        # property "k"', 'Configuration property "k" cannot be set to empty value'.
        quoted = re.search(r'property:? "([^"]+)"', message)
        key = quoted.group(1) if quoted else None
        client = "admin client" if role == "admin" else role
        reason = f"librdkafka refused the {client}'s configuration: {message}"
        if key is not None:
            where = self.sources.get(key) or self.sources.get(f"{role}.{key}")
            if where:
                reason += f" ({key} is set by {where})"
            hint = JAVA_HINTS.get(key)
            if hint:
                reason += f"; {key} is a Java client setting: use {hint}"
        return DefinitionError("the Kafka configuration", [reason])


def _token_hook(
    hook: TokenHook | None, properties: dict[str, str], overrides: Mapping[str, dict[str, str]],
    sources: Mapping[str, str], reasons: list[str],
) -> TokenHook | None:
    """The token provider the sources name (oauth.py), taken out of the librdkafka properties."""
    spec = properties.pop(oauth.PROVIDER_PROPERTY, None)
    for role in ROLES:
        if overrides[role].pop(oauth.PROVIDER_PROPERTY, None) is not None:
            reasons.append(f"{role}.{oauth.PROVIDER_PROPERTY} ({sources.get(f'{role}.{oauth.PROVIDER_PROPERTY}')}): "
                           f"every client of a process logs in alike; set {oauth.PROVIDER_PROPERTY}")
    if hook is None and spec is not None:  # App(kafka={"oauth_cb": f}) is explicit: it wins
        try:
            hook = oauth.load(spec, sources.get(oauth.PROVIDER_PROPERTY, "given"))
        except DefinitionError as exc:
            reasons.extend(exc.reasons)
            return None
    if hook is None:
        return None
    mechanism = (properties.get("sasl.mechanism") or properties.get("sasl.mechanisms") or "").upper()
    if mechanism != "OAUTHBEARER":
        reasons.append(f"a token provider ({hook.name}) is given but sasl.mechanism is "
                       f"{mechanism or 'unset'}: set sasl.mechanism=OAUTHBEARER")
    elif properties.get("sasl.oauthbearer.method", "default").lower() == "oidc":
        reasons.append(f"a token provider ({hook.name}) and sasl.oauthbearer.method=oidc are both given: "
                       "librdkafka's OIDC client fetches its own tokens; keep one of them")
    return hook


def _chained(first: Callable[..., Any], then: Callable[..., Any]) -> Callable[..., Any]:
    def both(*args: Any) -> Any:
        first(*args)
        return then(*args)

    return both


# -- recording what is built --------------------------------------------------------------------

_record_lock = threading.Lock()


def _record(role: str, library: str, shown: Mapping[str, str]) -> None:
    """Log (debug) and, with ``TIDINGS_KAFKA_RECORD_CLIENTS=FILE``, record one client built."""
    site = _caller()
    log.debug("building a Kafka %s (%s) for %s: %s", role, library, site, shown)
    path = os.environ.get(RECORD_ENV)
    if not path:
        return
    line = json.dumps({"pid": os.getpid(), "role": role, "library": library, "site": site,
                       "config": dict(shown)}, sort_keys=True)
    with _record_lock, open(path, "a", encoding="utf-8") as out:
        out.write(line + "\n")


def _caller() -> str:
    """``module.function`` of the first frame outside this module: who built the client."""
    frame = inspect.currentframe()
    try:
        while frame is not None and frame.f_globals.get("__name__") == __name__:
            frame = frame.f_back
        if frame is None:
            return "?"
        return f"{frame.f_globals.get('__name__', '?')}.{frame.f_code.co_qualname}"
    finally:
        del frame
