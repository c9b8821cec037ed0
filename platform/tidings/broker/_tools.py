"""Find the external programs the local broker needs, or say how to install them."""

from __future__ import annotations

import shutil

from tidings.errors import BrokerError

# Debian/Ubuntu package names, because that is what the CI machines and most dev boxes run.
_INSTALL_HINTS: dict[str, str] = {
    "java": "a Java 17+ runtime (e.g. `apt-get install -y openjdk-17-jre-headless`)",
    "mvn": "Apache Maven 3.6+ (e.g. `apt-get install -y maven`)",
}


def require_tool(name: str) -> str:
    """Return the absolute path of the program ``name`` found on ``PATH``.

    Args:
        name: The program to look for, ``"java"`` or ``"mvn"``.

    Returns:
        The absolute path of the program.

    Raises:
        BrokerError: The program is not on ``PATH``; the message says what to install.
    """
    path = shutil.which(name)
    if path is None:
        hint = _INSTALL_HINTS.get(name, f"`{name}`")
        raise BrokerError(
            f"`{name}` was not found on PATH; the local Kafka broker needs {hint}. "
            "Alternatively set TIDINGS_BOOTSTRAP to an existing Kafka broker."
        )
    return path
