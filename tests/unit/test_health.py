"""The worker's HTTP port: /livez, /readyz and /metrics; their states; hostile requests (issue 19).

No broker: ``Readiness`` and ``Liveness`` on a fake clock, and a real ``HealthServer`` on a
free loopback port spoken to with urllib and raw sockets.
"""

from __future__ import annotations

import json
import re
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from tidings.shell.runtime.health import MAX_CONNECTIONS, MAX_TARGET, HealthServer
from tidings.shell.runtime.liveness import Liveness
from tidings.shell.runtime.metrics import Metrics
from tidings.shell.runtime.readiness import Readiness, Verdict


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# -- readiness --------------------------------------------------------------------------


def test_readiness_is_false_until_the_group_assigns_and_says_what_the_worker_does() -> None:
    readiness = Readiness("bank")
    verdict = readiness.verdict()
    assert not verdict.ok and "not a member of group bank" in verdict.reason
    readiness.phase("waiting for Kafka at k:9092")
    assert readiness.verdict().reason.endswith("waiting for Kafka at k:9092")
    readiness.assigned([])  # more workers than partitions: a member holding nothing is ready
    assert readiness.verdict().ok


def test_readiness_waits_for_every_recovery_an_assignment_started() -> None:
    clock = Clock()
    readiness = Readiness("bank", clock=clock)
    partitions = [("bank.workflow.x.inbox", 0), ("bank.saga.y.inbox", 0)]
    readiness.assigned(partitions)
    workflow_done = readiness.recovering("workflow x")
    saga_done = readiness.recovering("saga y")
    clock.now += 7
    verdict = readiness.verdict()
    assert not verdict.ok
    assert verdict.reason == "recovering assigned partitions: workflow x (for 7 s), saga y (for 7 s)"
    assert verdict.details["recovering"] == {"workflow x": 7.0, "saga y": 7.0}
    workflow_done()
    workflow_done()  # twice is harmless
    assert readiness.verdict().reason == "recovering assigned partitions: saga y (for 7 s)"
    saga_done()
    verdict = readiness.verdict()
    assert verdict.ok and verdict.reason == "ready: 2 partitions assigned, all recovered"
    assert verdict.details == {"group": "bank", "member": True, "assigned": 2}


def test_readiness_follows_revocations_lost_sessions_and_the_stop() -> None:
    readiness = Readiness("bank")
    readiness.assigned([("t", 0), ("t", 1)])
    readiness.revoked([("t", 0)])
    assert readiness.verdict().details["assigned"] == 1
    readiness.lost()
    verdict = readiness.verdict()
    assert not verdict.ok and verdict.reason == "not a member of group bank yet: rejoining group bank"
    readiness.assigned([("t", 0)])
    assert readiness.verdict().ok
    readiness.stopping()
    assert readiness.verdict() == Verdict(False, "stopping", {"group": "bank", "member": True, "assigned": 2})


# -- liveness ---------------------------------------------------------------------------


def test_liveness_is_alive_while_starting_and_while_no_broker_answers() -> None:
    clock = Clock()
    liveness = Liveness(clock=clock)
    assert liveness.verdict() == Verdict(True, "alive (starting)", {})
    liveness.beat()
    liveness.observe(waiting=500, brokers_up=False)
    for _ in range(120):  # two minutes of outage with records waiting: not deafness
        clock.now += 1
        liveness.beat()
        liveness.health()
    verdict = liveness.verdict()
    assert verdict.ok and verdict.reason == "alive (no broker answers)"
    assert verdict.details["brokers_up"] is False and verdict.details["waiting"] == 500


def test_liveness_fails_when_deaf_and_recovers_with_progress() -> None:
    clock = Clock()
    liveness = Liveness(clock=clock, report_after_s=15)
    liveness.observe(waiting=3, brokers_up=True)
    liveness.health()
    clock.now += 14
    liveness.health()
    assert liveness.verdict().ok  # a batch in flight, not yet a stall
    clock.now += 2
    liveness.health(held=2)
    verdict = liveness.verdict()
    assert not verdict.ok
    assert verdict.reason == ("deaf: no progress for 16 s with 3 records waiting and 2 held while "
                              "the brokers answer")
    liveness.progressed()
    liveness.health()
    assert liveness.verdict().ok


def test_liveness_fails_when_the_event_loop_stops_beating() -> None:
    clock = Clock()
    liveness = Liveness(clock=clock, loop_silence_s=30)
    liveness.beat()
    clock.now += 29
    assert liveness.verdict().ok
    clock.now += 2
    verdict = liveness.verdict()
    assert not verdict.ok and verdict.reason == "the event loop has not run for 31 s"


# -- the HTTP port ----------------------------------------------------------------------


class Probes:
    def __init__(self) -> None:
        self.live = Verdict(True, "alive", {"waiting": 0})
        self.ready = Verdict(False, "recovering assigned partitions: workflow x (for 3 s)",
                             {"recovering": {"workflow x": 3.0}})
        self.fail = False

    def live_now(self) -> Verdict:
        if self.fail:
            raise RuntimeError("a probe failed")
        return self.live

    def ready_now(self) -> Verdict:
        return self.ready


@pytest.fixture
def served() -> Iterator[tuple[HealthServer, Probes]]:
    metrics = Metrics()
    metrics.transaction("aborted")
    probes = Probes()
    server = HealthServer(metrics.registry, live=probes.live_now, ready=probes.ready_now,
                          port=0, host="127.0.0.1")
    try:
        yield server, probes
    finally:
        server.close()


def get(port: int, path: str, *, method: str = "GET", accept: str | None = None) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method)
    if accept:
        request.add_header("Accept", accept)
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def raw(port: int, data: bytes, *, timeout: float = 5) -> bytes:
    """Send ``data`` as is, return everything the server answers until it closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def status_of(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1])


def test_metrics_livez_and_readyz_answer_with_their_status_and_reason(served: tuple[HealthServer, Probes]) -> None:
    server, probes = served
    status, headers, body = get(server.port, "/metrics")
    assert status == 200 and 'tidings_transactions_total{outcome="aborted"} 1.0' in body.decode()
    assert headers["Content-Type"].startswith("text/plain")
    assert get(server.port, "/livez")[::2] == (200, b"alive\n")
    assert get(server.port, "/readyz")[::2] == (503, b"recovering assigned partitions: workflow x (for 3 s)\n")
    assert get(server.port, "/readyz?verbose=1")[0] == 503  # a query string changes nothing
    probes.ready = Verdict(True, "ready: 4 partitions assigned, all recovered", {"assigned": 4})
    status, headers, body = get(server.port, "/readyz", accept="application/json")
    assert status == 200 and headers["Content-Type"] == "application/json"
    assert json.loads(body) == {"ok": True, "reason": "ready: 4 partitions assigned, all recovered",
                                "details": {"assigned": 4}}


def test_openmetrics_is_served_when_the_scraper_asks_for_it(served: tuple[HealthServer, Probes]) -> None:
    server, _ = served
    status, headers, body = get(server.port, "/metrics", accept="application/openmetrics-text; version=1.0.0")
    assert status == 200 and headers["Content-Type"].startswith("application/openmetrics-text")
    assert body.endswith(b"# EOF\n")


@pytest.mark.parametrize("path", ["/", "/health", "/healthz", "/ready", "/livez/", "/metrics/x",
                                  "/LIVEZ", "/%2e%2e/etc/passwd", "/readyz%00"])
def test_every_other_path_is_404(served: tuple[HealthServer, Probes], path: str) -> None:
    server, _ = served
    status, _, body = get(server.port, path)
    assert status == 404 and b"/metrics, /livez and /readyz" in body


def test_head_answers_the_status_and_headers_without_a_body(served: tuple[HealthServer, Probes]) -> None:
    server, _ = served
    answer = raw(server.port, b"HEAD /readyz HTTP/1.1\r\nHost: x\r\n\r\n")
    head, _, body = answer.partition(b"\r\n\r\n")
    assert status_of(answer) == 503 and body == b""
    length = int(next(line.split(b":")[1] for line in head.split(b"\r\n") if line.startswith(b"Content-Length")))
    assert length == len(b"recovering assigned partitions: workflow x (for 3 s)\n")
    assert get(server.port, "/nope", method="HEAD")[::2] == (404, b"")


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "CONNECT", "FOO",
                                    "G\x01T", "get"])
def test_any_method_but_get_and_head_is_405(served: tuple[HealthServer, Probes], method: str) -> None:
    server, _ = served
    answer = raw(server.port, f"{method} /livez HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n".encode("latin-1"))
    assert status_of(answer) == 405 and b"\r\nAllow: GET, HEAD\r\n" in answer


def test_long_targets_are_414_and_malformed_requests_400_and_the_server_goes_on(
    served: tuple[HealthServer, Probes],
) -> None:
    server, _ = served
    assert get(server.port, "/livez?" + "a" * MAX_TARGET)[0] == 414
    assert get(server.port, "/" + "x" * (MAX_TARGET + 1))[0] == 414
    assert status_of(raw(server.port, b"GET /" + b"x" * 70_000 + b" HTTP/1.1\r\n\r\n")) == 414
    assert status_of(raw(server.port, b"GET /livez HTTP/1.1\r\n" + b"X-A: b\r\n" * 150 + b"\r\n")) == 431
    assert status_of(raw(server.port, b"GET /livez HTTP/1.1\r\nX: " + b"y" * 70_000 + b"\r\n\r\n")) == 431
    for nonsense in (b"\r\n\r\n", b"GET\r\n\r\n", b"GET /livez HTTP/9.9\r\n\r\n", b"\x16\x03\x01\x02\x00\x01\x00\r\n\r\n",
                     b"GET /livez HTTP/1.1 extra\r\n\r\n", b"\xff\xfe\xfd /livez HTTP/1.1\r\n\r\n"):
        answer = raw(server.port, nonsense)
        if answer.startswith(b"HTTP/"):
            assert status_of(answer) in (400, 405, 505), (nonsense, answer[:80])
        else:  # refused before its version was read: answered the HTTP/0.9 way, no status line
            assert answer == b"" or re.search(rb"Error code: (400|505)", answer), (nonsense, answer[:80])
    assert get(server.port, "/livez")[0] == 200


def test_a_failing_probe_is_a_500_and_the_server_goes_on(served: tuple[HealthServer, Probes]) -> None:
    server, probes = served
    probes.fail = True
    assert get(server.port, "/livez")[::2] == (500, b"internal error\n")
    probes.fail = False
    assert get(server.port, "/livez")[0] == 200


def test_slow_and_idle_connections_do_not_keep_others_from_being_answered(
    served: tuple[HealthServer, Probes],
) -> None:
    server, _ = served
    idle = [socket.create_connection(("127.0.0.1", server.port), timeout=5) for _ in range(MAX_CONNECTIONS + 4)]
    try:
        idle[0].sendall(b"GET /liv")  # half a request, then nothing
        time.sleep(0.3)
        # Every slot is held by an idle connection: new ones are closed at once, not queued.
        answer = raw(server.port, b"GET /livez HTTP/1.1\r\n\r\n")
        assert answer == b""
    finally:
        for sock in idle:
            sock.close()
    deadline = time.monotonic() + 5
    while True:  # the slots come back as the server sees the closes
        try:
            assert get(server.port, "/livez")[0] == 200
            break
        except (AssertionError, OSError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def test_close_stops_serving() -> None:
    metrics = Metrics()
    server = HealthServer(metrics.registry, live=lambda: Verdict(True, "alive", {}),
                          ready=lambda: Verdict(True, "ready", {}), port=0, host="127.0.0.1")
    port = server.port
    assert get(port, "/livez")[0] == 200
    server.close()
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/livez", timeout=1)


def test_readiness_waits_for_each_of_overlapping_recoveries_of_one_definition() -> None:
    clock = Clock()
    readiness = Readiness("bank", clock=clock)
    readiness.assigned([("t", 0)])
    first = readiness.recovering("workflow x")
    clock.now += 5
    readiness.assigned([("t", 1)])  # a second assignment while the first recovery runs
    second = readiness.recovering("workflow x")
    clock.now += 1
    assert readiness.verdict().reason == "recovering assigned partitions: workflow x (for 6 s)"
    first()
    assert readiness.verdict().reason == "recovering assigned partitions: workflow x (for 1 s)"
    second()
    assert readiness.verdict().ok
