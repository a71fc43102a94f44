"""The second reading of speech over the agent, in backchannels and sounds only, on real Whisper.

Clips spoken by espeak-ng (made at test time, like the other spoken fixtures): two hummed
backchannels read as well in backchannels and sounds as Whisper's own words for them, within the
server's ``turn.interruption_sound_margin``; real requests read far worse.  The backend reuses the
encoding and free reading of a clip it has just transcribed, and that gives the same margin as a
reading from scratch (docs/decisions/interruptions.md has the whole set's figures).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import ROOT, make_fixtures
from tests.profile import profile_config
from voiceagent.audio import read_wav
from voiceagent.backends.whisper import WhisperStt
from voiceagent.text.backchannel import phrases_for

pytestmark = pytest.mark.models

SOUNDS = [("Mm-hmm.", "en-us+m3"), ("Uh-huh.", "en-us+f3")]
REQUESTS = [("Can you tell me a joke instead?", "en-us+m7"), ("What is the capital of Spain?", "en-us+f3")]


def _clip(text: str, voice: str) -> np.ndarray:
    name = "".join(c if c.isalnum() else "_" for c in f"{voice}_{text}")[:60]
    path: Path = make_fixtures.make(
        make_fixtures.Fixture(name, (text,), voice=voice, lead_s=0.1, tail_s=0.1), ROOT / ".cache" / "fixtures" / "sounds"
    )
    pcm, rate = read_wav(path)
    assert rate == 16000
    return pcm.astype(np.float32) / 32768.0


@pytest.fixture(scope="module")
def stt() -> Iterator[WhisperStt]:
    cfg = profile_config()
    backend = WhisperStt(cfg.stt.model, cfg.cache_path, threads=1, beam_size=1)
    yield backend
    backend.executor.shutdown(wait=False)


def test_hummed_backchannels_read_as_sounds_within_the_margin_and_requests_far_outside_it(stt: WhisperStt) -> None:
    allowed = profile_config().turn.interruption_sound_margin
    assert allowed > 0
    phrases = phrases_for("en")
    for text, voice in SOUNDS:
        margin = stt.read_as_sounds(_clip(text, voice), "en", phrases)
        assert margin is not None and margin >= -allowed, (text, voice, margin)
    for text, voice in REQUESTS:
        margin = stt.read_as_sounds(_clip(text, voice), "en", phrases)
        assert margin is not None and margin < -2 * allowed, (text, voice, margin)


def test_a_clip_just_transcribed_reads_as_from_scratch(stt: WhisperStt) -> None:
    phrases = phrases_for("en")
    audio = _clip(*REQUESTS[0])
    fresh = stt.read_as_sounds(audio, "en", phrases)
    assert stt.transcribe(audio, "en").strip()
    reused = stt.read_as_sounds(audio.copy(), "en", phrases)  # the same samples: found by content
    assert fresh is not None and reused == pytest.approx(fresh, abs=1e-3)
