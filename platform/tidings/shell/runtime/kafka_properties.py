"""Java client properties read and translated to librdkafka's (docs/kafka.md).

A ``client.properties`` file (as Confluent Cloud, MSK and Aiven hand them out) or a
Java-style key anywhere a property is given: ``read_properties`` reads the file's
``key=value`` lines (Java's escapes and continued lines), ``Layer`` holds one source's
keys, and its ``translated`` splits off the role-prefixed ones (``consumer.``,
``producer.``, ``admin.``) and translates each part: ``sasl.jaas.config`` becomes
librdkafka's SASL settings, JKS/PKCS12/PEM trust and key stores become ``ssl.*``
locations, keys that mean nothing to librdkafka are dropped, and a key it refuses gets a
one-line reason naming where it was set. ``KafkaConnection.resolve``
(``connection.py``) stacks the layers.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Final, Literal

from ...errors import DefinitionError

log = logging.getLogger(__name__)

Role = Literal["consumer", "producer", "admin"]
ROLES: Final[tuple[Role, ...]] = ("consumer", "producer", "admin")

#: Properties whose values are secrets, besides any whose name ends in password or secret.
SECRET_PROPERTIES: Final = frozenset(
    {
        "sasl.password",
        "ssl.key.password",
        "ssl.keystore.password",
        "ssl.truststore.password",
        "sasl.oauthbearer.client.secret",
        "sasl.oauthbearer.client.credentials.client.secret",
        "sasl.oauthbearer.assertion.private.key.passphrase",
        "sasl.oauthbearer.assertion.private.key.pem",
        "sasl.oauthbearer.config",
        "sasl.jaas.config",
        "ssl.key.pem",
        "ssl.keystore.key",
        "basic.auth.user.info",
        "schema.registry.basic.auth.user.info",
    }
)

#: Java client keys that mean nothing to librdkafka: dropped (logged at debug level).
JAVA_ONLY: Final = frozenset(
    {
        "key.serializer", "value.serializer", "key.deserializer", "value.deserializer",
        "schema.registry.url", "basic.auth.credentials.source", "basic.auth.user.info",
        "schema.registry.basic.auth.credentials.source", "schema.registry.basic.auth.user.info",
        "auto.register.schemas", "use.latest.version",
        "interceptor.classes", "metric.reporters", "metrics.recording.level", "metrics.num.samples",
        "metrics.sample.window.ms", "auto.include.jmx.reporter", "default.api.timeout.ms",
        "security.providers", "ssl.protocol", "ssl.enabled.protocols", "ssl.keymanager.algorithm",
        "ssl.trustmanager.algorithm", "ssl.secure.random.implementation", "ssl.engine.factory.class",
        "sasl.login.callback.handler.class", "sasl.login.class",
    }
)
#: Java client keys librdkafka refuses, and what to use instead (said when it refuses one).
JAVA_HINTS: Final[Mapping[str, str]] = {
    "max.request.size": "message.max.bytes",
    "buffer.memory": "queue.buffering.max.kbytes (in KiB)",
    "receive.buffer.bytes": "socket.receive.buffer.bytes",
    "send.buffer.bytes": "socket.send.buffer.bytes",
    "sasl.client.callback.handler.class": "nothing: librdkafka takes no Java classes",
}

_PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
_SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
_OAUTH_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
_KERBEROS_MODULE = "com.sun.security.auth.module.Krb5LoginModule"
_MSK_IAM_MODULE = "software.amazon.msk.auth.iam.IAMLoginModule"
SCRAM_MECHANISMS = frozenset({"SCRAM-SHA-256", "SCRAM-SHA-512"})

_PEM_TYPES = frozenset({"PEM"})
_STORE_SUFFIXES: Final[Mapping[str, str]] = {
    ".jks": "JKS", ".keystore": "JKS", ".truststore": "JKS",
    ".p12": "PKCS12", ".pfx": "PKCS12", ".pkcs12": "PKCS12",
    ".pem": "PEM", ".crt": "PEM", ".cer": "PEM",
}


def is_secret(name: str) -> bool:
    """Whether property ``name`` (maybe role-prefixed) holds a secret."""
    name = name.lower()
    for role in ROLES:
        if name.startswith(f"{role}."):
            name = name[len(role) + 1:]
            break
    return name in SECRET_PROPERTIES or name.endswith(("password", "secret"))


def text_value(key: object, value: object, reasons: list[str]) -> str | None:
    if not isinstance(key, str) or not key:
        reasons.append(f"kafka=: a property name must be a non-empty string, not {key!r}")
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, int, float)):
        return str(value)
    reasons.append(f"kafka=: {key} must be a string, a number or a bool, not {type(value).__name__}")
    return None


class Layer:
    """One source's properties as given: common and role-prefixed keys, Java or not."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.given: dict[str, str] = {}
        self.sources: dict[str, str] = {}

    def set(self, key: str, value: str, where: str) -> None:
        key = key.strip()
        self.given[key] = value
        self.sources[key] = where

    def translated(self, reasons: list[str]) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
        """Split the role-prefixed keys off and translate each part's Java keys."""
        common: dict[str, str] = {}
        roles: dict[str, dict[str, str]] = {role: {} for role in ROLES}
        for key, value in self.given.items():
            role, _, rest = key.partition(".")
            if role in ROLES and rest:
                roles[role][rest] = value
            else:
                common[key] = value
        translated = _translate(common, self.sources, "", reasons)
        for role in ROLES:
            if "bootstrap.servers" in roles[role]:
                reasons.append(f"{role}.bootstrap.servers ({self.sources[f'{role}.bootstrap.servers']}): "
                               "every client uses one cluster; set bootstrap.servers")
                del roles[role]["bootstrap.servers"]
            roles[role] = _translate(roles[role], self.sources, f"{role}.", reasons)
        return translated, roles


def _translate(props: dict[str, str], sources: dict[str, str], prefix: str, reasons: list[str]) -> dict[str, str]:
    """Translate the Java client keys of one source's ``props`` (role ``prefix``) to librdkafka's."""
    out = dict(props)

    def where(key: str) -> str:
        return f"{prefix}{key} ({sources.get(prefix + key, 'given')})"

    def put(key: str, value: str, origin: str) -> None:
        # A librdkafka key given beside the Java one that implies it must agree with it.
        if key in out and out[key] != value:
            shown = "" if is_secret(key) else f" ({out[key]!r} and {value!r})"
            reasons.append(f"{where(origin)} and {prefix}{key} disagree{shown}: set one of them")
            return
        out[key] = value
        sources.setdefault(prefix + key, f"{origin}, {sources.get(prefix + origin, 'given')}")

    for key in sorted(out):
        if key in JAVA_ONLY:
            log.debug("Kafka configuration: %s means nothing to librdkafka, left out", where(key))
            del out[key]
    jaas = out.pop("sasl.jaas.config", None)
    if jaas is not None:
        _jaas(jaas, out, put, where, reasons)
    _truststore(out, put, where, reasons)
    _keystore(out, put, where, reasons)
    if "ssl.endpoint.identification.algorithm" in out:
        algorithm = out["ssl.endpoint.identification.algorithm"].strip().lower()
        # Java turns hostname verification off with an empty value, librdkafka with "none".
        out["ssl.endpoint.identification.algorithm"] = algorithm or "none"
    return out


def _jaas(
    text: str, out: dict[str, str], put: Callable[[str, str, str], None],
    where: Callable[[str], str], reasons: list[str],
) -> None:
    module, options = parse_jaas(text)
    key = "sasl.jaas.config"
    mechanism = (out.get("sasl.mechanism") or out.get("sasl.mechanisms") or "").upper()
    if module is None:
        reasons.append(f"{where(key)}: not a JAAS login module entry "
                       "(LoginModule required option=\"value\" ...;)")
        return
    if module == _MSK_IAM_MODULE:
        reasons.append(f"{where(key)}: AWS MSK IAM is a Java login module; with librdkafka set "
                       "sasl.mechanism=OAUTHBEARER and tidings.oauth.token.provider=MODULE:FUNCTION, a "
                       "function returning MSKAuthTokenProvider.generate_auth_token(region) "
                       "(docs/security.md, \"Amazon MSK\"), and drop sasl.jaas.config")
        return
    if module in (_PLAIN_MODULE, _SCRAM_MODULE):
        plain = module == _PLAIN_MODULE
        if plain and mechanism and mechanism != "PLAIN":
            reasons.append(f"{where(key)}: PlainLoginModule needs sasl.mechanism=PLAIN, not {mechanism}")
            return
        if not plain:
            if options.get("tokenauth", "").lower() == "true":
                reasons.append(f"{where(key)}: delegation tokens (tokenauth=true) have no librdkafka "
                               "equivalent; use SCRAM credentials")
                return
            if mechanism not in SCRAM_MECHANISMS:
                reasons.append(f"{where(key)}: ScramLoginModule needs sasl.mechanism=SCRAM-SHA-256 or "
                               f"SCRAM-SHA-512{f', not {mechanism}' if mechanism else ''}")
                return
        missing = [name for name in ("username", "password") if name not in options]
        if missing:
            reasons.append(f"{where(key)}: the login module names no {' or '.join(missing)}; "
                           "librdkafka needs sasl.username and sasl.password")
            return
        if not mechanism:
            put("sasl.mechanism", "PLAIN", key)
        put("sasl.username", options["username"], key)
        put("sasl.password", options["password"], key)
        return
    if module == _OAUTH_MODULE:
        if mechanism and mechanism != "OAUTHBEARER":
            reasons.append(f"{where(key)}: OAuthBearerLoginModule needs sasl.mechanism=OAUTHBEARER, not {mechanism}")
            return
        if "clientId" not in options or "clientSecret" not in options:
            reasons.append(f"{where(key)}: an OAUTHBEARER login without clientId and clientSecret "
                           "(Java's unsecured tokens) has no librdkafka equivalent; for OIDC give "
                           "sasl.oauthbearer.method=oidc, sasl.oauthbearer.client.id, "
                           "sasl.oauthbearer.client.secret and sasl.oauthbearer.token.endpoint.url")
            return
        if "sasl.oauthbearer.token.endpoint.url" not in out:
            reasons.append(f"{where(key)}: an OIDC login needs sasl.oauthbearer.token.endpoint.url")
            return
        if not mechanism:
            put("sasl.mechanism", "OAUTHBEARER", key)
        put("sasl.oauthbearer.method", "oidc", key)
        put("sasl.oauthbearer.client.id", options["clientId"], key)
        put("sasl.oauthbearer.client.secret", options["clientSecret"], key)
        if "scope" in options:
            put("sasl.oauthbearer.scope", options["scope"], key)
        extensions = [f"{name[len('extension_'):]}={value}" for name, value in options.items()
                      if name.startswith("extension_")]
        if extensions:
            put("sasl.oauthbearer.extensions", ",".join(extensions), key)
        return
    if module == _KERBEROS_MODULE:
        if mechanism and mechanism != "GSSAPI":
            reasons.append(f"{where(key)}: Krb5LoginModule needs sasl.mechanism=GSSAPI, not {mechanism}")
            return
        if options.get("useKeyTab", "").lower() != "true" or "keyTab" not in options:
            reasons.append(f"{where(key)}: librdkafka logs in to Kerberos with a keytab: give "
                           "useKeyTab=true keyTab=\"...\" principal=\"...\" (or sasl.kerberos.keytab "
                           "and sasl.kerberos.principal)")
            return
        if not mechanism:
            put("sasl.mechanism", "GSSAPI", key)
        put("sasl.kerberos.keytab", options["keyTab"], key)
        if "principal" in options:
            put("sasl.kerberos.principal", options["principal"], key)
        return
    reasons.append(f"{where(key)}: login module {module} has no librdkafka equivalent")


def _store_type(location: str, given: str | None) -> str | None:
    if given:
        return given.strip().upper()
    return _STORE_SUFFIXES.get(Path(location).suffix.lower())


def _truststore(
    out: dict[str, str], put: Callable[[str, str, str], None],
    where: Callable[[str], str], reasons: list[str],
) -> None:
    location = out.pop("ssl.truststore.location", None)
    kind = out.pop("ssl.truststore.type", None)
    out.pop("ssl.truststore.password", None)  # a PEM file has none; a refused store needs none
    certificates = out.pop("ssl.truststore.certificates", None)
    if certificates is not None:
        put("ssl.ca.pem", certificates, "ssl.truststore.certificates")
    if location is None:
        return
    store = _store_type(location, kind) or "JKS"  # Java's default truststore type
    if store in _PEM_TYPES:
        put("ssl.ca.location", location, "ssl.truststore.location")
        return
    reasons.append(
        f"{where('ssl.truststore.location')}: librdkafka reads no {store} truststore; convert it "
        "to PEM and set ssl.ca.location (JKS: keytool -exportcert -rfc -keystore FILE -alias "
        "ALIAS -file ca.pem; PKCS12: openssl pkcs12 -in FILE -nokeys -out ca.pem)"
    )


def _keystore(
    out: dict[str, str], put: Callable[[str, str, str], None],
    where: Callable[[str], str], reasons: list[str],
) -> None:
    kind = out.pop("ssl.keystore.type", None)
    key = out.pop("ssl.keystore.key", None)
    if key is not None:
        put("ssl.key.pem", key, "ssl.keystore.key")
    chain = out.pop("ssl.keystore.certificate.chain", None)
    if chain is not None:
        put("ssl.certificate.pem", chain, "ssl.keystore.certificate.chain")
    location = out.get("ssl.keystore.location")
    if location is None:
        return
    # librdkafka's own ssl.keystore.location is a PKCS#12 file: that is what it means untyped.
    store = _store_type(location, kind) or "PKCS12"
    if store == "PKCS12":
        return
    del out["ssl.keystore.location"]
    out.pop("ssl.keystore.password", None)
    if store in _PEM_TYPES:
        reasons.append(f"{where('ssl.keystore.location')}: a PEM keystore is two librdkafka "
                       "properties: set ssl.certificate.location and ssl.key.location")
        return
    reasons.append(
        f"{where('ssl.keystore.location')}: librdkafka reads no {store} keystore; convert it to "
        "PKCS12 (keytool -importkeystore -srckeystore FILE -destkeystore client.p12 "
        "-deststoretype PKCS12) and set ssl.keystore.location to it, or to PEM (openssl pkcs12 "
        "-in client.p12 -out client.pem) and set ssl.certificate.location and ssl.key.location"
    )


_JAAS_ENTRY = re.compile(r"\s*([A-Za-z_$][\w$.]*)\s+(required|requisite|sufficient|optional)\b(.*)", re.S)
_JAAS_OPTION = re.compile(r"""\s*([^\s=;]+)\s*=\s*("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|[^\s;]+)""", re.S)


def parse_jaas(text: str) -> tuple[str | None, dict[str, str]]:
    """Return the login module and options of one JAAS entry (``Module required k="v" ...;``).

    Returns (None, {}) for text that is not one entry.
    """
    entry = _JAAS_ENTRY.fullmatch(text.strip())
    if entry is None:
        return None, {}
    module, rest = entry.group(1), entry.group(3).strip()
    if rest.endswith(";"):
        rest = rest[:-1]
    options: dict[str, str] = {}
    position = 0
    while position < len(rest):
        if not rest[position:].strip():
            break
        option = _JAAS_OPTION.match(rest, position)
        if option is None:
            return None, {}
        value = option.group(2)
        if value[:1] in ("'", '"'):
            value = re.sub(r"\\(.)", r"\1", value[1:-1], flags=re.S)
        options[option.group(1)] = value
        position = option.end()
    return module, options


# -- the properties file ------------------------------------------------------------------------

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def read_properties(path: str | os.PathLike[str], *, origin: str = "--kafka-config") -> list[tuple[str, str, str]]:
    """Read a Java ``.properties`` file: (key, value, "FILE line N") per entry, in order.

    The format of ``java.util.Properties.load``: ``key=value``, ``key: value`` or
    ``key value``; ``#`` and ``!`` start a comment line; a line ending in an odd number of
    backslashes continues on the next (its leading blanks dropped); ``\\t``, ``\\n``,
    ``\\uXXXX`` and ``\\`` before any other character are escapes. A later key wins.

    Raises:
        DefinitionError: the file cannot be read, or has a malformed ``\\u`` escape.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DefinitionError("the Kafka configuration", [
            f"cannot read the properties file {os.fspath(path)} (from {origin}): "
            f"{exc.strerror if isinstance(exc, OSError) and exc.strerror else exc}"
        ]) from None
    entries: list[tuple[str, str, str]] = []
    reasons: list[str] = []
    lines = re.split(r"\r\n|\r|\n", text)
    number = 0
    while number < len(lines):
        start = number
        line = lines[number].lstrip(" \t\f")
        number += 1
        if not line or line[0] in "#!":
            continue
        while _continues(line) and number < len(lines):
            line = line[:-1] + lines[number].lstrip(" \t\f")
            number += 1
        if _continues(line):
            line = line[:-1]
        where = f"{os.fspath(path)} line {start + 1}"
        try:
            key, value = _entry(line)
        except ValueError as exc:
            reasons.append(f"{where}: {exc}")
            continue
        entries.append((key, value, where))
    if reasons:
        raise DefinitionError("the Kafka configuration", reasons)
    return entries


def _continues(line: str) -> bool:
    backslashes = len(line) - len(line.rstrip("\\"))
    return backslashes % 2 == 1


def _entry(line: str) -> tuple[str, str]:
    # The key ends at the first unescaped '=', ':' or blank; then blanks, one '=' or ':', blanks.
    index = 0
    while index < len(line):
        char = line[index]
        if char == "\\":
            index += 2
            continue
        if char in "=: \t\f":
            break
        index += 1
    key = line[:index]
    rest = line[index:].lstrip(" \t\f")
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(" \t\f")
    return _unescape(key), _unescape(rest)


def _unescape(text: str) -> str:
    if "\\" not in text:
        return text
    out: list[str] = []
    index = 0
    while index < len(text):
        char = text[index]
        if char != "\\" or index + 1 >= len(text):
            out.append(char)
            index += 1
            continue
        escaped = text[index + 1]
        if escaped == "u":
            digits = text[index + 2:index + 6]
            if len(digits) != 4 or not all(c in "0123456789abcdefABCDEF" for c in digits):
                raise ValueError(f"malformed \\u escape: \\u{digits}")
            out.append(chr(int(digits, 16)))
            index += 6
            continue
        out.append(_ESCAPES.get(escaped, escaped))
        index += 2
    return "".join(out)
