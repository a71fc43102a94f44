"""One path from a conversation's events to :class:`~voiceagent.talk.conversation.Conversation`,
whoever runs the agent.

The in-process driver (:mod:`voiceagent.talk.local`) hands over the events of its
:class:`~voiceagent.session.Session`; the WebSocket driver (:mod:`voiceagent.talk.remote`) the
same types, read off the wire by :class:`voiceagent.client.RealtimeClient`.  What differs is
given as two ports: ``truncate`` (tell the agent how much of an item the listener heard) and
``reply_text`` (the text a finished response keeps).

Barge-in: on :class:`~voiceagent.events.PlaybackCleared` the speaker drops its queue at once and
each item cut is truncated to what the speaker's own clock says was played.  In process the
session sends it for the item it interrupted; over the wire the client core derives it from
``speech_started`` (``item_id`` ``''``: whatever still plays was talked over, a finished response
included) and from a cancelled ``response.done``.

Cancellation: propagates from the ``truncate`` port; the cuts of a barge-in are in the talk's
result before the first is sent (:meth:`Conversation.barge_in` records them).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from voiceagent.client import MalformedEvent
from voiceagent.events import (
    AudioDelta,
    ErrorEvent,
    Event,
    FunctionCallAdded,
    InputSpeechStarted,
    InputSpeechStopped,
    InputTranscriptDelta,
    InputTranscriptDone,
    OutputTranscriptDelta,
    PlaybackCleared,
    ResponseCreated,
    ResponseDone,
    ToolOutputAdded,
    TurnMetrics,
)
from voiceagent.talk.conversation import Conversation

__all__ = ["TalkEvents"]


def _said(ev: ResponseDone) -> str:
    return ev.text


class TalkEvents:
    """Applies events to ``conv``; see the module docstring.  Events of other types are ignored."""

    def __init__(
        self,
        conv: Conversation,
        truncate: Callable[[str, float], Awaitable[None]],
        *,
        reply_text: Callable[[ResponseDone], str] = _said,
    ) -> None:
        self.conv = conv
        self._truncate = truncate
        self._reply_text = reply_text

    async def apply(self, ev: Event) -> None:
        conv = self.conv
        if isinstance(ev, InputSpeechStarted):
            conv.user_speaking()
        elif isinstance(ev, InputTranscriptDelta):
            conv.user_speaking(ev.text)
        elif isinstance(ev, InputSpeechStopped):
            conv.user_stopped()
        elif isinstance(ev, InputTranscriptDone):
            conv.user_final(ev.item_id, ev.text)
        elif isinstance(ev, ResponseCreated):
            conv.response_started(ev.response_id, ev.item_id)
        elif isinstance(ev, OutputTranscriptDelta):
            conv.agent_text(ev.item_id, ev.text)
        elif isinstance(ev, AudioDelta):
            conv.audio(ev.response_id, ev.item_id, ev.pcm, ev.rate)
        elif isinstance(ev, PlaybackCleared):
            for cut in conv.barge_in(ev.item_id or None):
                await self._truncate(cut.item_id, cut.audio_end_ms)
        elif isinstance(ev, ResponseDone):
            conv.response_done(ev.response_id, ev.item_id, ev.status.value, self._reply_text(ev))
        elif isinstance(ev, FunctionCallAdded):
            conv.tool_call(ev.call_id, ev.name, ev.arguments)
        elif isinstance(ev, ToolOutputAdded):
            conv.tool_output(ev.call_id, ev.output)
        elif isinstance(ev, TurnMetrics):
            conv.metrics(ev.response_id, ev.spans)
        elif isinstance(ev, ErrorEvent):
            conv.error(f"{ev.code}: {ev.message}")
        elif isinstance(ev, MalformedEvent):
            conv.error(f"unreadable server event{' ' + ev.type if ev.type else ''}: {ev.problem}")
