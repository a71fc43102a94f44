"""``voiceagent talk`` in one process: microphone → :class:`~voiceagent.session.Session` → speaker.

The session's events are applied by :class:`~voiceagent.talk.handler.TalkEvents`, the path the
talk over the wire takes too.  Barge-in: when the session reports
:class:`~voiceagent.events.PlaybackCleared`, the speaker drops its queue at once and the session's
assistant item is truncated to what the speaker's own clock says was played (the session's
estimate is replaced by the device's figure; ``truncate`` only ever cuts further).
"""

from __future__ import annotations

import asyncio
import contextlib

from voiceagent.conversation.history import AssistantItem
from voiceagent.errors import ProtocolError
from voiceagent.events import ResponseDone
from voiceagent.session import Session
from voiceagent.talk.conversation import Conversation, TalkResult, feed_microphone
from voiceagent.talk.devices import Microphone
from voiceagent.talk.handler import TalkEvents

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
    async def truncate(item_id: str, audio_end_ms: float) -> None:
        with contextlib.suppress(ProtocolError):  # the item may be gone from the history
            await session.truncate(item_id, audio_end_ms)

    def reply_text(ev: ResponseDone) -> str:
        # The event's text predates our own truncate (which the history has applied): show the history's.
        item = session.history.find(ev.item_id)
        return item.text if isinstance(item, AssistantItem) else ev.text

    handler = TalkEvents(conv, truncate, reply_text=reply_text)
    async for ev in session.events():
        await handler.apply(ev)
