"""``session.type = "transcription"``: VAD and STT only (scripted fakes, no models)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from voiceagent.config import Config
from voiceagent.errors import ProtocolError
from voiceagent.events import InputCommitted, InputSpeechStopped, InputTranscriptDone
from voiceagent.settings import settings_from_config
from voiceagent.transports.realtime_codec import RealtimeCodec
from voiceagent.transports.realtime_commands import UpdateSession

from .fakes import FakeLlm, FakeStt, FakeTurn
from .test_session import MakeFakes, Run, make_config, make_fakes, running, say_turn, tokens

__all__ = ["make_fakes"]  # the fixture, imported for pytest


def decode(codec: RealtimeCodec, session: dict[str, Any]) -> Any:
    return codec.decode(json.dumps({"type": "session.update", "session": session}))


def test_a_transcription_update_is_decoded_and_echoed_in_the_ga_shape() -> None:
    from openai.types.realtime.realtime_transcription_session_create_request import RealtimeTranscriptionSessionCreateRequest

    codec = RealtimeCodec(settings_from_config(Config()), 22050)
    cmd = decode(codec, {"type": "transcription", "audio": {"input": {"transcription": {"model": "whisper-1", "language": "en"}}}})
    assert isinstance(cmd, UpdateSession) and cmd.changes == {"kind": "transcription", "language": "en"}
    codec.settings = dataclasses.replace(codec.settings, **cmd.changes)
    obj = codec.session_object()
    assert obj["type"] == "transcription" and "instructions" not in obj and "output" not in obj["audio"]
    RealtimeTranscriptionSessionCreateRequest.model_validate(obj)


@pytest.mark.parametrize(
    ("session", "param"),
    [
        ({"type": "transcription", "instructions": "Be brief."}, "session.instructions"),
        ({"type": "transcription", "audio": {"output": {"voice": "joe"}}}, "session.audio.output"),
        ({"type": "translation"}, "session.type"),
    ],
)
def test_what_a_transcription_session_has_no_use_for_is_refused(session: dict[str, Any], param: str) -> None:
    with pytest.raises(ProtocolError) as info:
        decode(RealtimeCodec(settings_from_config(Config()), 22050), session)
    assert info.value.param == param


@pytest.mark.parametrize(
    ("session", "code", "param"),
    [
        ({"type": "transcription", "include": ["item.input_audio_transcription.logprobs"]}, "unsupported_field", "session.include"),
        ({"type": "transcription", "audio": {"input": {"loudness": 3}}}, "unknown_parameter", "session.audio.input.loudness"),
        (
            {"type": "transcription", "audio": {"input": {"turn_detection": {"type": "server_vad", "idle_timeout_ms": 5000}}}},
            "unsupported_value",
            "session.audio.input.turn_detection.idle_timeout_ms",
        ),
    ],
)
def test_a_transcription_sessions_fields_go_through_the_support_table(session: dict[str, Any], code: str, param: str) -> None:
    """Refused or unknown fields are named in an error (after session.updated), as in a realtime
    session: never silently accepted."""
    cmd = decode(RealtimeCodec(settings_from_config(Config()), 22050), session)
    assert isinstance(cmd, UpdateSession)
    assert [(e.code, e.param) for e in cmd.refused] == [(code, param)]


def test_a_transcription_session_transcribes_each_turn_and_never_answers(run: Run, make_fakes: MakeFakes) -> None:
    fakes = make_fakes(stt=FakeStt(["first words", "second words"]), turn=FakeTurn(0.9))

    async def main() -> None:
        async with running(fakes, make_config()) as (session, log):
            session.update(kind="transcription")
            await say_turn(session)
            i_first, first = await log.wait_type(InputTranscriptDone)
            await say_turn(session)
            _, second = await log.wait_type(InputTranscriptDone, after=i_first + 1)
            assert (first.text, second.text) == ("first words", "second words")
            assert len(log.of_type(InputSpeechStopped)) == 2 and len(log.of_type(InputCommitted)) == 2
            assert fakes.llm.calls.items == []  # no answer, no speculation, no prefill
            assert fakes.tts.calls.items == []
            assert session.active_response_id is None
            with pytest.raises(ProtocolError) as info:
                await session.create_response()
            assert info.value.code == "invalid_state"

    run(main(), 20)


def test_no_switch_to_transcription_while_a_response_is_active(run: Run, make_fakes: MakeFakes) -> None:
    """A response under way would go on speaking in a session that no longer answers: the switch
    is refused until it is cancelled, and the settings stay as they were."""
    fakes = make_fakes(llm=FakeLlm([tokens("A long answer that is still being spoken.")]), turn=FakeTurn(0.9))

    async def main() -> None:
        async with running(fakes, make_config()) as (session, _log):
            await session.create_response()
            assert session.replies.core.active_response_id is not None
            with pytest.raises(ProtocolError) as info:
                await session.check_update(kind="transcription")
            assert (info.value.code, info.value.param) == ("invalid_state", "session.type")
            assert session.settings.kind == "realtime"

    run(main(), 30)
