"""The second reading of speech over the agent, in backchannels and sounds only, on real Whisper.

Clips spoken by espeak-ng (made at test time, like the other spoken fixtures): two hummed
backchannels read as well in backchannels and sounds as Whisper's own words for them, within the
server's ``turn.interruption_sound_margin``; real requests read far worse, and so does a sentence
on which Whisper tiny's raw decode loops (the reading weighs the transcript the loop guard gave,
never the loop).  The backend reuses the encoding of a clip it has just transcribed, and that
gives the same margin as a reading from scratch (docs/decisions/interruptions.md has the whole
set's figures).
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

pytestmark = [pytest.mark.models, pytest.mark.unpaced]

SOUNDS = [("Mm-hmm.", "en-us+m3"), ("Uh-huh.", "en-us+f3")]
REQUESTS = [("Can you tell me a joke instead?", "en-us+m7"), ("What is the capital of Spain?", "en-us+f3")]


def _clip(text: str, voice: str, wpm: int = 175, lead_s: float = 0.1, tail_s: float = 0.1) -> np.ndarray:
    name = "".join(c if c.isalnum() else "_" for c in f"{voice}_{wpm}_{lead_s}_{text}")[:60]
    spec = make_fixtures.Fixture(name, (text,), voice=voice, wpm=wpm, lead_s=lead_s, tail_s=tail_s)
    path: Path = make_fixtures.make(spec, ROOT / ".cache" / "fixtures" / "sounds")
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
        audio = _clip(text, voice)
        heard = stt.transcribe(audio, "en")
        margin = stt.read_as_sounds(audio, "en", phrases, heard)
        assert margin is not None and margin >= -allowed, (text, voice, heard, margin)
    for text, voice in [*REQUESTS, ("Tell me a short fact about the moon.", "en-us+f3")]:
        # The last: a voice on which tiny's greedy decode loops after 2 s of silence (test_stt_loops).
        audio = _clip(text, voice, 120, 2.0, 0.5) if "moon" in text else _clip(text, voice)
        heard = stt.transcribe(audio, "en")
        margin = stt.read_as_sounds(audio, "en", phrases, heard)
        assert margin is not None and margin < -2 * allowed, (text, voice, heard, margin)
    assert stt.read_as_sounds(_clip(*SOUNDS[0]), "en", phrases, "") is None  # no transcript: nothing to weigh


def test_a_clip_just_transcribed_reads_as_from_scratch(stt: WhisperStt) -> None:
    phrases = phrases_for("en")
    audio = _clip(*REQUESTS[0])
    heard = "Can you tell me a joke instead?"
    fresh = stt.read_as_sounds(audio, "en", phrases, heard)
    assert stt.transcribe(audio, "en").strip()
    reused = stt.read_as_sounds(audio.copy(), "en", phrases, heard)  # the same samples: found by content
    assert fresh is not None and reused == pytest.approx(fresh, abs=1e-3)
