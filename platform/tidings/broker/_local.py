"""A single-node Apache Kafka (KRaft, broker+controller in one JVM) on 127.0.0.1."""

from __future__ import annotations

import socket
import subprocess
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import KafkaException

from tidings.broker._certs import write_private
from tidings.broker._config import (
    BrokerLayout,
    new_cluster_id,
    previous_ports,
    render_log4j2_yaml,
    render_server_properties,
)
from tidings.broker._process import is_alive, is_kafka, log_tail, terminate
from tidings.broker._provisioning import Progress, provision_kafka
from tidings.broker._security import (
    ClientSettings,
    Method,
    SecureLayout,
    SecurePorts,
    client_settings,
    load_credentials,
    prepare,
    previous_secure_ports,
    scram_arguments,
    secure_settings,
    write_client_files,
)
from tidings.broker._state import BrokerState, read_state, remove_state, write_state
from tidings.broker._tools import require_tool
from tidings.errors import BrokerError
from tidings.shell.runtime.connection import KafkaConnection

# The flags kafka-server-start.sh passes, minus the ones only a production box needs.
_JVM_FLAGS = (
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-Djava.awt.headless=true",
)


@dataclass(frozen=True)
class BrokerStatus:
    """What ``status()`` found.

    Attributes:
        running: Whether the recorded PID is a live Kafka JVM.
        pid: The recorded PID, if any.
        bootstrap: The recorded ``host:port``, if any.
        data_dir: The recorded data directory, if any.
        secure: Whether it is a secured node (``bootstrap`` is then its SASL_SSL listener).
    """

    running: bool
    pid: int | None = None
    bootstrap: str | None = None
    data_dir: str | None = None
    secure: bool = False


class LocalBroker:
    """Provision, start, stop and inspect one local Kafka broker.

    Without ``state_file`` the broker is tracked in this object only (the pytest fixture);
    with it, ``{pid, bootstrap, data_dir}`` is persisted so another process (the next CLI call)
    can find and stop it.

    Example::

        broker = LocalBroker(Path("/tmp/kafka"))
        bootstrap = broker.start()
        try:
            ...
        finally:
            broker.stop()
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        state_file: Path | None = None,
        home: Path | None = None,
        port: int = 0,
        heap: str = "1g",
        startup_timeout: float = 120.0,
        on_progress: Progress = lambda _line: None,
        secure: bool = False,
    ) -> None:
        """Describe a broker; nothing happens until :meth:`start`.

        Args:
            data_dir: Where the broker keeps its config, logs and Kafka log dirs.
            state_file: Where to persist the running broker's PID and address, if anywhere.
            home: The jar cache (defaults to ``$TIDINGS_HOME`` or ``~/.cache/tidings``).
            port: The client port; 0 picks a free one.
            heap: The JVM's maximum heap (``-Xmx``).
            startup_timeout: Seconds to wait for the broker to answer metadata requests.
            on_progress: Called with human-readable progress lines.
            secure: A secured node instead of a PLAINTEXT one: SASL_SSL and mutual TLS
                listeners, SCRAM and PLAIN users, certificates made at start, Kafka's
                StandardAuthorizer (``_security.py``); ``port`` is then the SASL_SSL port, and
                :meth:`client_settings` names each user's client properties.
        """
        self._layout = BrokerLayout(data_dir.resolve())
        self._state_file = state_file
        self._home = home
        self._port = port
        self._heap = heap
        self._startup_timeout = startup_timeout
        self._on_progress = on_progress
        self._secure = secure
        self._state: BrokerState | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def data_dir(self) -> Path:
        """The broker's data directory."""
        return self._layout.data_dir

    def start(self) -> str:
        """Start the broker (provisioning the jars first if needed) and wait until it answers.

        Idempotent: if the recorded broker is still running, its address is returned.

        Returns:
            The bootstrap address, ``127.0.0.1:PORT``.

        Raises:
            BrokerError: ``java``/``mvn`` are missing, provisioning failed, or the broker died or
                did not answer within ``startup_timeout`` (the message has the log tail).
        """
        recorded = self._recorded()
        if recorded is not None and is_kafka(recorded.pid):
            return recorded.bootstrap
        java = require_tool("java")
        libs = provision_kafka(self._home, on_progress=self._on_progress)
        secure = SecureLayout(self.data_dir) if self._secure else None
        extra: dict[str, str] = {}
        scram: list[str] = []
        if secure is None:
            port, controller_port = self._ports()
        else:
            passwords = load_credentials(secure, formatted=self._layout.formatted.exists())
            prepare(secure)
            ports = self._secure_ports()
            port, controller_port = ports.sasl_ssl, ports.controller
            extra, scram = secure_settings(ports, secure.tls, passwords), scram_arguments(passwords)
            write_client_files(secure, ports, passwords)
        self._write_config(port, controller_port, extra)
        if not self._layout.formatted.exists():
            self._on_progress(f"Formatting KRaft storage in {self._layout.log_dirs}")
            self._format(java, libs, scram)
        bootstrap = f"127.0.0.1:{port}"
        self._on_progress(f"Starting Apache Kafka on {bootstrap} (data in {self.data_dir})")
        proc = self._launch(java, libs)
        # The readiness probe: the PLAINTEXT listener, or the admin over SCRAM.
        probe = (KafkaConnection(bootstrap) if secure is None
                 else client_settings(secure, "admin", "scram").connection())
        try:
            self._await_ready(proc, probe, port)
        except BaseException:
            # Never leave a half-started JVM behind, even on Ctrl-C.
            terminate(proc.pid, timeout=5.0, reap=proc.poll)
            raise
        self._proc = proc
        self._state = BrokerState(pid=proc.pid, bootstrap=bootstrap, data_dir=str(self.data_dir),
                                  secure=self._secure)
        if self._state_file is not None:
            write_state(self._state_file, self._state)
        return bootstrap

    def stop(self, *, timeout: float = 30.0) -> bool:
        """Stop the recorded broker by PID: SIGTERM, wait up to ``timeout``, then SIGKILL.

        Args:
            timeout: Seconds to allow for a clean shutdown.

        Returns:
            True if a running broker was stopped, False if none was running.
        """
        recorded = self._recorded()
        stopped = False
        if recorded is not None and is_kafka(recorded.pid):
            proc = self._proc if self._proc is not None and self._proc.pid == recorded.pid else None
            terminate(recorded.pid, timeout=timeout, reap=proc.poll if proc else lambda: None)
            stopped = True
        self._state = None
        self._proc = None
        if self._state_file is not None:
            remove_state(self._state_file)
        return stopped

    def status(self) -> BrokerStatus:
        """Report whether the recorded broker runs, and where.

        Returns:
            The status; ``running`` is False when nothing is recorded or the PID is gone.
        """
        recorded = self._recorded()
        if recorded is None:
            return BrokerStatus(running=False)
        return BrokerStatus(
            running=is_kafka(recorded.pid),
            pid=recorded.pid,
            bootstrap=recorded.bootstrap,
            data_dir=recorded.data_dir,
            secure=recorded.secure,
        )

    def client_settings(self, principal: str = "admin", method: Method = "scram") -> ClientSettings:
        """The client properties file of ``principal`` over ``method`` (a started secured node).

        Args:
            principal: ``admin`` (a super user), ``worker``, ``client`` or ``client2``.
            method: ``scram`` (SCRAM-SHA-512), ``scram-sha-256``, ``plain`` or ``mtls``.

        Returns:
            The file and the bootstrap address it names.

        Raises:
            BrokerError: Not a secured node's data dir, or an unknown principal or method.
        """
        return client_settings(SecureLayout(self.data_dir), principal, method)

    def _recorded(self) -> BrokerState | None:
        if self._state_file is not None:
            return read_state(self._state_file)
        return self._state

    def _ports(self) -> tuple[int, int]:
        if self._port:
            port, controller_port = _free_ports((self._port, 0))
            return port, controller_port
        previous = previous_ports(self._layout.properties)
        if previous is not None:
            # A restart keeps its address, so clients and exported TIDINGS_BOOTSTRAP still work.
            try:
                port, controller_port = _free_ports(previous)
                return port, controller_port
            except BrokerError:
                pass
        port, controller_port = _free_ports((0, 0))
        return port, controller_port

    def _secure_ports(self) -> SecurePorts:
        previous = previous_secure_ports(self._layout.properties)
        wanted = (self._port, 0, 0, 0) if self._port or previous is None else previous.as_tuple()
        try:
            return SecurePorts(*_free_ports(wanted))
        except BrokerError:
            if self._port or previous is None:
                raise
            return SecurePorts(*_free_ports((0, 0, 0, 0)))

    def _write_config(self, port: int, controller_port: int, extra: dict[str, str]) -> None:
        layout = self._layout
        layout.log_dirs.mkdir(parents=True, exist_ok=True)
        text = render_server_properties(
            port=port, controller_port=controller_port, log_dirs=layout.log_dirs, extra=extra
        )
        # 0600: a secured node's holds the PLAIN users' passwords.
        write_private(layout.properties, text.encode())
        layout.log4j2.write_text(render_log4j2_yaml(layout.server_log))

    def _java(self, java: str, libs: Path, main: str, *args: str) -> list[str]:
        return [
            java,
            f"-Dlog4j2.configurationFile={self._layout.log4j2}",
            "-cp",
            f"{libs}/*",
            main,
            *args,
        ]

    def _format(self, java: str, libs: Path, scram: list[str]) -> None:
        command = self._java(
            java,
            libs,
            "kafka.tools.StorageTool",
            "format",
            "--cluster-id",
            new_cluster_id(),
            "--config",
            str(self._layout.properties),
            "--ignore-formatted",
            *scram,
        )
        done = subprocess.run(
            command, stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            raise BrokerError(
                f"formatting {self._layout.log_dirs} failed (exit {done.returncode}):\n"
                f"{done.stdout}{done.stderr}".replace(" ".join(scram), "[the SCRAM credentials]")
            )

    def _launch(self, java: str, libs: Path) -> subprocess.Popen[bytes]:
        command = self._java(java, libs, "kafka.Kafka", str(self._layout.properties))
        command[1:1] = [f"-Xmx{self._heap}", *_JVM_FLAGS]
        with ExitStack() as stack:
            # Truncated per start, so a failure's tail is never an older run's output.
            console = stack.enter_context(self._layout.console_log.open("wb"))
            # A session of its own: Ctrl-C in the starting shell must not reach the broker,
            # and the broker outlives the `tidings broker start` process.
            return subprocess.Popen(
                command,
                cwd=self.data_dir,
                stdin=subprocess.DEVNULL,
                stdout=console,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def _await_ready(
        self, proc: subprocess.Popen[bytes], probe: KafkaConnection, port: int
    ) -> None:
        deadline = time.monotonic() + self._startup_timeout
        # Poll the TCP port first: librdkafka backs off up to 10 s after refused connections.
        while not _accepts(port):
            self._check(proc, deadline)
            time.sleep(0.1)
        # The probe takes none of the environment's Kafka properties (TIDINGS_KAFKA_*, which
        # may be another cluster's): only the broker's own (PLAINTEXT, or its admin's file).
        admin = probe.admin(log_level=0)
        while True:
            self._check(proc, deadline)
            remaining = max(0.5, min(2.0, deadline - time.monotonic()))
            try:
                if admin.list_topics(timeout=remaining).brokers:
                    return
            except KafkaException:
                pass

    def _check(self, proc: subprocess.Popen[bytes], deadline: float) -> None:
        if proc.poll() is not None or not is_alive(proc.pid):
            raise BrokerError(
                f"Kafka exited with code {proc.returncode} during startup.\n{self._logs()}"
            )
        if time.monotonic() > deadline:
            raise BrokerError(
                f"Kafka did not answer within {self._startup_timeout:.0f} s.\n{self._logs()}"
            )

    def _logs(self) -> str:
        layout = self._layout
        return (
            f"--- {layout.server_log} ---\n{log_tail(layout.server_log)}\n"
            f"--- {layout.console_log} ---\n{log_tail(layout.console_log)}"
        )


def _free_ports(wanted: tuple[int, ...]) -> tuple[int, ...]:
    # Hold every probe socket until both ports are known, so the two cannot collide.
    with ExitStack() as stack:
        found: list[int] = []
        for port in wanted:
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            # As the JVM does, so a port whose old connections linger in TIME_WAIT counts as free.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(("127.0.0.1", port))
            except OSError as exc:
                raise BrokerError(f"port {port} on 127.0.0.1 is not free: {exc}") from exc
            found.append(sock.getsockname()[1])
        return tuple(found)


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False
