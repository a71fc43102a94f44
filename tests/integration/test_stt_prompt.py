"""The transcription prompt with the real Whisper models (voiceagent.text.stt_prompt).

* Whisper base at beam 5 (the ``quality`` profile) hears "What's the weather in Paris?", read by
  the three espeak-ng voices of the spoken eval in which it heard "What's the winner in Paris?"
  without a prompt (benchmarks/eval_stt.py on benchmarks/eval_tool_questions.toml), when the session's
  weather tool's description is the prompt.
* A prompt does not eat into the decoder's token cap (CTranslate2 counts the prompt's tokens in
  ``max_length``): a capped decode still writes its tokens, an uncapped one the whole sentence.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

import voiceagent.backends.whisper as whisper
from tests.conftest import ROOT, make_fixtures
from tests.profile import profile_config
from voiceagent.audio import read_wav
from voiceagent.backends.whisper import WhisperStt

pytestmark = [pytest.mark.models, pytest.mark.unpaced]

WEATHER_PROMPT = "Get the current weather in a city."
# A long prompt of the kind a client with many tools gets: over MAX_PROMPT_TOKENS, so it is cut.
LONG_PROMPT = " ".join(
    [
        "Get the current weather in a city. Send an email. Get the current local time and date.",
        "Start a timer or reminder; the assistant speaks up when it is due. Book a table at a restaurant.",
        "Look up a flight by its number. Play a song by its title or artist. Turn the lights on or off.",
        "Add an item to the shopping list. Read the latest news headlines. Convert an amount between currencies.",
    ]
)


def _clip(name: str, text: str, voice: str = "en-us", wpm: int = 160) -> np.ndarray:
    # Padded as the STT stage pads a segment (300 ms of prefix, 96 ms of tail), as eval_stt.py does.
    fixture = make_fixtures.Fixture(name, (text,), voice=voice, wpm=wpm, lead_s=0.3, tail_s=0.096)
    pcm, rate = read_wav(make_fixtures.make(fixture, ROOT / ".cache" / "fixtures" / "stt_prompt"))
    assert rate == 16000
    return pcm.astype(np.float32) / 32768.0


@pytest.fixture(scope="module", params=["whisper-tiny", "whisper-base"])
def greedy(request: pytest.FixtureRequest) -> Iterator[WhisperStt]:
    backend = WhisperStt(request.param, profile_config().cache_path, threads=1, beam_size=1)
    yield backend
    backend.executor.shutdown(wait=False)


@pytest.mark.parametrize("voice", ["en-us+m3", "en+f2", "en-gb-x-rp"])
def test_base_hears_the_weather_with_the_weather_tools_description(voice: str) -> None:
    stt = WhisperStt("whisper-base", profile_config().cache_path, threads=2, beam_size=5)
    try:
        audio = _clip(f"paris_weather_{voice.replace('+', '_')}", "What's the weather in Paris?", voice)
        text = stt.transcribe(audio, "en", WEATHER_PROMPT).lower()
        assert "weather" in text and "paris" in text, text
    finally:
        stt.executor.shutdown(wait=False)


def test_a_prompt_leaves_the_decoders_token_cap_as_it_was(greedy: WhisperStt, monkeypatch: pytest.MonkeyPatch) -> None:
    audio = _clip("london_paris", "If I travel from London to Paris by train, how long does the journey usually take?")
    whole = greedy.transcribe(audio, "en", LONG_PROMPT).lower()
    assert all(word in whole for word in ("london", "paris", "journey")), whole  # nothing cut by the prompt's length
    monkeypatch.setattr(whisper, "max_tokens", lambda seconds: 5)  # the loop guard's cap, made small
    capped = greedy.transcribe(audio, "en", LONG_PROMPT)
    # Five tokens (a word is one or more) written after a prompt of about 100; before the cap
    # counted the prompt, nothing at all.
    words = capped.lower().strip(",. ").split()
    assert 2 <= len(words) <= 5 and whole.split()[: len(words)] == words, (capped, whole)
