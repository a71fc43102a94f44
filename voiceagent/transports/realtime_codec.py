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
    InputTranscriptDelta,
    InputTranscriptDone,
    ItemsDropped,
    ItemTruncated,
    McpCallAdded,
    McpCallDone,
    McpToolsListed,
    OutputTranscriptDelta,
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

__all__ = ["RealtimeCodec"]


class RealtimeCodec:
    """Per-connection protocol state: the settings mirror, audio formats and resamplers, and
    transcript delta bookkeeping."""

    def __init__(self, settings: SessionSettings, voice_rate: int, *, send_metrics: bool = False) -> None:
        self.audio = WireAudio(voice_rate)
        self._decoder = CommandDecoder(settings, self.audio)
        self.send_metrics = send_metrics
        self._text_only: set[str] = set()  # response ids of text-only responses in progress
        self._partials: dict[str, str] = {}

    @property
    def settings(self) -> SessionSettings:
        """The session's settings as the client knows them (validation reads them too)."""
        return self._decoder.settings

    @settings.setter
    def settings(self, value: SessionSettings) -> None:
        self._decoder.settings = value

    def pending(self) -> dict[str, int]:
        """Per-response state held now (for tests and diagnostics)."""
        return {"audio_streams": len(self.audio.open_responses()), "text_only": len(self._text_only), "partials": len(self._partials)}

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
                message("conversation.item.input_audio_transcription.completed", item_id=ev.item_id, content_index=0, transcript=ev.text)
            ]
        if isinstance(ev, InputCleared):
            return [message("input_audio_buffer.cleared")]
        if isinstance(ev, ResponseCreated | OutputTranscriptDelta):
            return self._response_text(ev)
        if isinstance(ev, AudioDelta):
            raw = self.audio.out(ev.response_id, ev.pcm)
            return [self._audio_delta(ev.response_id, ev.item_id, raw)] if raw else []
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
            return [
                message(
                    "response.created",
                    response={"id": ev.response_id, "object": "realtime.response", "status": "in_progress", "output": []},
                ),
                message("response.output_item.added", response_id=ev.response_id, output_index=0, item=item),
                message("conversation.item.added", previous_item_id=ev.previous_item_id, item=item),
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
        return [
            message("response.output_item.added", response_id=ev.response_id, output_index=ev.output_index, item=item),
            message("conversation.item.added", previous_item_id=ev.previous_item_id, item=item),
            message("response.function_call_arguments.delta", **ids, delta=ev.arguments),
            message("response.function_call_arguments.done", **ids, name=ev.name, arguments=ev.arguments),
            message("response.output_item.done", response_id=ev.response_id, output_index=ev.output_index, item=done),
            message("conversation.item.done", previous_item_id=ev.previous_item_id, item=done),
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
            message("conversation.item.done", item=item),
            message(
                "response.done",
                response={
                    "id": ev.response_id,
                    "object": "realtime.response",
                    "status": ev.status.value,
                    "status_details": details,
                    "output": [item, *(call_object(c, "completed") if c.server_label is None else summary_object(c) for c in ev.calls)],
                    "usage": None,
                    "audio_ms": round(ev.audio_ms, 1),
                },
            ),
        ]
        return out
