"""The client core against the server's codec, both ways: what :mod:`voiceagent.client.messages`
builds, the server decodes as meant; what the server renders from the session's events,
:class:`~voiceagent.client.RealtimeClient` reads back as the same events.  No loop, no sockets."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from tests.unit.signals import sine
from voiceagent.client import OtherEvent, RealtimeClient, ResponseStarted, messages
from voiceagent.config import Config
from voiceagent.events import (
    AudioDelta,
    CallSummary,
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
    ResponseStatus,
    ToolOutputAdded,
    TurnMetrics,
)
from voiceagent.settings import settings_from_config
from voiceagent.transports.realtime_codec import RealtimeCodec
from voiceagent.transports.realtime_commands import (
    AppendAudio,
    CancelResponse,
    ClearInput,
    CommitInput,
    CreateItem,
    CreateResponse,
    CreateToolOutput,
    TruncateItem,
    UpdateSession,
)
from voiceagent.transports.realtime_wire import WIRE_RATE


def codec() -> RealtimeCodec:
    return RealtimeCodec(settings_from_config(Config()), 24000, send_metrics=True)


def through(c: RealtimeCodec, msg: dict[str, Any]) -> object:
    return c.decode(json.dumps(msg))


def read_back(c: RealtimeCodec, client: RealtimeClient, *events: Event) -> list[Event]:
    """The session's events rendered by the server's codec, then fed to the client as text."""
    return [ev for e in events for m in c.encode(e) for ev in client.feed(json.dumps(m), 7.0)]


def test_client_messages_decode_on_the_server_as_meant() -> None:
    c = codec()
    update = through(c, messages.session_update(input_format="audio/pcmu", output_format="audio/pcmu", instructions="Be brief."))
    assert isinstance(update, UpdateSession) and update.changes == {"instructions": "Be brief."}
    assert (c.audio.input_format, c.audio.output_format) == ("audio/pcmu", "audio/pcmu")
    through(c, messages.session_update(output_format=None))  # only the input format changes
    assert (c.audio.input_format, c.audio.output_format) == ("audio/pcm", "audio/pcmu")
    update = through(c, messages.session_update(input_format=None, output_format=None, instructions="Hi.", max_output_tokens=60))
    assert isinstance(update, UpdateSession) and update.changes == {"instructions": "Hi.", "max_output_tokens": 60}
    assert (c.audio.input_format, c.audio.output_format) == ("audio/pcm", "audio/pcmu")  # formats left alone

    tone = sine(440, WIRE_RATE, 0.2)
    append = through(c, messages.append_audio(tone))
    expected = len(tone) * 2 // 3  # 24 → 16 kHz, less the stream resampler's start-up delay (< 20 ms)
    assert isinstance(append, AppendAudio) and expected - 320 <= len(append.pcm) <= expected

    cut = through(c, messages.truncate("item_1", 1234.9))
    assert cut == TruncateItem("item_1", 1234.0, cut.event_id) and cut.event_id is not None
    out = through(c, messages.tool_output("call_1", '{"temp": 18}'))
    assert out == CreateToolOutput("call_1", '{"temp": 18}', out.event_id)
    assert isinstance(through(c, messages.commit_input()), CommitInput)
    assert isinstance(through(c, messages.clear_input()), ClearInput)
    item = through(c, messages.create_text("What time is it?"))
    assert isinstance(item, CreateItem) and (item.role, item.text) == ("user", "What time is it?")
    text_only = through(c, messages.create_response(output_modalities=["text"], instructions="Short."))
    assert isinstance(text_only, CreateResponse) and (text_only.options.audio, text_only.options.instructions) == (False, "Short.")
    plain = through(c, messages.create_response())
    assert isinstance(plain, CreateResponse) and plain.options.audio is None
    cancel = messages.cancel_response("resp_9")
    assert through(c, cancel) == CancelResponse("resp_9", cancel["event_id"])
    cancel = messages.cancel_response()
    assert through(c, cancel) == CancelResponse(None, cancel["event_id"])


def test_every_message_has_its_own_event_id() -> None:
    ids = {messages.commit_input()["event_id"] for _ in range(50)}
    assert len(ids) == 50


def test_server_messages_read_back_on_the_client_as_sent() -> None:
    c, client = codec(), RealtimeClient()
    ids = {"t": 0.0, "gen": 1, "session": "s", "response_id": "resp_1", "item_id": "item_1"}
    started = read_back(c, client, ResponseCreated(**ids))
    # response.created, then its message item (the rest of the render is of no type a client reads)
    assert [type(e) for e in started if not isinstance(e, OtherEvent)] == [ResponseStarted, ResponseCreated]
    tone = sine(300, 24000, 0.5)
    sent = read_back(c, client, AudioDelta(**ids, pcm=tone, rate=24000, offset_ms=0.0))
    said = read_back(c, client, OutputTranscriptDelta(**ids, text="Hello there, friend."))
    done = read_back(
        c,
        client,
        ResponseDone(
            **ids, status=ResponseStatus.CANCELLED, text="Hello there", audio_ms=500.0, calls=(CallSummary("item_2", "call_1", "f", "{}"),)
        ),
    )
    heard = [e.pcm for e in sent + done if isinstance(e, AudioDelta)]
    pcm = np.concatenate(heard)
    assert len(pcm) > 0 and np.array_equal(pcm, tone[: len(pcm)])  # same rate: the samples as sent
    offsets = [e.offset_ms for e in sent + done if isinstance(e, AudioDelta)]
    assert offsets[0] == 0.0 and offsets == sorted(offsets)
    assert [(e.response_id, e.item_id, e.text) for e in said if isinstance(e, OutputTranscriptDelta)] == [
        ("resp_1", "item_1", "Hello there, friend.")
    ]
    ended = [e for e in done if isinstance(e, ResponseDone)]
    call = CallSummary("item_2", "call_1", "f", "{}")
    assert [(e.response_id, e.item_id, e.status, e.text, e.reason, e.audio_ms, e.calls) for e in ended] == [
        ("resp_1", "item_1", ResponseStatus.CANCELLED, "Hello there", "client_cancelled", 500.0, (call,))
    ]
    # a cancelled reply: the client is told to stop playing it, before it hears the response ended
    cleared = [e for e in done if isinstance(e, PlaybackCleared)]
    assert [(e.response_id, e.item_id) for e in cleared] == [("resp_1", "item_1")]
    assert done.index(cleared[0]) < done.index(ended[0])
    assert all(e.t == 7.0 and e.gen == 0 for e in started + sent + done)


def test_a_text_only_response_reads_back_its_text() -> None:
    c, client = codec(), RealtimeClient()
    ids = {"t": 0.0, "gen": 1, "session": "s", "response_id": "resp_t", "item_id": "item_t"}
    read_back(c, client, ResponseCreated(**ids, audio=False))
    deltas = read_back(c, client, OutputTranscriptDelta(**ids, text="It is "), OutputTranscriptDelta(**ids, text="noon."))
    assert [e.text for e in deltas if isinstance(e, OutputTranscriptDelta)] == ["It is ", "noon."]
    done = read_back(c, client, ResponseDone(**ids, status=ResponseStatus.COMPLETED, text="It is noon.", audio_ms=0.0))
    assert [(e.response_id, e.status, e.item_id, e.text) for e in done if isinstance(e, ResponseDone)] == [
        ("resp_t", ResponseStatus.COMPLETED, "item_t", "It is noon.")
    ]
    assert not any(isinstance(e, PlaybackCleared) for e in done)


def test_the_user_side_reads_back_as_the_session_said_it() -> None:
    c, client = codec(), RealtimeClient()
    h = {"t": 0.0, "gen": 1, "session": "s"}
    got = read_back(
        c,
        client,
        InputSpeechStarted(**h, item_id="u1", audio_ms=1200.0),
        InputTranscriptDelta(**h, item_id="u1", text="What"),
        InputTranscriptDelta(**h, item_id="u1", text="What is"),
        InputSpeechStopped(**h, item_id="u1", audio_ms=2500.0),
        InputTranscriptDone(**h, item_id="u1", text="What is the time?"),
    )
    # The wire sends increments; the client gives back the whole partial text, as the session does.
    kinds = [PlaybackCleared, InputSpeechStarted, InputTranscriptDelta, InputTranscriptDelta, InputSpeechStopped, InputTranscriptDone]
    assert [type(e) for e in got] == kinds
    assert got[0] == PlaybackCleared(t=7.0, gen=0, response_id="", item_id="", heard_ms=0.0)  # the user talks: stop whatever plays
    assert (got[1].item_id, got[1].audio_ms) == ("u1", 1200.0)  # type: ignore[attr-defined]
    assert [e.text for e in got if isinstance(e, InputTranscriptDelta)] == ["What", "What is"]
    assert isinstance(got[4], InputSpeechStopped) and got[4].audio_ms == 2500.0
    assert isinstance(got[5], InputTranscriptDone) and got[5].text == "What is the time?"
    # The next turn's partial starts afresh.
    again = read_back(c, client, InputTranscriptDelta(**h, item_id="u2", text="And"))
    assert [e.text for e in again if isinstance(e, InputTranscriptDelta)] == ["And"]


def test_tools_metrics_and_errors_read_back() -> None:
    c, client = codec(), RealtimeClient()
    h = {"t": 0.0, "gen": 1, "session": "s"}
    got = read_back(
        c,
        client,
        FunctionCallAdded(
            **h, response_id="r1", item_id="fc1", previous_item_id="i0", output_index=1, call_id="call_1", name="clock", arguments="{}"
        ),
        ToolOutputAdded(**h, item_id="fo1", previous_item_id="fc1", call_id="call_1", output='"noon"'),
        TurnMetrics(**h, response_id="r1", spans={"first_audio_sent": 420.0}, sessions_active=2, llm_queue_ms=3.0, llm_engine="llama"),
        ErrorEvent(**h, code="bad_thing", message="it broke", param="x", event_id="evt_1"),
    )
    calls = [e for e in got if isinstance(e, FunctionCallAdded)]
    assert [(e.response_id, e.item_id, e.output_index, e.call_id, e.name, e.arguments) for e in calls] == [
        ("r1", "fc1", 1, "call_1", "clock", "{}")
    ]
    outputs = [e for e in got if isinstance(e, ToolOutputAdded)]
    assert [(e.item_id, e.previous_item_id, e.call_id, e.output) for e in outputs] == [("fo1", "fc1", "call_1", '"noon"')]
    metrics = [e for e in got if isinstance(e, TurnMetrics)]
    assert [(m.response_id, m.spans, m.sessions_active, m.llm_queue_ms, m.llm_engine, m.llm_route) for m in metrics] == [
        ("r1", {"first_audio_sent": 420.0}, 2, 3.0, "llama", None)
    ]
    errors = [e for e in got if isinstance(e, ErrorEvent)]
    assert [(e.code, e.message, e.kind, e.param, e.event_id) for e in errors] == [
        ("bad_thing", "it broke", "invalid_request_error", "x", "evt_1")
    ]
