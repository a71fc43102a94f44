"""Noise suppression of a session's input audio (voiceagent/denoise.py): the real suppressor
(WebRTC's, from the livekit wheel) on generated noise; the session's wiring with the fake VAD;
the Realtime field decoded, mirrored in the GA shape, and refused where it cannot run."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import numpy as np
import pytest

from voiceagent.config import Config, VadConfig
from voiceagent.denoise import FRAME, NoiseSuppressor
from voiceagent.errors import ConfigError, ProtocolError
from voiceagent.events import InputSpeechStarted
from voiceagent.settings import settings_from_config
from voiceagent.transports.realtime_codec import RealtimeCodec
from voiceagent.transports.realtime_commands import UpdateSession

from .fakes import FakeVad, frames
from .test_session import MakeFakes, Run, make_config, make_fakes, running

__all__ = ["make_fakes"]  # the fixture, imported for pytest


def dbfs(pcm: np.ndarray[Any, Any]) -> float:
    return float(20 * np.log10(np.sqrt(np.mean(np.square(pcm.astype(np.float64) / 32768.0)))))


def white_noise(seconds: float, rms: float, seed: int = 1) -> np.ndarray[Any, Any]:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(int(16000 * seconds)) * rms * 32767).astype(np.int16)


def test_steady_noise_loses_more_than_10_db_once_the_suppressor_has_heard_it() -> None:
    noise = white_noise(3.0, 0.1)
    ns = NoiseSuppressor()
    out = np.concatenate([ns.process(noise[i : i + 320]) for i in range(0, len(noise), 320)])
    assert len(out) == len(noise)
    assert dbfs(out[-16000:]) < dbfs(noise[-16000:]) - 10.0, (dbfs(noise[-16000:]), dbfs(out[-16000:]))


def test_blocks_that_are_not_whole_frames_keep_their_remainder_for_the_next() -> None:
    ns = NoiseSuppressor()
    noise = white_noise(0.1, 0.05)
    assert len(ns.process(noise[:150])) == 0
    assert len(ns.process(noise[150:330])) == 2 * FRAME  # 330 samples: two frames, 10 left
    assert len(ns.process(noise[330:1600])) == 1280  # 10 + 1270 = 1280: eight frames exactly


@pytest.mark.parametrize("reduction", ["", "near_field"])
def test_a_session_with_noise_reduction_hands_its_vad_the_noise_suppressed(run: Run, make_fakes: MakeFakes, reduction: str) -> None:
    """Two seconds of steady noise loud enough for the (level-reading) fake VAD, then a tone:
    without suppression the noise starts the turn at once; with it, only the tone does."""
    fakes = make_fakes(vad=FakeVad(level=0.06))
    config = make_config()
    config = dataclasses.replace(config, vad=dataclasses.replace(config.vad, noise_reduction=reduction))
    t = np.arange(8000) / 16000.0
    tone = (0.5 * np.sin(2 * np.pi * 300 * t) * 32767).astype(np.int16)
    audio = np.concatenate([white_noise(2.0, 0.1), tone])

    async def main() -> float:
        async with running(fakes, config) as (session, log):
            for frame in frames(audio):
                await session.append_audio(frame)
            _, started = await log.wait_type(InputSpeechStarted)
            return float(started.audio_ms)

    started_ms = run(main())
    if reduction:
        assert started_ms >= 1900, started_ms
    else:
        assert started_ms < 500, started_ms


def codec() -> RealtimeCodec:
    return RealtimeCodec(settings_from_config(Config()), 24000)


def update(session: dict[str, Any]) -> Any:
    return codec().decode(json.dumps({"type": "session.update", "session": session}))


@pytest.mark.parametrize(("value", "kind"), [({"type": "near_field"}, "near_field"), ({"type": "far_field"}, "far_field"), (None, None)])
def test_the_realtime_field_is_decoded_and_mirrored_in_the_ga_shape(value: Any, kind: str | None) -> None:
    from openai.types.realtime.realtime_session_create_request import RealtimeSessionCreateRequest

    cmd = update({"audio": {"input": {"noise_reduction": value}}})
    assert isinstance(cmd, UpdateSession) and cmd.changes == {"noise_reduction": kind} and cmd.refused == ()
    c = codec()
    c.settings = dataclasses.replace(c.settings, **cmd.changes)
    obj = c.session_object()
    assert obj["audio"]["input"]["noise_reduction"] == value
    RealtimeSessionCreateRequest.model_validate({k: v for k, v in obj.items() if k not in ("object", "id", "voiceagent")})


@pytest.mark.parametrize(
    ("value", "code", "param"),
    [
        ({"type": "studio"}, "invalid_value", "session.audio.input.noise_reduction.type"),
        ({"type": "near_field", "level": 3}, "unknown_parameter", "session.audio.input.noise_reduction.level"),
        ("near_field", "invalid_value", "session.audio.input.noise_reduction"),
    ],
)
def test_a_wrong_noise_reduction_is_an_error_naming_it(value: Any, code: str, param: str) -> None:
    with pytest.raises(ProtocolError) as info:
        update({"audio": {"input": {"noise_reduction": value}}})
    assert (info.value.code, info.value.param) == (code, param)


def test_a_server_without_the_suppressor_refuses_it_and_keeps_its_settings(
    run: Run, make_fakes: MakeFakes, monkeypatch: pytest.MonkeyPatch
) -> None:
    import voiceagent.session as session_module

    monkeypatch.setattr(session_module, "suppressor_installed", lambda: False)

    async def main() -> None:
        async with running(make_fakes(), make_config()) as (session, _log):
            with pytest.raises(ProtocolError) as info:
                await session.check_update(noise_reduction="near_field")
            assert info.value.code == "unsupported_value" and "livekit" in str(info.value)
            assert session.settings.noise_reduction is None

    run(main())


def test_the_server_default_is_off_and_checked() -> None:
    assert settings_from_config(Config()).noise_reduction is None
    assert settings_from_config(Config(vad=VadConfig(noise_reduction="far_field"))).noise_reduction == "far_field"
    with pytest.raises(ConfigError, match=r"vad\.noise_reduction"):
        VadConfig(noise_reduction="loud")


def test_a_transcription_session_mirrors_its_noise_reduction_in_the_ga_shape() -> None:
    from openai.types.realtime.realtime_transcription_session_create_request import RealtimeTranscriptionSessionCreateRequest

    cmd = update({"type": "transcription", "audio": {"input": {"noise_reduction": {"type": "far_field"}}}})
    assert isinstance(cmd, UpdateSession) and cmd.changes == {"kind": "transcription", "noise_reduction": "far_field"}
    c = codec()
    c.settings = dataclasses.replace(c.settings, **cmd.changes)
    obj = c.session_object()
    assert obj["audio"]["input"]["noise_reduction"] == {"type": "far_field"}
    RealtimeTranscriptionSessionCreateRequest.model_validate(obj)


def test_a_server_default_the_machine_cannot_run_stops_start_up_with_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """``vad.noise_reduction`` without ``livekit``: refused before any model loads (as a model
    setting is), not by every session that opens."""
    from voiceagent import cli
    from voiceagent.config import load_config

    monkeypatch.setattr(cli, "suppressor_installed", lambda: False)
    config = load_config(env={}, overrides={"profile": "fast", "vad.noise_reduction": "near_field"})
    with pytest.raises(ConfigError, match=r"^vad\.noise_reduction = 'near_field': noise reduction needs the livekit package"):
        cli._require_models(config)
