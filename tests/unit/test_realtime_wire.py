"""The one wire module, both ways: what the project's clients build, the server's codec accepts as
meant; what the server renders, the clients read back as sent."""

from __future__ import annotations

import json

import numpy as np

from tests.unit.signals import sine
from voiceagent.config import Config
from voiceagent.events import AudioDelta, CallSummary, ResponseCreated, ResponseDone, ResponseStatus
from voiceagent.settings import settings_from_config
from voiceagent.transports import realtime_wire as wire
from voiceagent.transports.realtime_codec import RealtimeCodec
from voiceagent.transports.realtime_commands import AppendAudio, CreateToolOutput, TruncateItem, UpdateSession


def codec() -> RealtimeCodec:
    return RealtimeCodec(settings_from_config(Config()), 24000)


def through(c: RealtimeCodec, msg: dict[str, object]) -> object:
    return c.decode(json.dumps(msg))


def test_client_messages_decode_on_the_server_as_meant() -> None:
    c = codec()
    update = through(c, wire.session_update(input_format="audio/pcmu", output_format="audio/pcmu", instructions="Be brief."))
    assert isinstance(update, UpdateSession) and update.changes == {"instructions": "Be brief."}
    assert (c.audio.input_format, c.audio.output_format) == ("audio/pcmu", "audio/pcmu")
    through(c, wire.session_update(output_format=None))  # only the input format changes
    assert (c.audio.input_format, c.audio.output_format) == ("audio/pcm", "audio/pcmu")

    tone = sine(440, 0.2, wire.WIRE_RATE)
    append = through(c, wire.append_audio(tone))
    expected = len(tone) * 2 // 3  # 24 → 16 kHz, less the stream resampler's start-up delay (< 20 ms)
    assert isinstance(append, AppendAudio) and expected - 320 <= len(append.pcm) <= expected

    cut = through(c, wire.truncate("item_1", 1234.9))
    assert cut == TruncateItem("item_1", 1234.0, cut.event_id) and cut.event_id is not None
    out = through(c, wire.tool_output("call_1", '{"temp": 18}'))
    assert out == CreateToolOutput("call_1", '{"temp": 18}', out.event_id)


def test_server_messages_read_back_on_the_client_as_sent() -> None:
    c = codec()
    ids = {"t": 0.0, "gen": 1, "session": "s", "response_id": "resp_1", "item_id": "item_1"}
    c.encode(ResponseCreated(**ids))
    tone = sine(300, 0.5, 24000)
    sent = [m for m in c.encode(AudioDelta(**ids, pcm=tone, rate=24000, offset_ms=0.0))]
    done = c.encode(
        ResponseDone(
            **ids, status=ResponseStatus.CANCELLED, text="Hello there", audio_ms=500.0, calls=(CallSummary("item_2", "call_1", "f", "{}"),)
        )
    )
    heard = [wire.audio_delta(m) for m in sent + done]
    pcm = np.concatenate([h for h in heard if h is not None])
    assert len(pcm) > 0 and np.array_equal(pcm, tone[: len(pcm)])  # same rate: the samples as sent
    summaries = [s for s in (wire.response_done(m) for m in done) if s is not None]
    assert summaries == [wire.ResponseSummary("resp_1", "cancelled", "item_1", "Hello there")]
    assert wire.response_done({"type": "response.created"}) is None and wire.audio_delta({"type": "error"}) is None


def test_a_text_only_response_reads_back_its_text() -> None:
    c = codec()
    ids = {"t": 0.0, "gen": 1, "session": "s", "response_id": "resp_t", "item_id": "item_t"}
    c.encode(ResponseCreated(**ids, audio=False))
    done = c.encode(ResponseDone(**ids, status=ResponseStatus.COMPLETED, text="It is noon.", audio_ms=0.0))
    assert [s for s in map(wire.response_done, done) if s] == [wire.ResponseSummary("resp_t", "completed", "item_t", "It is noon.")]
