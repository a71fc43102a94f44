"""Property-based tests (hypothesis) over both wire codecs: whatever a client sends, decoding
returns a command or raises ProtocolError; nothing else escapes, and a refused message leaves
the codec usable for the next one."""

from __future__ import annotations

import base64
import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmarks.fuzz.realtime_gen import KNOWN_TYPES
from voiceagent.config import Config
from voiceagent.errors import ProtocolError
from voiceagent.settings import settings_from_config
from voiceagent.transports.realtime_codec import RealtimeCodec
from voiceagent.transports.twilio_codec import TwilioCodec

REALTIME_TYPES = list(KNOWN_TYPES)  # the client events the fuzzer sends (benchmarks/fuzz/realtime_gen.py)
TWILIO_EVENTS = ["connected", "start", "media", "mark", "dtmf", "stop"]
FIELDS = [
    "type", "event_id", "session", "audio", "item", "item_id", "audio_end_ms", "response", "response_id", "role", "content", "text",
    "format", "input", "output", "voice", "speed", "turn_detection", "instructions", "max_output_tokens", "event", "streamSid",
    "sequenceNumber", "start", "media", "payload", "track", "timestamp", "mark", "name", "dtmf", "digit", "stop", "callSid",
    "customParameters", "tracks", "accountSid", "protocol", "version",
]  # fmt: skip

leaf = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=40)
    | st.sampled_from(REALTIME_TYPES + TWILIO_EVENTS + ["audio/pcm", "audio/pcmu", "user", "assistant", "input_text", "server_vad"])
    | st.binary(max_size=64).map(lambda b: base64.b64encode(b).decode())
)
json_value = st.recursive(
    leaf, lambda children: st.lists(children, max_size=4) | st.dictionaries(st.sampled_from(FIELDS), children, max_size=5), max_leaves=20
)


def message(kinds: list[str], key: str) -> st.SearchStrategy[dict[str, Any]]:
    return st.builds(lambda kind, rest: {**rest, key: kind}, st.sampled_from(kinds), st.dictionaries(st.sampled_from(FIELDS), json_value))


def realtime() -> RealtimeCodec:
    return RealtimeCodec(settings_from_config(Config()), 22050)


def decodes_or_refuses(codec: Any, text: str) -> None:
    try:
        codec.decode(text)
    except ProtocolError as exc:
        assert exc.code and exc.message  # a clear error event can be made from it


FAST = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(st.one_of(st.text(max_size=200), json_value.map(json.dumps), message(REALTIME_TYPES, "type").map(json.dumps)))
def test_realtime_decode_returns_a_command_or_a_protocol_error(text: str) -> None:
    codec = realtime()
    decodes_or_refuses(codec, text)
    # whatever came before, the codec still decodes a good message
    assert codec.decode(json.dumps({"type": "input_audio_buffer.clear"})) is not None


@FAST
@given(st.lists(message(REALTIME_TYPES, "type").map(json.dumps), max_size=8))
def test_a_sequence_of_realtime_messages_never_escapes_protocol_errors(texts: list[str]) -> None:
    codec = realtime()
    for text in texts:
        decodes_or_refuses(codec, text)


@FAST
@given(st.lists(st.one_of(st.text(max_size=100), json_value.map(json.dumps), message(TWILIO_EVENTS, "event").map(json.dumps)), max_size=8))
def test_twilio_decode_returns_a_command_or_a_protocol_error(texts: list[str]) -> None:
    codec = TwilioCodec(22050)
    for text in texts:
        decodes_or_refuses(codec, text)
