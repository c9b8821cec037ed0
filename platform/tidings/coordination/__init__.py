"""Reactive coordinations and orchestrations over event streams (SPEC §8); pure Python.

A :class:`Coordination` is an immutable value: ``c(event)`` returns a :class:`Step` with the
results that event produced and the coordination for the next event (``None`` once finished).
Build them with the constructors (:func:`event`, :func:`retn`, :func:`empty`, :func:`zip`,
:func:`append`, :func:`both`), the operator methods (``map``, ``switch_map`` ...), or the
``@coordination`` builder. An :class:`Orchestration` also asks for actions when the stored
events run out; build it with :func:`orchestrate` and the ``@orchestration`` builder.

Nothing here imports Kafka, Faust or the shell. See docs/coordinations.md.
"""

from tidings.coordination.builder import coordination as coordination
from tidings.coordination.builder import emit as emit
from tidings.coordination.builder import emit_from as emit_from
from tidings.coordination.coordination import Coordination as Coordination
from tidings.coordination.coordination import append as append
from tidings.coordination.coordination import empty as empty
from tidings.coordination.coordination import event as event
from tidings.coordination.coordination import retn as retn
from tidings.coordination.debounce import elapsed as elapsed
from tidings.coordination.orchestration import Break as Break
from tidings.coordination.orchestration import Continue as Continue
from tidings.coordination.orchestration import Orchestration as Orchestration
from tidings.coordination.orchestration import orchestrate as orchestrate
from tidings.coordination.orchestration import orchestration as orchestration
from tidings.coordination.parallel import both as both
from tidings.coordination.parallel import zip as zip  # noqa: A004 - the SPEC's name
from tidings.coordination.step import Step as Step

__all__ = [
    "Break",
    "Continue",
    "Coordination",
    "Orchestration",
    "Step",
    "append",
    "both",
    "coordination",
    "elapsed",
    "emit",
    "emit_from",
    "empty",
    "event",
    "orchestrate",
    "orchestration",
    "retn",
    "zip",
]
