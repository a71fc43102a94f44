"""Safe tools the server runs itself (``tools.builtin``): the time and date, and timers.

They prove the tool loop end to end without a client-side tool runner (``voiceagent talk``, or
``serve --tools`` for any client).  Each is pure and instant; none reads files, the network or
the environment beyond the local clock.  A timer does not run here: :meth:`BuiltinTools.run`
returns when it is due and the session schedules the reminder on its own clock.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from dataclasses import dataclass

from voiceagent.tools.spec import Tool

__all__ = ["MAX_TIMER_S", "BuiltinTools", "TimerRequest", "builtin_tools"]

MAX_TIMER_S = 24 * 3600

GET_TIME = Tool(
    "get_time",
    "Get the current local time and date.",
    # No arguments, and none accepted: a small model sometimes writes the schema itself as the
    # arguments, and a call that shows junk in the history draws more junk in the answer; with
    # extra keys refused, the call is asked for again under the schema's grammar ({}).
    {"type": "object", "properties": {}, "additionalProperties": False},
)
SET_TIMER = Tool(
    "set_timer",
    "Start a timer or reminder; the assistant speaks up when it is due.",
    {
        "type": "object",
        "properties": {
            "seconds": {"type": "integer", "description": "How many seconds from now", "minimum": 1, "maximum": MAX_TIMER_S},
            "label": {"type": "string", "description": "What the reminder is about"},
        },
        "required": ["seconds"],
        "additionalProperties": False,
    },
)


def builtin_tools() -> tuple[Tool, ...]:
    return (GET_TIME, SET_TIMER)


@dataclass(frozen=True, slots=True)
class TimerRequest:
    seconds: int
    label: str


class BuiltinTools:
    """Runs the built-in tools; ``now`` gives the local wall-clock time (injected for tests)."""

    def __init__(self, now: Callable[[], dt.datetime] | None = None) -> None:
        self._now = now or (lambda: dt.datetime.now().astimezone())
        self.tools = builtin_tools()

    def handles(self, name: str) -> bool:
        return any(t.name == name for t in self.tools)

    def offered_with(self, client_tools: tuple[Tool, ...]) -> tuple[Tool, ...]:
        """``client_tools`` and the built-ins whose names the client does not use: a client's own
        tool always wins over a built-in of the same name."""
        return (*client_tools, *(t for t in self.tools if all(c.name != t.name for c in client_tools)))

    def call(self, name: str, arguments: str) -> tuple[str, TimerRequest | None]:
        """:meth:`run`, with a failure given back to the model as its output (a JSON ``error``)
        rather than raised: the conversation goes on and the model can say what went wrong."""
        try:
            return self.run(name, arguments)
        except (KeyError, ValueError, TypeError) as exc:
            return json.dumps({"error": f"{type(exc).__name__}: {exc}"}), None

    def run(self, name: str, arguments: str) -> tuple[str, TimerRequest | None]:
        """The output of tool ``name`` called with checked ``arguments``, and the timer to
        schedule, if it set one.  Outputs are one plain sentence, not JSON: a small model reads a
        sentence back to the listener, where it would recite JSON."""
        args = json.loads(arguments) if arguments.strip() else {}
        if name == GET_TIME.name:
            now = self._now()
            hour = now.hour % 12 or 12
            clock = f"{hour}:{now.minute:02d} {'AM' if now.hour < 12 else 'PM'}"
            return f"It is {clock} on {now:%A}, {now:%B} {now.day}, {now.year} ({now.tzname() or 'local time'}).", None
        if name == SET_TIMER.name:
            seconds = int(args["seconds"])
            label = str(args.get("label") or "timer")
            return f"The timer is set: {label}, in {seconds} seconds.", TimerRequest(seconds, label)
        raise KeyError(name)
