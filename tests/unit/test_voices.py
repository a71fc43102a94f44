"""The voice table (``tts.voices``): parsed from the configuration, picked per session with
``session.update``'s ``voice``, refused when unknown or once the session has spoken."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from voiceagent.backends.registry import Engines
from voiceagent.config import OPENAI_VOICES, Config, TtsConfig
from voiceagent.errors import ConfigError, ProtocolError
from voiceagent.events import AudioDelta, ResponseDone
from voiceagent.transports.realtime_audio import WireAudio

from .fakes import FakeEngines, FakeLlm, FakeTts
from .test_session import MakeFakes, Run, make_config, make_fakes, running, tokens

__all__ = ["make_fakes"]  # the fixture, imported for pytest


def test_the_table_has_the_default_voice_first_then_the_named_ones() -> None:
    tts = TtsConfig(voices="calm = en_US-lessac-medium, mine=/voices/me.onnx")
    assert tts.voice_table == {"joe": "joe", "calm": "en_US-lessac-medium", "mine": "/voices/me.onnx"}
    assert TtsConfig().voice_table == {"joe": "joe"}


@pytest.mark.parametrize("voices", ["calm", "=joe", "joe=joe", "a=b, a=c", "bad name=joe"])
def test_a_bad_table_fails_at_start_up(voices: str) -> None:
    with pytest.raises(ConfigError, match=r"tts\.voices"):
        TtsConfig(voices=voices)


def test_every_openai_voice_name_speaks_with_the_default_voice_unless_mapped() -> None:
    assert TtsConfig().openai_voice_map == dict.fromkeys(OPENAI_VOICES, "joe")
    tts = TtsConfig(voices="calm=en_US-lessac-medium", openai_voices="ash=calm, marin = calm")
    assert tts.openai_voice_map == {**dict.fromkeys(OPENAI_VOICES, "joe"), "ash": "calm", "marin": "calm"}
    assert [tts.resolve_voice(n) for n in ("ash", "alloy", "calm", "joe", "bogus")] == ["calm", "joe", "calm", "joe", None]
    # A voice of the table named like an OpenAI voice is that voice, not the mapping.
    assert TtsConfig(voices="ash=en_US-lessac-medium", openai_voices="ash=joe").resolve_voice("ash") == "ash"


def test_the_openai_names_match_the_openai_packages_voice_literal() -> None:
    import typing

    from openai.types.realtime.realtime_audio_config_output import RealtimeAudioConfigOutput

    declared = {
        name
        for arg in typing.get_args(RealtimeAudioConfigOutput.model_fields["voice"].annotation)
        for member in typing.get_args(arg)
        for name in typing.get_args(member) or ([member] if isinstance(member, str) else [])
    }
    assert set(OPENAI_VOICES) == declared


@pytest.mark.parametrize("mapping", ["ash", "bogus=joe", "ash=nobody", "ash=joe, ash=joe"])
def test_a_bad_openai_voice_mapping_fails_at_start_up(mapping: str) -> None:
    with pytest.raises(ConfigError, match=r"tts\.openai_voices"):
        TtsConfig(openai_voices=mapping)


def test_an_openai_voice_name_is_accepted_and_the_session_shows_the_voice_it_speaks_with(run: Run, make_fakes: MakeFakes) -> None:
    fakes = make_fakes(llm=FakeLlm([tokens("Hello.")]))
    engines = with_voices(fakes, calm=fakes.tts)
    config = dataclasses.replace(make_config(), tts=TtsConfig(voices="calm=en_US-lessac-medium", openai_voices="marin=calm"))

    async def main() -> None:
        from voiceagent.session import Session

        from .fakes import EventLog

        session = Session(engines, config, session_id="sess_voice3")
        await session.start()
        log = EventLog(session)
        log.start()
        try:
            await session.check_update(voice="ash")
            assert session.update(voice="ash").voice == "joe"
            await session.check_update(voice="marin")
            assert session.update(voice="marin").voice == "calm"
            await session.add_text("Hi")
            await log.wait_type(ResponseDone, response_id=await session.create_response())
            await session.check_update(voice="marin")  # the voice it already speaks with: no change
            with pytest.raises(ProtocolError) as info:
                await session.check_update(voice="ash")  # joe: a change after the session spoke
            assert info.value.code == "cannot_update_voice"
        finally:
            await session.aclose()
            await log.finished()

    run(main(), 20)


def with_voices(fakes: FakeEngines, **voices: FakeTts) -> Engines:
    return dataclasses.replace(fakes.engines, voices={"joe": fakes.tts, **voices})


def test_a_known_voice_speaks_the_sessions_replies(run: Run, make_fakes: MakeFakes) -> None:
    fakes = make_fakes(llm=FakeLlm([tokens("Hello there.")]))
    other = FakeTts(sample_rate=16_000)
    engines = with_voices(fakes, calm=other)
    config = make_config()

    async def main() -> None:
        from voiceagent.session import Session

        from .fakes import EventLog

        session = Session(engines, config, session_id="sess_voice")
        await session.start()
        log = EventLog(session)
        log.start()
        try:
            assert session.voice_names == ["joe", "calm"]
            await session.check_update(voice="calm")
            session.update(voice="calm")
            await session.add_text("Hi")
            await log.wait_type(ResponseDone, response_id=await session.create_response())
            assert other.calls.items == ["Hello there."] and fakes.tts.calls.items == []
            assert {d.rate for d in log.of_type(AudioDelta)} == {16_000}
        finally:
            await session.aclose()
            await log.finished()
        other.executor.shutdown(wait=True)

    run(main(), 20)


def test_an_unknown_voice_is_refused_with_the_names(run: Run, make_fakes: MakeFakes) -> None:
    fakes = make_fakes()

    async def main() -> None:
        async with running(fakes, make_config()) as (session, _log):
            with pytest.raises(ProtocolError) as info:
                await session.check_update(voice="bogus")
            assert info.value.param == "session.audio.output.voice"
            assert "bogus" in info.value.message and "joe" in info.value.message and "ash" in info.value.message
            assert session.settings.voice == Config().tts.model

    run(main(), 20)


def test_the_voice_cannot_change_once_the_session_has_spoken(run: Run, make_fakes: MakeFakes) -> None:
    fakes = make_fakes(llm=FakeLlm([tokens("Hello.")]))
    engines = with_voices(fakes, calm=fakes.tts)

    async def main() -> None:
        from voiceagent.session import Session

        from .fakes import EventLog

        session = Session(engines, make_config(), session_id="sess_voice2")
        await session.start()
        log = EventLog(session)
        log.start()
        try:
            await session.check_update(voice="calm")  # before any audio: allowed
            await session.add_text("Hi")
            await log.wait_type(ResponseDone, response_id=await session.create_response())
            with pytest.raises(ProtocolError) as info:
                await session.check_update(voice="calm")
            assert info.value.code == "cannot_update_voice"
            await session.check_update(voice=session.settings.voice)  # the same voice again is no change
        finally:
            await session.aclose()
            await log.finished()

    run(main(), 20)


def test_the_wire_resamples_each_responses_own_rate() -> None:
    wire = WireAudio(22_050)
    wire.open("r1")
    out = b"".join(wire.out("r1", np.full(1600, 1000, dtype=np.int16), 16_000) for _ in range(10)) + wire.close("r1", flush=True)
    assert abs(len(out) // 2 - 24_000) <= 48  # one second at 16 kHz is one second at 24 kHz
