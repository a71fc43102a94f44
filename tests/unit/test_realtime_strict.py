"""Strict clients, at the codec: every server event shape the Realtime codec builds validates
against the ``openai`` package's Realtime types (tests/strict.py), as a validating client (the
OpenAI Agents SDK) checks it.  The real-server session that records them all is
tests/integration/test_protocol.py."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tests.strict import EXTENSIONS, check_server_event, server_event_types
from voiceagent.config import Config
from voiceagent.conversation.history import History
from voiceagent.errors import ProtocolError
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
from voiceagent.settings import settings_from_config
from voiceagent.tools.mcp import McpTool
from voiceagent.tools.spec import Tool
from voiceagent.transports.realtime_codec import RealtimeCodec

K: dict[str, Any] = {"t": 0.0, "gen": 1, "session": "sess_1"}


def _events() -> list[Event]:
    """One of every session event the codec renders, in a plausible order: a spoken turn, an
    audio reply with a tool call, a text reply, a cancelled and a failed one, errors."""
    pcm = (np.sin(np.arange(4800) / 5.0) * 8000).astype(np.int16)
    call = CallSummary("item_f", "call_1", "get_weather", '{"city": "Paris"}')
    return [
        InputSpeechStarted(**K, item_id="item_x", audio_ms=0.0),
        InputTranscriptFailed(**K, item_id="item_x", message="stt: transcription failed: RuntimeError: boom"),
        InputSpeechStarted(**K, item_id="item_u", audio_ms=120.0),
        InputTranscriptDelta(**K, item_id="item_u", text="what is"),
        InputTranscriptDelta(**K, item_id="item_u", text="what is the weather"),
        InputSpeechStopped(**K, item_id="item_u", audio_ms=1620.0),
        InputCommitted(**K, item_id="item_u", previous_item_id=None),
        InputTranscriptDone(**K, item_id="item_u", text="what is the weather", audio_s=1.5),
        ResponseCreated(**K, response_id="resp_1", item_id="item_a", previous_item_id="item_u"),
        OutputTranscriptDelta(**K, response_id="resp_1", item_id="item_a", text="Let me look."),
        AudioDelta(**K, response_id="resp_1", item_id="item_a", pcm=pcm, rate=24000, offset_ms=0.0),
        FunctionCallAdded(
            **K,
            response_id="resp_1",
            item_id="item_f",
            previous_item_id="item_a",
            output_index=1,
            call_id="call_1",
            name="get_weather",
            arguments='{"city": "Paris"}',
        ),
        ResponseDone(**K, response_id="resp_1", item_id="item_a", status=ResponseStatus.COMPLETED, text="Let me look.", calls=(call,)),
        ToolOutputAdded(**K, item_id="item_o", previous_item_id="item_f", call_id="call_1", output="Sunny."),
        TextItemAdded(**K, item_id="item_t", previous_item_id="item_o", role="user", text="and tomorrow?"),
        TextItemAdded(**K, item_id="item_t2", previous_item_id="item_t", role="assistant", text="Rain."),
        ResponseCreated(**K, response_id="resp_2", item_id="item_b", audio=False),
        OutputTranscriptDelta(**K, response_id="resp_2", item_id="item_b", text="Rain tomorrow."),
        ResponseDone(**K, response_id="resp_2", item_id="item_b", status=ResponseStatus.COMPLETED, text="Rain tomorrow."),
        ResponseCreated(**K, response_id="resp_3", item_id="item_c"),
        AudioDelta(**K, response_id="resp_3", item_id="item_c", pcm=pcm, rate=24000, offset_ms=0.0),
        PlaybackCleared(**K, response_id="resp_3", item_id="item_c", heard_ms=80.0),
        ResponseDone(**K, response_id="resp_3", item_id="item_c", status=ResponseStatus.CANCELLED, text="It", reason="turn_detected"),
        ItemTruncated(**K, item_id="item_c", audio_end_ms=80.0, text="It"),
        ResponseCreated(**K, response_id="resp_4", item_id="item_d"),
        ResponseDone(**K, response_id="resp_4", item_id="item_d", status=ResponseStatus.FAILED, text="", reason="llm exploded"),
        InputCleared(**K),
        ItemsDropped(**K, item_ids=("item_u", "item_a")),
        ErrorEvent(**K, code="llm_failed", message="the LLM failed", kind="server_error"),
        InputTimeoutTriggered(**K, item_id="item_i", audio_start_ms=5000.0, audio_end_ms=11000.0),
        *_mcp_events(),
        TurnMetrics(**K, response_id="resp_1", spans={"first_audio": 420.0}),
    ]


def _mcp_events() -> list[Event]:
    """An MCP server's listing (in progress, completed; another's failed) and a call that
    succeeds and one that fails, in a response."""
    tool = McpTool("weather", Tool("get_weather", "Weather.", {"type": "object"}), {"type": "object"}, {"readOnlyHint": True})
    ids: dict[str, Any] = {"t": 0, "gen": 1, "response_id": "resp_5", "item_id": "item_m1", "previous_item_id": "item_m", "output_index": 1}
    args = '{"city": "Paris"}'
    error = {"type": "http_error", "code": 504, "message": "too slow"}
    return [
        McpToolsListed(t=0, gen=0, item_id="item_l", server_label="weather", status="in_progress"),
        McpToolsListed(t=0, gen=0, item_id="item_l", server_label="weather", status="completed", tools=(tool,)),
        McpToolsListed(t=0, gen=0, item_id="item_l2", server_label="gone", status="failed"),
        ResponseCreated(**K, response_id="resp_5", item_id="item_m"),
        McpCallAdded(**ids, server_label="weather", name="get_weather", arguments=args),
        McpCallDone(**ids, server_label="weather", name="get_weather", arguments=args, output="Sunny.", error=None),
        McpCallDone(**ids, server_label="weather", name="get_weather", arguments=args, output=None, error=error),
        ResponseDone(
            **K,
            response_id="resp_5",
            item_id="item_m",
            status=ResponseStatus.COMPLETED,
            text="",
            calls=(CallSummary("item_m1", "call_9", "get_weather", args, "weather", "Sunny.", None),),
        ),
    ]


def _messages() -> list[dict[str, Any]]:
    c = RealtimeCodec(settings_from_config(Config()), 24000, send_metrics=True)
    out = [c.session_message("session.created", "sess_1"), c.session_message("session.updated", "sess_1")]
    for ev in _events():
        out += c.encode(ev)
    history = History()
    user = history.add_user("hello")
    reply = history.add_assistant(1, "item_r")
    reply.add_clause("Hi there.")
    out += [c.item_retrieved(user, "evt_1"), c.item_retrieved(reply, None), c.item_deleted("item_u", "evt_2")]
    out.append(c.error(ProtocolError("unknown_event_type", "unknown event type 'x'", param="type", event_id="evt_3")))
    return out


MESSAGES = _messages()


@pytest.mark.parametrize("msg", MESSAGES, ids=[f"{i}-{m['type']}" for i, m in enumerate(MESSAGES)])
def test_every_server_event_the_codec_builds_validates_against_the_openai_types(msg: dict[str, Any]) -> None:
    assert check_server_event(msg) is None


def test_the_codec_builds_the_server_events_a_session_sends() -> None:
    """The list above really covers the codec: every type below is among the messages (a type the
    codec learns to send is added here, and so gets validated)."""
    kinds = {m["type"] for m in MESSAGES}
    expected = {
        "session.created",
        "session.updated",
        "error",
        "input_audio_buffer.speech_started",
        "input_audio_buffer.speech_stopped",
        "input_audio_buffer.committed",
        "input_audio_buffer.cleared",
        "conversation.item.added",
        "conversation.item.done",
        "conversation.item.deleted",
        "conversation.item.retrieved",
        "conversation.item.truncated",
        "conversation.item.input_audio_transcription.delta",
        "conversation.item.input_audio_transcription.completed",
        "conversation.item.input_audio_transcription.failed",
        "response.created",
        "response.done",
        "response.output_item.added",
        "response.output_item.done",
        "response.content_part.added",
        "response.content_part.done",
        "response.output_audio.delta",
        "response.output_audio.done",
        "response.output_audio_transcript.delta",
        "response.output_audio_transcript.done",
        "response.output_text.delta",
        "response.output_text.done",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "output_audio_buffer.started",
        "output_audio_buffer.stopped",
        "output_audio_buffer.cleared",
        "rate_limits.updated",
        "voiceagent.turn_metrics",
    }
    assert expected <= kinds, sorted(expected - kinds)
    assert kinds - EXTENSIONS <= server_event_types(), sorted(kinds - EXTENSIONS - server_event_types())


def test_transcription_usage_is_the_seconds_of_audio_transcribed() -> None:
    c = RealtimeCodec(settings_from_config(Config()), 24000)
    (msg,) = c.encode(InputTranscriptDone(**K, item_id="item_u", text="hi", audio_s=1.2345))
    assert msg["usage"] == {"type": "duration", "seconds": 1.234}


def test_the_check_itself_rejects_what_a_strict_client_rejects() -> None:
    """The validator is not vacuous: a missing required field, a wrong type and an unknown event fail."""
    bad_completed = {"type": "conversation.item.input_audio_transcription.completed", "event_id": "e", "item_id": "i"}
    assert check_server_event({**bad_completed, "content_index": 0, "transcript": "hi"}) is not None  # no usage
    assert check_server_event({"type": "response.output_audio.delta", "event_id": "e", "delta": 5}) is not None
    assert check_server_event({"type": "response.audio.delta", "event_id": "e"}) is not None  # beta name: not a GA event
