"""``voiceagent talk --url``: the same conversation against a running server, over the OpenAI
Realtime protocol (24 kHz pcm16 both ways).

Barge-in: on ``input_audio_buffer.speech_started`` the speaker drops its queue at once and a
``conversation.item.truncate`` tells the server how much of the item was actually played, by the
speaker's own clock.  Server ``error`` events are printed and the conversation goes on; a server
that goes away ends it with a :class:`~voiceagent.errors.DeviceError`-style message.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI

from voiceagent.audio import PIPELINE_RATE, Int16Array, StreamResampler
from voiceagent.errors import VoiceAgentError
from voiceagent.talk.conversation import Conversation, TalkResult, feed_microphone
from voiceagent.talk.devices import Microphone
from voiceagent.transports import realtime_wire as wire
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
        first = json.loads(await ws.recv())
        if first.get("type") != "session.created":
            raise VoiceAgentError(f"{url} is not a Realtime endpoint (first event: {first.get('type')!r})")
        await ws.send(json.dumps(wire.session_update()))
        reader = asyncio.create_task(_read(ws, conv), name="talk.reader")
        up = StreamResampler(PIPELINE_RATE, WIRE_RATE, quality="LQ")

        async def send(pcm: Int16Array) -> None:
            out = up.process(pcm)
            if len(out):
                await ws.send(json.dumps(wire.append_audio(out)))

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


async def _read(ws: ClientConnection, conv: Conversation) -> None:
    async for raw in ws:
        await _apply(ws, conv, json.loads(raw))


async def _apply(ws: ClientConnection, conv: Conversation, msg: dict[str, Any]) -> None:
    kind = msg.get("type")
    if kind == "input_audio_buffer.speech_started":
        # Whatever is still playing was talked over (a finished response may still be audible).
        await _truncate(ws, conv, None)
        conv.user_speaking()
    elif kind == "conversation.item.input_audio_transcription.delta":
        conv.user_delta(msg["item_id"], msg.get("delta", ""))
    elif kind == "input_audio_buffer.speech_stopped":
        conv.user_stopped()
    elif kind == "conversation.item.input_audio_transcription.completed":
        conv.user_final(msg["item_id"], msg.get("transcript", ""))
    elif kind == "response.output_item.added":
        if msg["item"].get("type", "message") == "message":
            conv.response_started(msg["response_id"], msg["item"]["id"])
    elif kind == "response.function_call_arguments.done":
        conv.tool_call(msg["call_id"], msg.get("name", ""), msg.get("arguments", ""))
    elif kind == "conversation.item.done" and (msg.get("item") or {}).get("type") == "function_call_output":
        conv.tool_output(msg["item"]["call_id"], msg["item"].get("output", ""))
    elif kind in wire.TRANSCRIPT_DELTA:
        conv.agent_text(msg["item_id"], msg["delta"])
    elif (pcm := wire.audio_delta(msg)) is not None:
        conv.audio(msg["response_id"], msg["item_id"], pcm, WIRE_RATE)
    elif (done := wire.response_done(msg)) is not None:
        if done.status == "cancelled" and done.item_id:
            # Barge-in: the server cancels the response just before it reports speech_started.
            await _truncate(ws, conv, done.item_id)
        conv.response_done(done.response_id, done.item_id, done.status, done.transcript)
    elif kind == "voiceagent.turn_metrics":
        conv.metrics(msg["response_id"], msg.get("spans_ms") or {})
    elif kind == "error":
        err = msg.get("error", {})
        conv.error(f"{err.get('code')}: {err.get('message')}")


async def _truncate(ws: ClientConnection, conv: Conversation, item_id: str | None) -> None:
    for cut in conv.barge_in(item_id):
        await ws.send(json.dumps(wire.truncate(cut.item_id, cut.audio_end_ms)))
