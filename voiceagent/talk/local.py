"""``voiceagent talk`` in one process: microphone → :class:`~voiceagent.session.Session` → speaker.

Barge-in: when the session reports :class:`~voiceagent.events.PlaybackCleared`, the speaker drops
its queue at once and the session's assistant item is truncated to what the speaker's own clock
says was played (the session's estimate is replaced by the device's figure; ``truncate`` only
ever cuts further).
"""

from __future__ import annotations

import asyncio
import contextlib

from voiceagent.conversation.history import AssistantItem
from voiceagent.errors import ProtocolError
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
from voiceagent.session import Session
from voiceagent.talk.conversation import Conversation, TalkResult, feed_microphone
from voiceagent.talk.devices import Microphone

__all__ = ["talk_local"]


async def talk_local(session: Session, mic: Microphone, conv: Conversation, *, max_tail_s: float = 90.0) -> TalkResult:
    """Converse until the microphone is exhausted and the conversation idle (or for ever, live).

    ``session`` must be started; it is closed when the talk ends (its history stays readable).
    ``max_tail_s`` bounds the wait for the agent after a file input has ended.
    """
    reader = asyncio.create_task(_consume(session, conv), name="talk.events")
    try:
        await feed_microphone(mic, conv, session.append_audio, reader, max_tail_s)
    finally:
        await session.aclose()  # ends session.events(), so the reader finishes
        with contextlib.suppress(asyncio.CancelledError):
            await reader
    return conv.result


async def _consume(session: Session, conv: Conversation) -> None:
    async for ev in session.events():
        await _apply(session, conv, ev)


async def _apply(session: Session, conv: Conversation, ev: Event) -> None:
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
        for cut in conv.barge_in(ev.item_id):
            with contextlib.suppress(ProtocolError):  # the item may be gone from the history
                await session.truncate(cut.item_id, cut.audio_end_ms)
    elif isinstance(ev, ResponseDone):
        # The event's text predates our own truncate (which the history has applied): show the history's.
        item = session.history.find(ev.item_id)
        conv.response_done(ev.response_id, ev.item_id, ev.status.value, item.text if isinstance(item, AssistantItem) else ev.text)
    elif isinstance(ev, FunctionCallAdded):
        conv.tool_call(ev.call_id, ev.name, ev.arguments)
    elif isinstance(ev, ToolOutputAdded):
        conv.tool_output(ev.call_id, ev.output)
    elif isinstance(ev, TurnMetrics):
        conv.metrics(ev.response_id, ev.spans)
    elif isinstance(ev, ErrorEvent):
        conv.error(f"{ev.code}: {ev.message}")
