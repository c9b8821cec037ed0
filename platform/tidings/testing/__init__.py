"""The public test kit: what tidings' own tests use, for users' tests too.

- ``assert_eventually`` / ``assert_eventually_async``: poll instead of sleeping.
- ``WorkerProcess``: run ``tidings worker MODULE:APP`` as a child, SIGKILL and restart it.
- ``read_topic`` / ``group_assignment``: read a topic back; see a group's assignment.
- ``FakeClock`` / ``WorkflowTestRuntime``: run workflows in memory, without Kafka.
- ``AppTestRuntime``: an App's workflows, aggregates, sagas and projections in memory.
- ``replay``: would the code now park running instances? (``tidings replay``, a deploy check)

``tidings.testing.pytest_plugin`` offers them as pytest fixtures, with a session broker and an
App of each test's own (docs/testing.md).
"""

from .app_runtime import AppTestRuntime as AppTestRuntime
from .eventually import assert_eventually as assert_eventually
from .eventually import assert_eventually_async as assert_eventually_async
from .processes import WorkerProcess as WorkerProcess
from .replaying import ReplayReport as ReplayReport
from .replaying import replay as replay
from .topics import group_assignment as group_assignment
from .topics import read_topic as read_topic
from .workflows import FakeClock as FakeClock
from .workflows import WorkflowTestRuntime as WorkflowTestRuntime

__all__ = [
    "AppTestRuntime",
    "FakeClock",
    "ReplayReport",
    "WorkerProcess",
    "WorkflowTestRuntime",
    "assert_eventually",
    "assert_eventually_async",
    "group_assignment",
    "read_topic",
    "replay",
]
