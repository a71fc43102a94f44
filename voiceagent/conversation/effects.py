"""What the conversation core is told besides stage events, and what it asks the world to do.

The core (:class:`~voiceagent.conversation.core.ConversationCore`) is sans I/O: each input
returns a list of effects, in the order they must happen; its shell
(:class:`~voiceagent.conversation.replies.ReplyController`) carries them out, one after the
other, and feeds back what their tasks observe (an MCP result, a timer or idle timeout due).
"""

from __future__ import annotations

from dataclasses import dataclass

from voiceagent.conversation.history import McpCallItem
from voiceagent.conversation.reply import Reply
from voiceagent.events import Event, ReleaseReply, ResponseStatus, TurnConfirmed, UserTurn
from voiceagent.tools.builtin import TimerRequest
from voiceagent.tools.mcp import McpTool

__all__ = [
    "ArmIdle",
    "ArmResume",
    "CancelMcpCalls",
    "Completed",
    "CountBargeIn",
    "DisarmIdle",
    "PausePlayout",
    "Effect",
    "Emit",
    "FirstAudio",
    "Prefill",
    "Release",
    "Report",
    "ResumePlayout",
    "RunMcpCall",
    "Sink",
    "StartAnswer",
    "StartTimer",
    "TurnEnded",
]

# ---------------------------------------------------------------------------- inputs


@dataclass(frozen=True)
class TurnEnded:
    """The turn stage confirmed a turn; ``speech_end_t`` is when its last audio arrived (the
    session's clock), where the turn's latency is counted from."""

    turn: TurnConfirmed
    speech_end_t: float


# ---------------------------------------------------------------------------- effects


@dataclass(frozen=True)
class Emit:
    """Send ``event`` to the client."""

    event: Event


@dataclass(frozen=True)
class StartAnswer:
    """Put ``turn`` into the LLM stage's inbox: generate the answer (``response.create``)."""

    turn: UserTurn


@dataclass(frozen=True)
class Release:
    """Put ``release`` into the playout stage's inbox: the reply's audio may be heard."""

    release: ReleaseReply


@dataclass(frozen=True)
class Prefill:
    """A partial transcript of the user's speech: the LLM stage may prefill its prompt."""

    text: str


@dataclass(frozen=True)
class ArmIdle:
    """Feed :meth:`~voiceagent.conversation.core.ConversationCore.idle_due` ``token`` at
    ``deadline`` (the session's clock), unless disarmed or re-armed first."""

    token: int
    deadline: float


@dataclass(frozen=True)
class DisarmIdle:
    """Forget the idle timeout armed before (it will not be fed)."""


@dataclass(frozen=True)
class RunMcpCall:
    """Call ``tool`` with ``arguments`` for item ``item`` and feed the result back
    (:meth:`~voiceagent.conversation.core.ConversationCore.mcp_call_ended`)."""

    item: McpCallItem
    tool: McpTool
    arguments: dict[str, object]


@dataclass(frozen=True)
class CancelMcpCalls:
    """Cancel the MCP calls of these items and wait for them: their ends are already told."""

    item_ids: tuple[str, ...]


@dataclass(frozen=True)
class StartTimer:
    """Feed :meth:`~voiceagent.conversation.core.ConversationCore.timer_due` when ``timer`` is due."""

    timer: TimerRequest


@dataclass(frozen=True)
class Report:
    """A reply ended: metrics, the client's turn metrics, the turn's log line and trace."""

    reply: Reply
    status: ResponseStatus
    reason: str | None
    t: float


@dataclass(frozen=True)
class Completed:
    """Generation ``gen`` was heard to its end (the semantic cache stores only those)."""

    gen: int


@dataclass(frozen=True)
class FirstAudio:
    """Generation ``gen``'s first audio went to the client: the turn's critical path (final
    transcript, first clause, its voice) is spent.  ``latency_ms``: from the end of the user's
    speech (None for a reply that answers no speech)."""

    gen: int
    latency_ms: float | None


@dataclass(frozen=True)
class CountBargeIn:
    """A reply the listener was hearing was cut."""


@dataclass(frozen=True)
class PausePlayout:
    """Send no more of generation ``gen``'s audio until :class:`ResumePlayout`: the user speaks
    over it and whether that is an interruption is not decided yet."""

    gen: int


@dataclass(frozen=True)
class ResumePlayout:
    """Playout goes on (generation ``gen`` was paused); ``resumed``: True when the reply goes on
    where it paused (a false interruption), False when the pause ends because the reply was cut."""

    gen: int
    resumed: bool


@dataclass(frozen=True)
class ArmResume:
    """Feed :meth:`~voiceagent.conversation.core.ConversationCore.resume_due` ``token`` at
    ``deadline`` (the session's clock); a token re-armed or decided since is stale."""

    token: int
    deadline: float


Effect = (
    Emit
    | StartAnswer
    | Release
    | Prefill
    | ArmIdle
    | DisarmIdle
    | RunMcpCall
    | CancelMcpCalls
    | StartTimer
    | Report
    | Completed
    | FirstAudio
    | CountBargeIn
    | PausePlayout
    | ResumePlayout
    | ArmResume
)


class Sink:
    """Where the effects of one input collect, in order (the core's and its helpers' alike)."""

    def __init__(self) -> None:
        self._items: list[Effect] = []

    def add(self, effect: Effect) -> None:
        self._items.append(effect)

    def emit(self, event: Event) -> None:
        self._items.append(Emit(event))

    def take(self) -> list[Effect]:
        """The effects collected since the last take, which starts a new list."""
        items, self._items = self._items, []
        return items
