"""One answer of the agent, and the per-turn record it leaves when it is closed.

A :class:`Reply` is everything kept about one answer (spoken, text-only or a tool call): its ids,
the turn's timeline, the listener's heard clock, the tools it may use, the calls it made and the
engine that produced it.  Its owner, :class:`voiceagent.conversation.replies.ReplyController`, makes one per
generation that answers and drops it when the reply is done or its speculation is withdrawn;
nothing else keeps per-reply state in the session.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from voiceagent.config import Config
from voiceagent.conversation.history import AssistantItem, McpCallItem, new_id
from voiceagent.events import CallSummary, LlmUsage, ResponseStatus, ToolCallMade, ToolCallRejected
from voiceagent.observability.metrics import TurnTimeline
from voiceagent.playback import ListenerTimeline
from voiceagent.settings import InputItem, Tracing
from voiceagent.tools.spec import Tool

__all__ = ["AUDIBLE_EPS_MS", "Reply", "turn_record"]

AUDIBLE_EPS_MS = 1.0
"""Heard and sent audio are sums of different float terms: a finished reply may differ by 1e-12."""


@dataclass
class Reply:
    """One answer, from its generation's start (speculative or not) to its ``response.done``.

    ``released``: the turn is confirmed (or the client asked) and the reply is the response the
    client sees; before that its calls are ``held``.  ``done``: ``response.done`` was sent."""

    gen: int
    id: str = field(default_factory=lambda: new_id("resp"))
    item_id: str = field(default_factory=lambda: new_id("item"))
    timeline: TurnTimeline = field(default_factory=TurnTimeline)
    listener: ListenerTimeline = field(default_factory=ListenerTimeline)
    """The heard clock: what playout sent of this reply, and so what the listener heard when."""
    released: bool = False
    done: bool = False
    item: AssistantItem | None = None
    instructions: str | None = None
    llm_route: tuple[str, str] | None = None
    """(engine, reason): which LLM engine answered and why."""
    usage: LlmUsage | None = None
    tools: tuple[Tool, ...] | None = None
    """This reply's tools and choice (``response.create``); None: the session's."""
    tool_choice: str | None = None
    calls: list[CallSummary] = field(default_factory=list)
    held: list[ToolCallMade | ToolCallRejected] = field(default_factory=list)
    """Calls made before the reply was released (a speculative answer): sent at release."""
    audio: bool | None = None
    """This reply's output modality (``response.create``); None: the session's."""
    answer_after: bool = False
    """A built-in tool answered one of its calls: answer again with the result once it ends."""
    out_of_band: bool = False
    """``conversation: "none"``: neither its message nor its calls enter the history."""
    input: tuple[InputItem, ...] | None = None
    """What it reads instead of the conversation (``response.create``'s ``input``)."""
    metadata: dict[str, str] | None = None
    """The client's ``metadata``, carried back on ``response.created`` and ``response.done``."""
    max_tokens: int | None = None
    """This reply's ``max_output_tokens``; None: the session's."""
    mcp_calls: dict[str, tuple[asyncio.Task[None], McpCallItem, int]] = field(default_factory=dict)
    """Its MCP calls still running, by item id: the task, the item, the output index."""
    mcp_items: list[McpCallItem] = field(default_factory=list)
    """Every MCP call it made (``response.done`` lists them with their result)."""
    mcp_failed: list[str] = field(default_factory=list)
    """The MCP tools whose calls failed: the answer after them is an apology."""
    ended: tuple[ResponseStatus, str | None] | None = None
    """The generation ended while MCP calls still ran: the response ends with the last of them."""

    def audible(self, now: float) -> bool:
        """Whether the listener may still be hearing (or about to hear) this reply."""
        return not self.done or self.listener.heard_ms(now) < self.listener.sent_ms - AUDIBLE_EPS_MS


def turn_record(
    config: Config,
    session_id: str,
    voice: str | None,
    reply: Reply,
    status: ResponseStatus,
    reason: str | None,
    spans: dict[str, float],
    queue_ms: float | None,
    active: int,
    tracing: Tracing | None = None,
) -> dict[str, Any]:
    """The per-turn log line: what a dashboard or an incident needs, no transcript unless
    ``log_transcripts`` is on; the session's ``tracing`` labels (``session.tracing``) where set."""
    usage = reply.usage
    engine, route = reply.llm_route or (None, None)
    record: dict[str, Any] = {
        "event": "turn",
        "session": session_id,
        "response": reply.id,
        "generation": reply.gen,
        "status": status.value,
        "reason": reason,
        "spans_ms": spans,
        "sessions_active": active,
        "llm_queue_ms": queue_ms,
        "llm_engine": engine,
        "llm_route": route,
        "tokens": None
        if usage is None
        else {"prompt": usage.prompt_tokens, "reused": usage.reused_tokens, "generated": usage.generated_tokens},
        "tokens_per_s": round((usage.generated_tokens - 1) / usage.decode_s, 1)
        if usage is not None and usage.decode_s > 0 and usage.generated_tokens > 1
        else None,
        "models": {
            "vad": config.vad.model,
            "stt": config.stt.model,
            "turn": config.turn.model,
            "llm": (usage.model if usage is not None and usage.model else config.llm.model),
            "tts": voice or config.tts.model,
        },
        "audio_ms": round(reply.item.audio_ms, 1) if reply.item is not None else 0.0,
    }
    if tracing is not None:
        record["tracing"] = {
            "auto": tracing.auto,
            "workflow_name": tracing.workflow_name,
            "group_id": tracing.group_id,
            "metadata": dict(tracing.metadata),
        }
    if config.log_transcripts and reply.item is not None:
        record["text"] = reply.item.text
    return record
