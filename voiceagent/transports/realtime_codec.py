"""The OpenAI Realtime protocol (GA event names) for one connection: client text in → commands,
session events → server messages.

No sockets and no event loop.  Its jobs live in their own modules and meet here:
validation (:mod:`~voiceagent.transports.realtime_commands`), the settings mirror
(:mod:`~voiceagent.transports.realtime_settings`), audio formats and resampling
(:mod:`~voiceagent.transports.realtime_audio`) and the wire's shapes
(:mod:`~voiceagent.transports.realtime_wire`, shared with the project's clients); this module
renders session events, keeping per response only what rendering needs until its
``response.done``.
"""

from __future__ import annotations

import base64
from typing import Any

from voiceagent.conversation.history import Item
from voiceagent.errors import MAX_MESSAGE_CHARS, ProtocolError, bounded
from voiceagent.events import (
    AudioDelta,
    CallSummary,
    ErrorEvent,
    Event,
    FunctionCallAdded,
    InputCleared,
    InputCommitted,
    InputSpeechStarted,
    InputSpeechStopped,
    InputTimeoutTriggered,
    InputTranscriptDelta,
    InputTranscriptDone,
    InputTranscriptFailed,
    ItemsDropped,
    ItemTruncated,
    McpCallAdded,
    McpCallDone,
    McpToolsListed,
    OutputTranscriptDelta,
    PlaybackCleared,
    ResponseCreated,
    ResponseDone,
    ResponseStatus,
    TextItemAdded,
    ToolOutputAdded,
    TurnMetrics,
)
from voiceagent.settings import SessionSettings
from voiceagent.transports.realtime_audio import WireAudio
from voiceagent.transports.realtime_commands import Command, CommandDecoder
from voiceagent.transports.realtime_mcp import encode_mcp, summary_object
from voiceagent.transports.realtime_settings import session_object
from voiceagent.transports.realtime_wire import AUDIO_DELTA, call_object, item_object, message, output_object

__all__ = ["RealtimeCodec", "rate_limits"]


def rate_limits(settings: SessionSettings) -> list[dict[str, Any]]:
    """What ``rate_limits.updated`` says after each response: the limits this server really has.

    It keeps no quota over time (nothing accrues, nothing resets), so both are per-response
    limits, and once a response is done all of each remains: ``requests``, one response at a
    time in a conversation (a second ``response.create`` while one is active is refused);
    ``tokens``, the session's ``max_output_tokens`` per response."""
    return [
        {"name": "requests", "limit": 1, "remaining": 1, "reset_seconds": 0.0},
        {"name": "tokens", "limit": settings.max_output_tokens, "remaining": settings.max_output_tokens, "reset_seconds": 0.0},
    ]


class RealtimeCodec:
    """Per-connection protocol state: the settings mirror, audio formats and resamplers, and
    transcript delta bookkeeping."""

    def __init__(self, settings: SessionSettings, voice_rate: int, *, send_metrics: bool = False) -> None:
        self.audio = WireAudio(voice_rate)
        self._decoder = CommandDecoder(settings, self.audio)
        self.send_metrics = send_metrics
        self._text_only: set[str] = set()  # response ids of text-only responses in progress
        self._out_of_band: set[str] = set()  # response ids of out-of-band responses in progress
        self._partials: dict[str, str] = {}
        self._streaming: set[str] = set()  # responses whose audio started and has not stopped nor been cleared

    @property
    def settings(self) -> SessionSettings:
        """The session's settings as the client knows them (validation reads them too)."""
        return self._decoder.settings

    @settings.setter
    def settings(self, value: SessionSettings) -> None:
        self._decoder.settings = value

    def pending(self) -> dict[str, int]:
        """Per-response state held now (for tests and diagnostics)."""
        return {
            "audio_streams": len(self.audio.open_responses()),
            "text_only": len(self._text_only),
            "out_of_band": len(self._out_of_band),
            "partials": len(self._partials),
            "streaming": len(self._streaming),
        }

    # ------------------------------------------------------------------ client → server

    def decode(self, text: str) -> Command:
        """One client text frame as a command; :class:`ProtocolError` when it is not valid."""
        return self._decoder.decode(text)

    # ------------------------------------------------------------------ server → client

    def session_object(self) -> dict[str, Any]:
        """The ``session`` object the client sees now (settings and audio formats)."""
        return session_object(self.settings, self.audio)

    def session_message(self, kind: str, session_id: str) -> dict[str, Any]:
        """``session.created`` / ``session.updated``."""
        return message(kind, session=session_object(self.settings, self.audio, session_id))

    def error(self, exc: ProtocolError) -> dict[str, Any]:
        return message(
            "error",
            error={"type": "invalid_request_error", "code": exc.code, "message": exc.message, "param": exc.param, "event_id": exc.event_id},
        )

    def item_deleted(self, item_id: str, event_id: str | None) -> dict[str, Any]:
        """The answer to ``conversation.item.delete`` (carrying the client's ``event_id``)."""
        return {"type": "conversation.item.deleted", "event_id": event_id or "", "item_id": item_id}

    def item_retrieved(self, item: Item, event_id: str | None) -> dict[str, Any]:
        """The answer to ``conversation.item.retrieve`` (carrying the client's ``event_id``)."""
        return {"type": "conversation.item.retrieved", "event_id": event_id or "", "item": item_object(item)}

    def encode(self, ev: Event) -> list[dict[str, Any]]:
        if isinstance(ev, InputSpeechStarted):
            return [message("input_audio_buffer.speech_started", audio_start_ms=int(ev.audio_ms), item_id=ev.item_id)]
        if isinstance(ev, InputTimeoutTriggered):
            return [
                message(
                    "input_audio_buffer.timeout_triggered",
                    item_id=ev.item_id,
                    audio_start_ms=int(ev.audio_start_ms),
                    audio_end_ms=int(ev.audio_end_ms),
                )
            ]
        if isinstance(ev, InputSpeechStopped):
            return [message("input_audio_buffer.speech_stopped", audio_end_ms=int(ev.audio_ms), item_id=ev.item_id)]
        if isinstance(ev, InputCommitted):
            item = {
                "id": ev.item_id,
                "type": "message",
                "role": "user",
                "status": "completed",
                "content": [{"type": "input_audio", "transcript": None}],
            }
            return [
                message("input_audio_buffer.committed", previous_item_id=ev.previous_item_id, item_id=ev.item_id),
                message("conversation.item.added", previous_item_id=ev.previous_item_id, item=item),
            ]
        if isinstance(ev, TextItemAdded):
            part = {"type": "input_text" if ev.role == "user" else "output_text", "text": ev.text}
            text_item = {
                "id": ev.item_id,
                "object": "realtime.item",
                "type": "message",
                "role": ev.role,
                "status": "completed",
                "content": [part],
            }
            return [
                message("conversation.item.added", previous_item_id=ev.previous_item_id, item=text_item),
                message("conversation.item.done", previous_item_id=ev.previous_item_id, item=text_item),
            ]
        if isinstance(ev, FunctionCallAdded | ToolOutputAdded):
            return self._tool_item(ev)
        if isinstance(ev, McpToolsListed | McpCallAdded | McpCallDone):
            return encode_mcp(ev)
        if isinstance(ev, ItemsDropped):
            return [message("conversation.item.deleted", item_id=item_id) for item_id in ev.item_ids]
        if isinstance(ev, InputTranscriptDelta | InputTranscriptDone | InputTranscriptFailed):
            return self._transcription(ev)
        if isinstance(ev, InputCleared):
            return [message("input_audio_buffer.cleared")]
        if isinstance(ev, ResponseCreated | OutputTranscriptDelta):
            return self._response_text(ev)
        if isinstance(ev, AudioDelta | PlaybackCleared):
            return self._playback(ev)
        if isinstance(ev, ResponseDone):
            return self._response_done(ev)
        if isinstance(ev, ItemTruncated):
            return [message("conversation.item.truncated", item_id=ev.item_id, content_index=0, audio_end_ms=int(ev.audio_end_ms))]
        if isinstance(ev, ErrorEvent):
            return [
                message(
                    "error",
                    error={
                        "type": ev.kind,
                        "code": ev.code,
                        # A server error's text comes from a model library: bounded like a client's.
                        "message": bounded(ev.message, MAX_MESSAGE_CHARS),
                        "param": ev.param,
                        "event_id": ev.event_id,
                    },
                )
            ]
        if isinstance(ev, TurnMetrics):
            if not self.send_metrics:
                return []
            return [
                message(
                    "voiceagent.turn_metrics",
                    response_id=ev.response_id,
                    spans_ms=ev.spans,
                    sessions_active=ev.sessions_active,
                    llm_queue_ms=ev.llm_queue_ms,
                    llm_engine=ev.llm_engine,
                    llm_route=ev.llm_route,
                    playback_gap_ms=ev.playback_gap_ms,
                )
            ]
        return []

    def _response_text(self, ev: ResponseCreated | OutputTranscriptDelta) -> list[dict[str, Any]]:
        """A response starts (its message item, audio or text), or its transcript grows."""
        if isinstance(ev, ResponseCreated):
            if ev.audio:
                self.audio.open(ev.response_id)
            else:
                self._text_only.add(ev.response_id)
            item = {
                "id": ev.item_id,
                "object": "realtime.item",
                "type": "message",
                "role": "assistant",
                "status": "in_progress",
                "content": [],
            }
            ids = {"response_id": ev.response_id, "item_id": ev.item_id, "output_index": 0, "content_index": 0}
            if not ev.in_conversation:
                self._out_of_band.add(ev.response_id)
            response: dict[str, Any] = {
                "id": ev.response_id,
                "object": "realtime.response",
                "status": "in_progress",
                "output": [],
                "conversation_id": None if not ev.in_conversation else "conv_default",
                "metadata": dict(ev.metadata) if ev.metadata is not None else None,
            }
            added = [message("conversation.item.added", previous_item_id=ev.previous_item_id, item=item)] if ev.in_conversation else []
            return [
                message("response.created", response=response),
                message("response.output_item.added", response_id=ev.response_id, output_index=0, item=item),
                *added,
                message(
                    "response.content_part.added",
                    **ids,
                    part={"type": "audio", "transcript": ""} if ev.audio else {"type": "text", "text": ""},
                ),
            ]
        ids = {"response_id": ev.response_id, "item_id": ev.item_id, "output_index": 0, "content_index": 0}
        if ev.response_id in self._text_only:
            return [message("response.output_text.delta", **ids, delta=ev.text)]
        return [message("response.output_audio_transcript.delta", **ids, delta=ev.text)]

    def _transcription(self, ev: InputTranscriptDelta | InputTranscriptDone | InputTranscriptFailed) -> list[dict[str, Any]]:
        """The user's words: partial deltas, the final transcript (with its ``usage``), or the STT's failure."""
        if isinstance(ev, InputTranscriptDelta):
            prev = self._partials.get(ev.item_id, "")
            self._partials[ev.item_id] = ev.text
            if not ev.text.startswith(prev) or ev.text == prev:
                return []  # Whisper revised earlier words: deltas cannot retract; the final corrects
            return [
                message(
                    "conversation.item.input_audio_transcription.delta", item_id=ev.item_id, content_index=0, delta=ev.text[len(prev) :]
                )
            ]
        if isinstance(ev, InputTranscriptDone):
            self._partials.pop(ev.item_id, None)
            return [
                message(
                    "conversation.item.input_audio_transcription.completed",
                    item_id=ev.item_id,
                    content_index=0,
                    transcript=ev.text,
                    # Required by the GA types (strict clients drop the event without it).
                    usage={"type": "duration", "seconds": round(ev.audio_s, 3)},
                )
            ]
        self._partials.pop(ev.item_id, None)
        return [
            message(
                "conversation.item.input_audio_transcription.failed",
                item_id=ev.item_id,
                content_index=0,
                error={"type": "server_error", "code": "stt_failed", "message": bounded(ev.message, MAX_MESSAGE_CHARS), "param": None},
            )
        ]

    def _playback(self, ev: AudioDelta | PlaybackCleared) -> list[dict[str, Any]]:
        """Reply audio (its first chunk announced by ``output_audio_buffer.started``), or the
        listener's buffer cleared (``output_audio_buffer.cleared``: a barge-in,
        ``output_audio_buffer.clear``; no ``stopped`` follows for that response)."""
        if isinstance(ev, PlaybackCleared):
            self._streaming.discard(ev.response_id)
            return [message("output_audio_buffer.cleared", response_id=ev.response_id)]
        raw = self.audio.out(ev.response_id, ev.pcm, ev.rate)
        if not raw:
            return []
        out = []
        if ev.response_id not in self._streaming:
            self._streaming.add(ev.response_id)
            out.append(message("output_audio_buffer.started", response_id=ev.response_id))
        return [*out, self._audio_delta(ev.response_id, ev.item_id, raw)]

    def _audio_delta(self, response_id: str, item_id: str, raw: bytes) -> dict[str, Any]:
        return message(
            AUDIO_DELTA[0],
            response_id=response_id,
            item_id=item_id,
            output_index=0,
            content_index=0,
            delta=base64.b64encode(raw).decode("ascii"),
        )

    def _tool_item(self, ev: FunctionCallAdded | ToolOutputAdded) -> list[dict[str, Any]]:
        """A complete call, streamed as OpenAI does (added, arguments as one delta, done), or an output."""
        if isinstance(ev, ToolOutputAdded):
            out_item = output_object(ev.item_id, ev.call_id, ev.output)
            return [
                message("conversation.item.added", previous_item_id=ev.previous_item_id, item=out_item),
                message("conversation.item.done", previous_item_id=ev.previous_item_id, item=out_item),
            ]
        item = call_object(CallSummary(ev.item_id, ev.call_id, ev.name, ev.arguments), "in_progress")
        item["arguments"] = ""
        done = call_object(CallSummary(ev.item_id, ev.call_id, ev.name, ev.arguments), "completed")
        ids = {"response_id": ev.response_id, "item_id": ev.item_id, "output_index": ev.output_index, "call_id": ev.call_id}
        # An out-of-band response's call is not in the conversation: no conversation.item.* for it.
        added = [message("conversation.item.added", previous_item_id=ev.previous_item_id, item=item)] if ev.in_conversation else []
        item_done = [message("conversation.item.done", previous_item_id=ev.previous_item_id, item=done)] if ev.in_conversation else []
        return [
            message("response.output_item.added", response_id=ev.response_id, output_index=ev.output_index, item=item),
            *added,
            message("response.function_call_arguments.delta", **ids, delta=ev.arguments),
            message("response.function_call_arguments.done", **ids, name=ev.name, arguments=ev.arguments),
            message("response.output_item.done", response_id=ev.response_id, output_index=ev.output_index, item=done),
            *item_done,
        ]

    def _response_done(self, ev: ResponseDone) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        tail = self.audio.close(ev.response_id, flush=ev.status is ResponseStatus.COMPLETED)
        if tail:
            out.append(self._audio_delta(ev.response_id, ev.item_id, tail))
        ids = {"response_id": ev.response_id, "item_id": ev.item_id, "output_index": 0, "content_index": 0}
        item_status = "completed" if ev.status is ResponseStatus.COMPLETED else "incomplete"
        text_only = ev.response_id in self._text_only
        self._text_only.discard(ev.response_id)
        in_conversation = ev.response_id not in self._out_of_band
        self._out_of_band.discard(ev.response_id)
        item = {
            "id": ev.item_id,
            "object": "realtime.item",
            "type": "message",
            "role": "assistant",
            "status": item_status,
            "content": [{"type": "output_text", "text": ev.text} if text_only else {"type": "output_audio", "transcript": ev.text}],
        }
        details: dict[str, Any] | None = None
        if ev.status is ResponseStatus.CANCELLED:
            details = {"type": "cancelled", "reason": ev.reason or "client_cancelled"}
        elif ev.status is ResponseStatus.FAILED:
            details = {"type": "failed", "error": {"type": "server_error", "code": "generation_failed", "message": ev.reason or ""}}
        if text_only:
            out += [
                message("response.output_text.done", **ids, text=ev.text),
                message("response.content_part.done", **ids, part={"type": "text", "text": ev.text}),
            ]
        else:
            out += [
                message("response.output_audio.done", **ids),
                message("response.output_audio_transcript.done", **ids, transcript=ev.text),
                message("response.content_part.done", **ids, part={"type": "audio", "transcript": ev.text}),
            ]
        out += [
            message("response.output_item.done", response_id=ev.response_id, output_index=0, item=item),
            *([message("conversation.item.done", item=item)] if in_conversation else []),
            message(
                "response.done",
                response={
                    "id": ev.response_id,
                    "object": "realtime.response",
                    "status": ev.status.value,
                    "status_details": details,
                    "output": [item, *(call_object(c, "completed") if c.server_label is None else summary_object(c) for c in ev.calls)],
                    "conversation_id": "conv_default" if in_conversation else None,
                    "metadata": dict(ev.metadata) if ev.metadata is not None else None,
                    "usage": None,
                    "audio_ms": round(ev.audio_ms, 1),
                },
            ),
        ]
        if ev.response_id in self._streaming:
            # The server has sent the last of this response's audio (the client may still be playing it).
            self._streaming.discard(ev.response_id)
            out.append(message("output_audio_buffer.stopped", response_id=ev.response_id))
        out.append(message("rate_limits.updated", rate_limits=rate_limits(self.settings)))
        return out
