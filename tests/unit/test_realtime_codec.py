"""transports.realtime_codec: decoding client events (and every way they can be bad), encoding ours."""

from __future__ import annotations

import base64
import dataclasses
import json
from typing import Any

import numpy as np
import pytest

from tests.unit.signals import peak_hz, sine
from voiceagent.audio import Int16Array, alaw_decode, alaw_encode, mulaw_decode, mulaw_encode
from voiceagent.config import Config
from voiceagent.conversation.reply import ResponseOptions
from voiceagent.errors import ProtocolError
from voiceagent.events import (
    AudioDelta,
    ErrorEvent,
    InputCleared,
    InputCommitted,
    InputSpeechStarted,
    InputSpeechStopped,
    InputTranscriptDelta,
    InputTranscriptDone,
    ItemsDropped,
    ItemTruncated,
    OutputTranscriptDelta,
    PlaybackCleared,
    ResponseCreated,
    ResponseDone,
    ResponseStatus,
    TextItemAdded,
    TurnMetrics,
)
from voiceagent.settings import TurnDetection, settings_from_config
from voiceagent.transports.realtime_codec import RealtimeCodec
from voiceagent.transports.realtime_commands import (
    AppendAudio,
    CancelResponse,
    ClearInput,
    ClearOutput,
    CommitInput,
    CreateItem,
    CreateResponse,
    DeleteItem,
    RetrieveItem,
    TruncateItem,
    UpdateSession,
)


def codec(voice_rate: int = 24000, *, send_metrics: bool = False) -> RealtimeCodec:
    return RealtimeCodec(settings_from_config(Config()), voice_rate, send_metrics=send_metrics)


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def append_msg(raw: bytes, event_id: str = "evt_1") -> str:
    return json.dumps({"type": "input_audio_buffer.append", "event_id": event_id, "audio": b64(raw)})


def update_msg(session: dict[str, Any]) -> str:
    return json.dumps({"type": "session.update", "event_id": "evt_u", "session": session})


def decode_error(c: RealtimeCodec, text: str) -> ProtocolError:
    with pytest.raises(ProtocolError) as info:
        c.decode(text)
    return info.value


# --------------------------------------------------------------------------- decode: bad input


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("not json", "invalid_json"),
        ("{", "invalid_json"),
        ("[" * 100_000 + "]" * 100_000, "invalid_json"),
        ("[1, 2]", "invalid_event"),
        ('"a string"', "invalid_event"),
        ("null", "invalid_event"),
        ("{}", "missing_type"),
        ('{"type": 5}', "missing_type"),
        ('{"type": "response.fly"}', "unknown_event_type"),
        # an integer of more digits than Python converts (its int-string limit raises ValueError)
        ('{"type": "response.cancel", "n": ' + "9" * 5000 + "}", "invalid_json"),
        # a lone UTF-16 surrogate is not text: no model, log or socket could encode it
        (
            '{"type": "conversation.item.create", "item": {"role": "user", "content": [{"type": "input_text", "text": "\\ud800"}]}}',
            "invalid_json",
        ),
        ('{"type": "session.update", "session": {"instructions": "a\\udfffb"}}', "invalid_json"),
    ],
)
def test_decode_rejects_malformed_messages(text: str, code: str) -> None:
    assert decode_error(codec(), text).code == code


def test_unknown_type_error_carries_the_event_id_and_param() -> None:
    err = decode_error(codec(), json.dumps({"type": "nope", "event_id": "evt_9"}))
    assert err.code == "unknown_event_type"
    assert err.event_id == "evt_9"
    assert err.param == "type"
    assert "nope" in err.message


@pytest.mark.parametrize("audio", ["!!!not base64!!!", "abc", "é"])
def test_invalid_base64(audio: str) -> None:
    err = decode_error(codec(), json.dumps({"type": "input_audio_buffer.append", "event_id": "evt_b", "audio": audio}))
    assert err.code == "invalid_base64"
    assert err.param == "audio"
    assert err.event_id == "evt_b"


def test_odd_pcm_length() -> None:
    err = decode_error(codec(), append_msg(b"\x00\x01\x02"))
    assert err.code == "invalid_audio_length"
    assert err.event_id == "evt_1"


@pytest.mark.parametrize(
    ("msg", "code", "param"),
    [
        ({"type": "input_audio_buffer.append"}, "missing_field", "audio"),
        ({"type": "input_audio_buffer.append", "audio": 5}, "invalid_value", "audio"),
        ({"type": "session.update"}, "missing_field", "session"),
        ({"type": "session.update", "session": []}, "invalid_value", "session"),
        ({"type": "conversation.item.truncate", "item_id": "i", "audio_end_ms": -1}, "invalid_value", "audio_end_ms"),
        ({"type": "conversation.item.truncate", "item_id": "i", "audio_end_ms": True}, "invalid_value", "audio_end_ms"),
        ({"type": "conversation.item.truncate", "audio_end_ms": 5}, "missing_field", "item_id"),
        ({"type": "conversation.item.delete"}, "missing_field", "item_id"),
        ({"type": "conversation.item.retrieve", "item_id": 3}, "invalid_value", "item_id"),
        ({"type": "response.create", "response": {"instructions": 3}}, "invalid_value", "response.instructions"),
    ],
)
def test_invalid_fields(msg: dict[str, Any], code: str, param: str) -> None:
    err = decode_error(codec(), json.dumps(msg))
    assert (err.code, err.param) == (code, param)


@pytest.mark.parametrize(
    ("session", "code", "param"),
    [
        ({"audio": {"input": {"turn_detection": {"threshold": 1.5}}}}, "invalid_value", "session.audio.input.turn_detection.threshold"),
        ({"audio": {"input": {"turn_detection": {"threshold": 0}}}}, "invalid_value", "session.audio.input.turn_detection.threshold"),
        ({"audio": {"input": {"turn_detection": {"threshold": True}}}}, "invalid_value", "session.audio.input.turn_detection.threshold"),
        (
            {"audio": {"input": {"turn_detection": {"silence_duration_ms": 50}}}},
            "invalid_value",
            "session.audio.input.turn_detection.silence_duration_ms",
        ),
        (
            {"audio": {"input": {"turn_detection": {"prefix_padding_ms": "300"}}}},
            "invalid_value",
            "session.audio.input.turn_detection.prefix_padding_ms",
        ),
        (
            {"audio": {"input": {"turn_detection": {"create_response": "yes"}}}},
            "invalid_value",
            "session.audio.input.turn_detection.create_response",
        ),
        ({"audio": {"input": {"turn_detection": {"type": "magic"}}}}, "invalid_value", "session.audio.input.turn_detection.type"),
        ({"audio": {"input": {"turn_detection": "on"}}}, "invalid_value", "session.audio.input.turn_detection"),
        ({"audio": {"input": {"format": {"type": "audio/wav"}}}}, "unsupported_format", "session.audio.input.format"),
        ({"audio": {"input": {"format": "mp3"}}}, "unsupported_format", "session.audio.input.format"),
        ({"audio": {"input": {"format": {"type": "audio/pcm", "rate": 16000}}}}, "unsupported_format", "session.audio.input.format.rate"),
        ({"audio": {"output": {"format": {"type": "audio/pcm", "rate": 48000}}}}, "unsupported_format", "session.audio.output.format.rate"),
        ({"audio": {"input": {"format": ["audio/pcm"]}}}, "unsupported_format", "session.audio.input.format"),
        ({"audio": {"input": {"format": {"type": {"nested": 1}}}}}, "unsupported_format", "session.audio.input.format"),
        ({"audio": {"output": {"speed": 5}}}, "invalid_value", "session.audio.output.speed"),
        ({"audio": {"output": {"speed": "fast"}}}, "invalid_value", "session.audio.output.speed"),
        ({"audio": {"output": {"voice": 1}}}, "invalid_value", "session.audio.output.voice"),
        ({"audio": {"output": {"voice": ""}}}, "invalid_value", "session.audio.output.voice"),
        ({"audio": {"output": {"voice": "   "}}}, "invalid_value", "session.audio.output.voice"),
        ({"audio": {"output": {"voice": "v" * 65}}}, "invalid_value", "session.audio.output.voice"),
        ({"audio": {"input": {"transcription": {"language": "english"}}}}, "invalid_value", "session.audio.input.transcription.language"),
        ({"audio": {"input": {"transcription": {"prompt": ["Paris"]}}}}, "invalid_value", "session.audio.input.transcription.prompt"),
        ({"audio": {"input": {"transcription": {"prompt": "x" * 2001}}}}, "invalid_value", "session.audio.input.transcription.prompt"),
        ({"max_output_tokens": 0}, "invalid_value", "session.max_output_tokens"),
        ({"max_output_tokens": 5000}, "invalid_value", "session.max_output_tokens"),
        ({"instructions": 42}, "invalid_value", "session.instructions"),
        ({"audio": "loud"}, "invalid_value", "session.audio"),
    ],
)
def test_invalid_session_update(session: dict[str, Any], code: str, param: str) -> None:
    err = decode_error(codec(), update_msg(session))
    assert (err.code, err.param) == (code, param)
    assert err.event_id == "evt_u"


@pytest.mark.parametrize(
    "session",
    [
        {"audio": {"input": {"format": {"type": "audio/pcm", "rate": 8000}}}},
        # the input format is valid, but the update as a whole is rejected: nothing may change
        {"audio": {"input": {"format": "audio/pcmu"}, "output": {"format": "audio/wav"}}},
        {"audio": {"input": {"format": "audio/pcmu", "turn_detection": {"threshold": 7}}}},
        {"audio": {"input": {"format": "audio/pcmu"}, "output": {"format": "audio/pcmu", "speed": 0}}},
    ],
)
def test_rejected_session_update_leaves_the_formats_unchanged(session: dict[str, Any]) -> None:
    c = codec()
    decode_error(c, update_msg(session))
    assert (c.audio.input_format, c.audio.output_format) == ("audio/pcm", "audio/pcm")
    cmd = c.decode(append_msg(sine(440, 24000, 0.1).astype("<i2").tobytes()))
    assert isinstance(cmd, AppendAudio)
    assert peak_hz(cmd.pcm, 16000) == pytest.approx(440, abs=15)  # still read as 24 kHz PCM


@pytest.mark.parametrize(
    "item",
    [
        {"type": "message", "role": "user", "content": [{"type": "input_audio", "audio": "AAAA"}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text"}]},
        {"type": "message", "role": "user", "content": []},
        {"type": "message", "role": "user", "content": "hello"},
        {"type": "message", "role": "user"},
        {"type": "message", "role": "robot", "content": [{"type": "input_text", "text": "hi"}]},
        {"type": "function_call", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
    ],
)
def test_conversation_item_create_needs_text_content(item: dict[str, Any]) -> None:
    err = decode_error(codec(), json.dumps({"type": "conversation.item.create", "item": item}))
    assert err.code in ("invalid_value", "unsupported_item_type")
    assert err.param is not None and err.param.startswith("item")


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity", "1" + "0" * 400])
def test_truncate_rejects_non_finite_audio_end_ms(value: str) -> None:
    # Python's json accepts NaN and Infinity; a NaN would pass a plain range check and later fail
    # to encode (int(nan)), a huge integer would overflow float(): both must be protocol errors.
    text = '{"type": "conversation.item.truncate", "item_id": "item_1", "audio_end_ms": ' + value + "}"
    err = decode_error(codec(), text)
    assert (err.code, err.param) == ("invalid_value", "audio_end_ms")


def test_conversation_item_create_without_item() -> None:
    assert decode_error(codec(), json.dumps({"type": "conversation.item.create"})).code == "missing_field"


# --------------------------------------------------------------------------- decode: good input


def test_append_24khz_returns_16khz_samples() -> None:
    c = codec()
    pcm24 = sine(440, 24000, 1.0)
    chunks = [pcm24[i : i + 480] for i in range(0, len(pcm24), 480)]  # 20 ms each
    out: list[Int16Array] = []
    for i, chunk in enumerate(chunks):
        cmd = c.decode(append_msg(chunk.astype("<i2").tobytes(), f"evt_{i}"))
        assert isinstance(cmd, AppendAudio)
        assert cmd.event_id == f"evt_{i}"
        assert cmd.pcm.dtype == np.int16
        out.append(cmd.pcm)
    pcm16 = np.concatenate(out)
    # 1 s at 24 kHz is 16000 samples at 16 kHz, less the resampler's delay (~20 ms) still held back
    assert 16000 - 480 <= len(pcm16) <= 16000
    assert peak_hz(pcm16, 16000) == pytest.approx(440, abs=3)  # really resampled, not relabelled


def test_one_large_append_returns_two_thirds_as_many_samples() -> None:
    c = codec()
    cmd = c.decode(append_msg(sine(440, 24000, 0.5).astype("<i2").tobytes()))
    assert isinstance(cmd, AppendAudio)
    assert 8000 - 480 <= len(cmd.pcm) <= 8000


def test_pcmu_input_path() -> None:
    c = codec()
    cmd = c.decode(update_msg({"audio": {"input": {"format": {"type": "audio/pcmu"}}}}))
    assert isinstance(cmd, UpdateSession)
    assert c.audio.input_format == "audio/pcmu"
    pcm8 = sine(440, 8000, 1.0)
    out = []
    for i in range(0, len(pcm8), 160):
        decoded = c.decode(append_msg(mulaw_encode(pcm8[i : i + 160])))  # odd lengths are fine: 1 byte a sample
        assert isinstance(decoded, AppendAudio)
        out.append(decoded.pcm)
    pcm16 = np.concatenate(out)
    assert 16000 - 1600 <= len(pcm16) <= 16000
    assert peak_hz(pcm16, 16000) == pytest.approx(440, abs=3)
    assert np.abs(pcm16).max() > 5000  # μ-law decoded, not raw bytes as samples


def test_output_audio_buffer_clear_decodes() -> None:
    cmd = codec().decode(json.dumps({"type": "output_audio_buffer.clear", "event_id": "evt_c"}))
    assert cmd == ClearOutput("evt_c")


def test_a_cleared_response_is_not_also_stopped() -> None:
    c = codec(voice_rate=24000)
    c.encode(created())
    started = c.encode(delta(sine(300, 24000, 0.2), 24000))
    assert types(started)[0] == "output_audio_buffer.started"
    cleared = c.encode(PlaybackCleared(t=0.0, gen=1, response_id="resp_1", item_id="item_1", heard_ms=100.0))
    assert [(m["type"], m["response_id"]) for m in cleared] == [("output_audio_buffer.cleared", "resp_1")]
    end = c.encode(done(ResponseStatus.CANCELLED, "client_cancelled"))
    assert "output_audio_buffer.stopped" not in types(end)
    assert c.pending()["streaming"] == 0


def test_pcma_input_path() -> None:
    c = codec()
    c.decode(update_msg({"audio": {"input": {"format": {"type": "audio/pcma"}}}}))
    assert c.audio.input_format == "audio/pcma"
    pcm8 = sine(440, 8000, 1.0)
    out = []
    for i in range(0, len(pcm8), 160):
        decoded = c.decode(append_msg(alaw_encode(pcm8[i : i + 160])))
        assert isinstance(decoded, AppendAudio)
        out.append(decoded.pcm)
    pcm16 = np.concatenate(out)
    assert 16000 - 1600 <= len(pcm16) <= 16000
    assert peak_hz(pcm16, 16000) == pytest.approx(440, abs=3)
    # A-law decoded: the sine's amplitude, not μ-law's reading of A-law bytes.
    assert abs(np.abs(pcm16).max() - np.abs(pcm8).max()) < 0.1 * np.abs(pcm8).max()


def test_beta_format_names_are_accepted() -> None:
    c = codec()
    c.decode(update_msg({"audio": {"input": {"format": "g711_ulaw"}, "output": {"format": "g711_ulaw"}}}))
    assert (c.audio.input_format, c.audio.output_format) == ("audio/pcmu", "audio/pcmu")
    c.decode(update_msg({"audio": {"input": {"format": "g711_alaw"}, "output": {"format": "g711_alaw"}}}))
    assert (c.audio.input_format, c.audio.output_format) == ("audio/pcma", "audio/pcma")
    c.decode(update_msg({"audio": {"input": {"format": "pcm16"}, "output": {"format": {"type": "audio/pcm", "rate": 24000}}}}))
    assert (c.audio.input_format, c.audio.output_format) == ("audio/pcm", "audio/pcm")


def test_session_update_changes() -> None:
    c = codec()
    cmd = c.decode(
        update_msg(
            {
                "instructions": "Be terse.",
                "max_output_tokens": "inf",
                "audio": {
                    "input": {
                        "transcription": {"model": "whisper-1", "language": "fr", "prompt": "Anna, Bob, Cairo."},
                        "turn_detection": {"type": "server_vad", "threshold": 0.7, "silence_duration_ms": 800, "create_response": False},
                    },
                    "output": {"voice": "alloy", "speed": 1.25},
                },
            }
        )
    )
    assert isinstance(cmd, UpdateSession)
    assert cmd.event_id == "evt_u"
    assert cmd.changes == {
        "instructions": "Be terse.",
        "max_output_tokens": 4096,
        "language": "fr",
        "transcription_prompt": "Anna, Bob, Cairo.",
        "turn_detection": TurnDetection(0.7, 300, 800, False, True),
        "voice": "alloy",
        "speed": 1.25,
    }


def test_a_null_transcription_prompt_clears_it() -> None:
    cmd = codec().decode(update_msg({"audio": {"input": {"transcription": {"prompt": None}}}}))
    assert isinstance(cmd, UpdateSession)
    assert cmd.changes == {"transcription_prompt": ""}


def test_session_update_turn_detection_null_is_manual_mode() -> None:
    cmd = codec().decode(update_msg({"audio": {"input": {"turn_detection": None}}}))
    assert isinstance(cmd, UpdateSession)
    assert cmd.changes == {"turn_detection": None}


@pytest.mark.parametrize(
    ("msg", "expected"),
    [
        ({"type": "input_audio_buffer.commit", "event_id": "e"}, CommitInput("e")),
        ({"type": "input_audio_buffer.clear"}, ClearInput(None)),
        (
            {"type": "conversation.item.create", "item": {"role": "user", "content": [{"type": "input_text", "text": "Hi"}]}},
            CreateItem("user", "Hi"),
        ),
        (
            {
                "type": "conversation.item.create",
                "item": {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "text", "text": "A"}, {"type": "output_text", "text": "B"}],
                },
            },
            CreateItem("assistant", "A B"),
        ),
        ({"type": "conversation.item.truncate", "item_id": "item_1", "audio_end_ms": 1500}, TruncateItem("item_1", 1500.0)),
        ({"type": "conversation.item.delete", "item_id": "item_2"}, DeleteItem("item_2")),
        ({"type": "conversation.item.retrieve", "item_id": "item_3"}, RetrieveItem("item_3")),
        ({"type": "response.create"}, CreateResponse()),
        ({"type": "response.create", "response": {"instructions": "Shout."}}, CreateResponse(ResponseOptions("Shout."))),
        ({"type": "response.cancel", "response_id": "resp_1"}, CancelResponse("resp_1")),
        ({"type": "response.cancel", "event_id": 7}, CancelResponse(None)),  # a non-string event_id is ignored
    ],
)
def test_decode_commands(msg: dict[str, Any], expected: object) -> None:
    assert codec().decode(json.dumps(msg)) == expected


# --------------------------------------------------------------------------- encode


def last(messages: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    """The last message of type ``kind`` (response.done is followed by output_audio_buffer.stopped
    and rate_limits.updated)."""
    return [m for m in messages if m["type"] == kind][-1]


def types(messages: list[dict[str, Any]]) -> list[str]:
    return [m["type"] for m in messages]


def created(response_id: str = "resp_1", item_id: str = "item_1") -> ResponseCreated:
    return ResponseCreated(t=0.0, gen=1, response_id=response_id, item_id=item_id, previous_item_id="item_0")


def delta(pcm: Int16Array, rate: int, response_id: str = "resp_1", item_id: str = "item_1") -> AudioDelta:
    return AudioDelta(t=0.0, gen=1, response_id=response_id, item_id=item_id, pcm=pcm, rate=rate, offset_ms=0.0)


def done(status: ResponseStatus, reason: str | None = None, text: str = "Hello there.") -> ResponseDone:
    return ResponseDone(t=0.0, gen=1, response_id="resp_1", item_id="item_1", status=status, text=text, reason=reason, audio_ms=1234.56)


def audio_of(messages: list[dict[str, Any]]) -> bytes:
    return b"".join(base64.b64decode(m["delta"]) for m in messages if m["type"] == "response.output_audio.delta")


def test_encode_a_completed_response() -> None:
    c = codec(voice_rate=24000)
    pcm = sine(300, 24000, 0.2)
    out = c.encode(created())
    assert types(out) == ["response.created", "response.output_item.added", "conversation.item.added", "response.content_part.added"]
    assert out[0]["response"]["id"] == "resp_1"
    assert out[0]["response"]["status"] == "in_progress"
    assert out[1]["item"]["id"] == "item_1" and out[1]["item"]["role"] == "assistant"
    assert out[2]["previous_item_id"] == "item_0"
    assert out[3]["response_id"] == "resp_1" and out[3]["item_id"] == "item_1"
    transcript = c.encode(OutputTranscriptDelta(t=0.0, gen=1, response_id="resp_1", item_id="item_1", text="Hello there. "))
    assert types(transcript) == ["response.output_audio_transcript.delta"]
    assert transcript[0]["delta"] == "Hello there. "
    audio = c.encode(delta(pcm[:2400], 24000)) + c.encode(delta(pcm[2400:], 24000))
    # The first audio of a response is announced (output_audio_buffer.started), once.
    assert types(audio) == ["output_audio_buffer.started"] + ["response.output_audio.delta"] * 2
    assert audio[0]["response_id"] == "resp_1"
    audio = audio[1:]
    assert all(m["response_id"] == "resp_1" and m["item_id"] == "item_1" for m in audio)
    assert audio_of(audio) == pcm.astype("<i2").tobytes()  # 24 kHz voice, 24 kHz wire: byte-exact
    end = c.encode(done(ResponseStatus.COMPLETED))
    assert types(end) == [
        "response.output_audio.done",
        "response.output_audio_transcript.done",
        "response.content_part.done",
        "response.output_item.done",
        "conversation.item.done",
        "response.done",
        "output_audio_buffer.stopped",
        "rate_limits.updated",
    ]
    assert end[1]["transcript"] == "Hello there."
    assert end[-2]["response_id"] == "resp_1"
    assert {r["name"]: (r["limit"], r["remaining"]) for r in end[-1]["rate_limits"]} == {
        "requests": (1, 1),
        "tokens": (c.settings.max_output_tokens, c.settings.max_output_tokens),
    }
    response = end[-3]["response"]
    assert response["id"] == "resp_1"
    assert response["status"] == "completed"
    assert response["status_details"] is None
    assert response["output"][0]["status"] == "completed"
    assert response["output"][0]["content"][0]["transcript"] == "Hello there."
    assert response["audio_ms"] == 1234.6
    every = out + transcript + audio + end
    assert all(isinstance(m["event_id"], str) and m["event_id"] for m in every)
    assert len({m["event_id"] for m in every}) == len(every)
    assert all(json.loads(json.dumps(m)) == m for m in every)  # plain JSON


def test_encode_resamples_the_voice_to_24khz_and_flushes_at_the_end() -> None:
    c = codec(voice_rate=22050)
    c.encode(created())
    pcm = sine(300, 22050, 1.0)
    messages = []
    for i in range(0, len(pcm), 2205):
        messages += c.encode(delta(pcm[i : i + 2205], 22050))
    messages += c.encode(done(ResponseStatus.COMPLETED))
    wire = np.frombuffer(audio_of(messages), dtype="<i2")
    assert abs(len(wire) - 24000) <= 2  # the flush at response.done releases the resampler's tail
    assert peak_hz(wire, 24000) == pytest.approx(300, abs=2)
    assert types(messages)[-8:-2] == [
        "response.output_audio.done",
        "response.output_audio_transcript.done",
        "response.content_part.done",
        "response.output_item.done",
        "conversation.item.done",
        "response.done",
    ]


def test_encode_pcmu_output() -> None:
    c = codec(voice_rate=24000)
    c.decode(update_msg({"audio": {"output": {"format": {"type": "audio/pcmu"}}}}))
    c.encode(created())
    pcm = sine(300, 24000, 0.5)
    messages = c.encode(delta(pcm, 24000)) + c.encode(done(ResponseStatus.COMPLETED))
    wire = mulaw_decode(audio_of(messages))
    assert abs(len(wire) - 4000) <= 2  # 8 kHz, one byte a sample
    assert peak_hz(wire, 8000) == pytest.approx(300, abs=3)


def test_encode_pcma_output() -> None:
    c = codec(voice_rate=22050)
    c.decode(update_msg({"audio": {"output": {"format": {"type": "audio/pcma"}}}}))
    assert c.session_object()["audio"]["output"]["format"] == {"type": "audio/pcma"}
    c.encode(created())
    pcm = sine(300, 22050, 0.5)
    messages = c.encode(delta(pcm, 22050)) + c.encode(done(ResponseStatus.COMPLETED))
    wire = alaw_decode(audio_of(messages))
    assert abs(len(wire) - 4000) <= 2  # 8 kHz, one byte a sample
    assert peak_hz(wire, 8000) == pytest.approx(300, abs=3)
    assert abs(np.abs(wire).max() - np.abs(pcm).max()) < 0.1 * np.abs(pcm).max()


def test_encode_a_cancelled_response() -> None:
    c = codec(voice_rate=22050)
    c.encode(created())
    c.encode(delta(sine(300, 22050, 0.5), 22050))
    end = c.encode(done(ResponseStatus.CANCELLED, "turn_detected", text="Hello"))
    assert "response.output_audio.delta" not in types(end)  # no tail after a cancel: the client cleared its buffer
    response = last(end, "response.done")["response"]
    assert response["status"] == "cancelled"
    assert response["status_details"] == {"type": "cancelled", "reason": "turn_detected"}
    assert response["output"][0]["status"] == "incomplete"
    assert response["output"][0]["content"][0]["transcript"] == "Hello"


def test_encode_a_cancelled_response_without_reason_defaults_to_client_cancelled() -> None:
    c = codec()
    c.encode(created())
    end = c.encode(done(ResponseStatus.CANCELLED))
    assert last(end, "response.done")["response"]["status_details"] == {"type": "cancelled", "reason": "client_cancelled"}


def test_encode_a_failed_response() -> None:
    c = codec()
    c.encode(created())
    end = c.encode(done(ResponseStatus.FAILED, "RuntimeError: boom"))
    details = last(end, "response.done")["response"]["status_details"]
    assert last(end, "response.done")["response"]["status"] == "failed"
    assert details["type"] == "failed"
    assert details["error"]["message"] == "RuntimeError: boom"


def test_input_events() -> None:
    c = codec()
    started = c.encode(InputSpeechStarted(t=0.0, gen=0, item_id="item_u", audio_ms=1234.9))
    assert started[0]["type"] == "input_audio_buffer.speech_started"
    assert (started[0]["audio_start_ms"], started[0]["item_id"]) == (1234, "item_u")
    stopped = c.encode(InputSpeechStopped(t=0.0, gen=0, item_id="item_u", audio_ms=2000.0))
    assert stopped[0]["type"] == "input_audio_buffer.speech_stopped" and stopped[0]["audio_end_ms"] == 2000
    committed = c.encode(InputCommitted(t=0.0, gen=0, item_id="item_u", previous_item_id=None))
    assert types(committed) == ["input_audio_buffer.committed", "conversation.item.added"]
    assert committed[1]["item"]["id"] == "item_u" and committed[1]["item"]["role"] == "user"
    assert types(c.encode(InputCleared(t=0.0, gen=0))) == ["input_audio_buffer.cleared"]
    truncated = c.encode(ItemTruncated(t=0.0, gen=0, item_id="item_a", audio_end_ms=1500.7, text="Hel"))
    assert truncated[0]["type"] == "conversation.item.truncated" and truncated[0]["audio_end_ms"] == 1500
    err = c.encode(ErrorEvent(t=0.0, gen=0, code="llm_failed", message="boom", kind="server_error"))
    assert err[0]["type"] == "error"
    assert err[0]["error"]["code"] == "llm_failed" and err[0]["error"]["type"] == "server_error"


def test_error_from_protocol_error() -> None:
    msg = codec().error(ProtocolError("invalid_json", "bad", param="x", event_id="evt_1"))
    assert msg["type"] == "error"
    assert msg["error"] == {"type": "invalid_request_error", "code": "invalid_json", "message": "bad", "param": "x", "event_id": "evt_1"}


def test_input_transcript_deltas_are_suffixes() -> None:
    c = codec()

    def partial(text: str, item: str = "item_u") -> list[str]:
        return [m["delta"] for m in c.encode(InputTranscriptDelta(t=0.0, gen=0, item_id=item, text=text))]

    assert partial("What") == ["What"]
    assert partial("What is") == [" is"]
    assert partial("What is") == []  # unchanged: nothing new
    assert partial("What's the") == []  # revised earlier words: a delta cannot retract, the final corrects
    assert partial("What's the time") == [" time"]  # suffix of the revised partial
    assert partial("Other", item="item_v") == ["Other"]  # per item
    done_msgs = c.encode(InputTranscriptDone(t=0.0, gen=0, item_id="item_u", text="What's the time?"))
    assert types(done_msgs) == ["conversation.item.input_audio_transcription.completed"]
    assert done_msgs[0]["transcript"] == "What's the time?"
    assert partial("New turn") == ["New turn"]  # the item's partial state was forgotten


def test_turn_metrics_only_when_enabled() -> None:
    ev = TurnMetrics(t=0.0, gen=1, response_id="resp_1", spans={"first_audio_sent": 420.0}, playback_gap_ms=12.5)
    assert codec().encode(ev) == []
    [msg] = codec(send_metrics=True).encode(ev)
    assert msg["type"] == "voiceagent.turn_metrics"
    assert msg["spans_ms"] == {"first_audio_sent": 420.0}
    assert msg["playback_gap_ms"] == 12.5
    assert msg["response_id"] == "resp_1"


def test_session_object_reflects_settings_and_formats() -> None:
    c = codec()
    c.decode(update_msg({"audio": {"input": {"format": "audio/pcmu"}}}))
    obj = c.session_message("session.created", "sess_1")
    assert obj["type"] == "session.created"
    session = obj["session"]
    assert session["id"] == "sess_1"
    assert session["audio"]["input"]["format"] == {"type": "audio/pcmu"}
    assert session["audio"]["output"]["format"] == {"type": "audio/pcm", "rate": 24000}
    assert session["audio"]["input"]["turn_detection"]["type"] == "server_vad"
    assert session["audio"]["input"]["turn_detection"]["threshold"] == Config().vad.threshold
    assert session["audio"]["input"]["transcription"] == {"model": "whisper", "language": "en", "prompt": ""}
    prompted = RealtimeCodec(dataclasses.replace(settings_from_config(Config()), transcription_prompt="Anna, Bob."), 24000)
    assert prompted.session_message("session.updated", "sess_1")["session"]["audio"]["input"]["transcription"]["prompt"] == "Anna, Bob."


def test_a_valid_surrogate_pair_escape_is_text() -> None:
    msg = '{"type": "conversation.item.create", "item": {"role": "user", "content": [{"type": "input_text", "text": "\\ud83d\\ude00"}]}}'
    cmd = codec().decode(msg)
    assert isinstance(cmd, CreateItem) and cmd.text == "\U0001f600"


def test_a_text_item_is_echoed_as_text_with_its_role() -> None:
    c = codec()
    user = c.encode(TextItemAdded(t=0.0, gen=0, item_id="item_u", previous_item_id="item_a", role="user", text="Say hello"))
    assert [m["type"] for m in user] == ["conversation.item.added", "conversation.item.done"]
    assert user[0]["previous_item_id"] == "item_a"
    assert user[0]["item"]["role"] == "user"
    assert user[0]["item"]["content"] == [{"type": "input_text", "text": "Say hello"}]
    agent = c.encode(TextItemAdded(t=0.0, gen=0, item_id="item_a", previous_item_id=None, role="assistant", text="Hi."))
    assert agent[0]["item"]["role"] == "assistant"
    assert agent[0]["item"]["content"] == [{"type": "output_text", "text": "Hi."}]


def test_items_dropped_from_the_history_are_announced_as_deleted() -> None:
    out = codec().encode(ItemsDropped(t=0.0, gen=0, item_ids=("item_1", "item_2")))
    assert [(m["type"], m["item_id"]) for m in out] == [("conversation.item.deleted", "item_1"), ("conversation.item.deleted", "item_2")]
