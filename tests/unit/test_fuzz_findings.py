"""What the protocol fuzzer (benchmarks/fuzz/) found against a live server, pinned down on the codecs.

Each of these reached the connection handler as an exception other than ProtocolError (the server
then closed the connection with 1011), or was accepted although the protocol forbids it.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from voiceagent.config import Config
from voiceagent.errors import ProtocolError
from voiceagent.settings import settings_from_config
from voiceagent.transports import fields
from voiceagent.transports.realtime_codec import RealtimeCodec
from voiceagent.transports.realtime_commands import CancelResponse, UpdateSession
from voiceagent.transports.twilio_codec import Media, Start, TwilioCodec


def realtime() -> RealtimeCodec:
    return RealtimeCodec(settings_from_config(Config()), 22050)


def started_twilio() -> TwilioCodec:
    codec = TwilioCodec(22050)
    assert isinstance(codec.decode(json.dumps({"event": "start", "start": {"streamSid": "MZ1"}})), Start)
    return codec


def test_nesting_at_the_recursion_limit_with_an_escape_is_refused_not_a_recursion_error() -> None:
    """The parser accepts a message nested just under Python's recursion limit; with a ``\\u``
    escape it is re-encoded (the lone-surrogate check) one call deeper, which raised RecursionError
    on the live server.  Where the limit falls depends on the stack: every depth around it is tried."""
    for depth in range(400, 1100):
        inner = "[" * depth + '"\\u00e9"' + "]" * depth
        for decode, text in (
            (realtime().decode, f'{{"type": "x", "a": {inner}}}'),
            (started_twilio().decode, f'{{"event": "media", "streamSid": "MZ1", "media": {inner}}}'),
        ):
            with pytest.raises(ProtocolError):
                decode(text)


def test_a_recursion_error_while_re_encoding_is_invalid_json(monkeypatch: pytest.MonkeyPatch) -> None:
    """The one depth where parsing passes and re-encoding does not, made certain."""

    def too_deep(*args: Any, **kwargs: Any) -> str:
        raise RecursionError("maximum recursion depth exceeded while encoding a JSON object")

    monkeypatch.setattr(fields.json, "dumps", too_deep)
    with pytest.raises(ProtocolError) as info:
        fields.parse_object('{"type": "x", "a": [["\\u00e9"]]}', "a client event")
    assert (info.value.code, info.value.message) == ("invalid_json", "message is nested too deeply")


@pytest.mark.parametrize(
    "msg",
    [
        {"event": "media", "sequenceNumber": "9" * 5000, "streamSid": "MZ1", "media": {"payload": ""}},
        {"event": "media", "streamSid": "MZ1", "media": {"payload": "", "timestamp": "9" * 5000}},
    ],
)
def test_twilio_digit_strings_longer_than_python_converts_are_invalid_values(msg: dict[str, Any]) -> None:
    """Twilio sends numbers as digit strings; int() of one over 4300 digits raised ValueError."""
    with pytest.raises(ProtocolError) as info:
        started_twilio().decode(json.dumps(msg))
    assert info.value.code == "invalid_value"
    assert len(info.value.message) < 200  # the value is not echoed whole


def test_twilio_start_with_a_huge_digit_string_rate_is_refused() -> None:
    start = {"event": "start", "start": {"streamSid": "MZ1", "mediaFormat": {"sampleRate": "8" * 10_000}}}
    with pytest.raises(ProtocolError) as info:
        TwilioCodec(22050).decode(json.dumps(start))
    assert (info.value.code, info.value.param) == ("invalid_value", "start.mediaFormat.sampleRate")


def test_twilio_ordinary_digit_strings_still_work() -> None:
    cmd = started_twilio().decode(
        json.dumps({"event": "media", "sequenceNumber": "2", "streamSid": "MZ1", "media": {"payload": "", "timestamp": "40"}})
    )
    assert isinstance(cmd, Media) and cmd.timestamp_ms == 40


@pytest.mark.parametrize("transcription", [5, "en", [], True])
def test_a_transcription_that_is_not_an_object_is_an_error(transcription: Any) -> None:
    """It was ignored: ``session.updated`` answered a message the protocol refuses."""
    msg = {"type": "session.update", "event_id": "evt_1", "session": {"audio": {"input": {"transcription": transcription}}}}
    with pytest.raises(ProtocolError) as info:
        realtime().decode(json.dumps(msg))
    assert (info.value.code, info.value.param, info.value.event_id) == ("invalid_value", "session.audio.input.transcription", "evt_1")


def test_a_null_or_object_transcription_is_accepted() -> None:
    codec = realtime()
    for transcription in (None, {}, {"model": "whisper", "language": "fr"}):
        cmd = codec.decode(json.dumps({"type": "session.update", "session": {"audio": {"input": {"transcription": transcription}}}}))
        assert isinstance(cmd, UpdateSession)
    assert cmd.changes == {"language": "fr"}


@pytest.mark.parametrize("response_id", [5, [], {}, True, 1.5])
def test_response_cancel_with_a_response_id_that_is_not_a_string_is_an_error(response_id: Any) -> None:
    """It was read as no id at all, which cancels whatever response is active."""
    with pytest.raises(ProtocolError) as info:
        realtime().decode(json.dumps({"type": "response.cancel", "event_id": "evt_c", "response_id": response_id}))
    assert (info.value.code, info.value.param, info.value.event_id) == ("invalid_value", "response_id", "evt_c")


def test_response_cancel_with_or_without_a_string_id() -> None:
    codec = realtime()
    assert codec.decode(json.dumps({"type": "response.cancel"})) == CancelResponse(None, None)
    assert codec.decode(json.dumps({"type": "response.cancel", "response_id": None})) == CancelResponse(None, None)
    assert codec.decode(json.dumps({"type": "response.cancel", "response_id": "resp_1"})) == CancelResponse("resp_1", None)
