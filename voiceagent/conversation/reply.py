"""One answer of the agent: its options, its state and what it leaves behind.

A :class:`Reply` is everything kept about one answer (spoken, text-only or a tool call): its ids,
the turn's timeline, the listener's heard clock, the options it was asked with, the calls it made
and the engine that produced it.  Its owner, :class:`~voiceagent.conversation.core.ConversationCore`,
makes one per generation that answers and drops it when the reply is done or its speculation is
withdrawn; nothing else keeps per-reply state in the session.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from voiceagent.conversation.history import AssistantItem, McpCallItem, new_id
from voiceagent.events import (
    CallSummary,
    LlmUsage,
    ReleaseReply,
    ResponseCreated,
    ResponseDone,
    ResponseStatus,
    ToolCallMade,
    ToolCallRejected,
)
from voiceagent.observability.metrics import TurnTimeline
from voiceagent.playback import ListenerTimeline
from voiceagent.settings import InputItem, SessionSettings
from voiceagent.tools.spec import Tool

__all__ = ["AUDIBLE_EPS_MS", "Reply", "ReplyState", "ResponseOptions"]

AUDIBLE_EPS_MS = 1.0
"""Heard and sent audio are sums of different float terms: a finished reply may differ by 1e-12."""


class ReplyState(enum.Enum):
    """Where a reply is in its life; it only moves forward."""

    PENDING = "pending"
    """Made for a generation (a speculative answer, stage notes) but not yet the client's response."""
    RELEASED = "released"
    """The response the client sees: generated, spoken, heard."""
    ENDING = "ending"
    """Its generation ended while MCP calls still run: it ends with the last of them."""
    DONE = "done"
    """``response.done`` was sent."""


@dataclass(frozen=True)
class ResponseOptions:
    """What a response was asked with (``response.create``); None: the session's."""

    instructions: str | None = None
    tools: tuple[Tool, ...] | None = None
    tool_choice: str | None = None
    audio: bool | None = None
    """Its output modality; False: text only."""
    out_of_band: bool = False
    """``conversation: "none"``: neither its message nor its calls enter the history."""
    input: tuple[InputItem, ...] | None = None
    """What it reads instead of the conversation."""
    metadata: dict[str, str] | None = None
    """Carried back on ``response.created`` and ``response.done``."""
    max_tokens: int | None = None
    say: str | None = None
    """Speak these words as they are, asking no model (a message left on an answering machine):
    the reply is this text, split into clauses for the voice."""
    closing: str | None = None
    """A system message after the conversation: what this response is to do now.  Where the
    prompt ends with the agent's own last answer, the 0.5B model reads a task placed at the end of
    the instructions as a request to refuse; placed last, it does it."""

    def client_tools(self, settings: SessionSettings) -> tuple[Tool, ...]:
        """The client's tools for this response: its own, else the session's."""
        return self.tools if self.tools is not None else settings.tools


@dataclass
class Reply:
    """One answer, from its generation's start (speculative or not) to its ``response.done``."""

    gen: int
    options: ResponseOptions = field(default_factory=ResponseOptions)
    id: str = field(default_factory=lambda: new_id("resp"))
    item_id: str = field(default_factory=lambda: new_id("item"))
    state: ReplyState = ReplyState.PENDING
    timeline: TurnTimeline = field(default_factory=TurnTimeline)
    listener: ListenerTimeline = field(default_factory=ListenerTimeline)
    """The heard clock: what playout sent of this reply, and so what the listener heard when."""
    item: AssistantItem | None = None
    llm_route: tuple[str, str] | None = None
    """(engine, reason): which LLM engine answered and why."""
    usage: LlmUsage | None = None
    calls: list[CallSummary] = field(default_factory=list)
    held: list[ToolCallMade | ToolCallRejected] = field(default_factory=list)
    """Calls made before the reply was released (a speculative answer): sent at release."""
    answer_after: bool = False
    """A built-in or MCP tool answered one of its calls: answer again with the result once it ends."""
    mcp_running: dict[str, int] = field(default_factory=dict)
    """Its MCP calls still running: item id → output index."""
    mcp_items: list[McpCallItem] = field(default_factory=list)
    """Every MCP call it made (``response.done`` lists them with their result)."""
    mcp_failed: list[str] = field(default_factory=list)
    """The MCP tools whose calls failed: the answer after them is an apology."""
    ended: tuple[ResponseStatus, str | None] | None = None
    """How its generation ended (state ENDING): the status it ends with after its last MCP call."""

    @property
    def released(self) -> bool:
        return self.state is not ReplyState.PENDING

    @property
    def done(self) -> bool:
        return self.state is ReplyState.DONE

    def audible(self, now: float) -> bool:
        """Whether the listener may still be hearing (or about to hear) this reply."""
        return not self.done or self.listener.heard_ms(now) < self.listener.sent_ms - AUDIBLE_EPS_MS

    def created(self, session: str, t: float, previous_item_id: str | None, *, audio: bool) -> ResponseCreated:
        """Its ``response.created``; ``audio``: whether it is spoken."""
        return ResponseCreated(
            t=t,
            gen=self.gen,
            session=session,
            response_id=self.id,
            item_id=self.item_id,
            previous_item_id=previous_item_id,
            audio=audio,
            in_conversation=not self.options.out_of_band,
            metadata=self.options.metadata,
        )

    def release(self, session: str, t: float) -> ReleaseReply:
        """What lets playout play it: its ids and its heard clock."""
        return ReleaseReply(t=t, gen=self.gen, session=session, response_id=self.id, item_id=self.item_id, listener=self.listener)

    def done_event(
        self, session: str, t: float, status: ResponseStatus, reason: str | None, calls: tuple[CallSummary, ...]
    ) -> ResponseDone:
        """Its ``response.done``: how it ended, what it said and the ``calls`` it made."""
        item = self.item
        return ResponseDone(
            t=t,
            gen=self.gen,
            session=session,
            response_id=self.id,
            item_id=self.item_id,
            status=status,
            text=item.text if item else "",
            reason=reason,
            audio_ms=item.audio_ms if item else 0.0,
            calls=calls,
            metadata=self.options.metadata,
        )
