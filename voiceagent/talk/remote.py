"""``voiceagent talk --url``: the same conversation against a running server, over the OpenAI
Realtime protocol (24 kHz pcm16 both ways).

The server's messages are read by :class:`voiceagent.client.RealtimeClient` into the session's own
events and applied by :class:`~voiceagent.talk.handler.TalkEvents`, the path the in-process talk
takes too.  Barge-in: on ``input_audio_buffer.speech_started`` (and a cancelled response) the
speaker drops its queue at once and a ``conversation.item.truncate`` tells the server how much of
the item was actually played, by the speaker's own clock.  Server ``error`` events are printed
and the conversation goes on; a server that goes away ends it with a
:class:`~voiceagent.errors.DeviceError`-style message.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI

from voiceagent.audio import PIPELINE_RATE, Int16Array, StreamResampler
from voiceagent.client import RealtimeClient, SessionEvent, messages
from voiceagent.errors import VoiceAgentError
from voiceagent.talk.conversation import Conversation, TalkResult, feed_microphone
from voiceagent.talk.devices import Microphone
from voiceagent.talk.handler import TalkEvents
from voiceagent.transports.realtime_wire import WIRE_RATE

__all__ = ["WIRE_RATE", "talk_remote"]


async def talk_remote(url: str, mic: Microphone, conv: Conversation, *, max_tail_s: float = 90.0) -> TalkResult:
    """Converse with the server at ``url`` until the microphone is exhausted and the talk idle."""
    if "voiceagent_metrics=" not in url:  # ask a voiceagent server for its per-turn timeline
        url += ("&" if "?" in url else "?") + "voiceagent_metrics=1"
    try:
        ws = await connect(url, max_size=None, open_timeout=10)
    except (OSError, InvalidHandshake, InvalidURI, TimeoutError) as exc:
        raise VoiceAgentError(f"cannot connect to {url}: {exc}") from None
    async with ws:
        client = RealtimeClient()
        first = client.feed(await ws.recv(), time.monotonic())
        if not (isinstance(first[0], SessionEvent) and first[0].type == "session.created"):
            kind = getattr(first[0], "type", None) or type(first[0]).__name__
            raise VoiceAgentError(f"{url} is not a Realtime endpoint (first event: {kind!r})")
        await ws.send(json.dumps(messages.session_update()))
        reader = asyncio.create_task(_read(ws, client, conv), name="talk.reader")
        up = StreamResampler(PIPELINE_RATE, WIRE_RATE, quality="LQ")

        async def send(pcm: Int16Array) -> None:
            out = up.process(pcm)
            if len(out):
                await ws.send(json.dumps(messages.append_audio(out)))

        try:
            await feed_microphone(mic, conv, send, reader, max_tail_s)
        except ConnectionClosed:
            pass
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, ConnectionClosed):
                await reader
        if ws.close_code not in (None, 1000) and not conv.result.errors:
            conv.error(f"the server closed the connection (code {ws.close_code}: {ws.close_reason})")
    return conv.result


async def _read(ws: ClientConnection, client: RealtimeClient, conv: Conversation) -> None:
    async def truncate(item_id: str, audio_end_ms: float) -> None:
        await ws.send(json.dumps(messages.truncate(item_id, audio_end_ms)))

    handler = TalkEvents(conv, truncate)
    async for raw in ws:
        for ev in client.feed(raw, time.monotonic()):
            await handler.apply(ev)
