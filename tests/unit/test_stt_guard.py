"""The STT loop guard (issue #12): what counts as a loop, where it is cut, what is left alone;
and the two seams that use it — the Whisper backend's retry-then-cut and the STT stage.

The looping strings are the ones Whisper tiny and base wrote for "Tell me a short fact about the
moon." read by espeak-ng (see tests/integration/test_stt_loops.py for the audio)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from voiceagent.backends.whisper import RETRY_REPETITION_PENALTY, decode_guarded
from voiceagent.config import Config, PlayoutConfig, SttConfig, TurnConfig, VadConfig
from voiceagent.events import InputTranscriptDelta, InputTranscriptDone, ResponseDone
from voiceagent.text.stt_guard import MAX_COMPRESSION_RATIO, check, compression_ratio, max_tokens, max_words
from voiceagent.tools.spec import Message

from .fakes import FakeEngines, FakeLlm, FakeStt, FakeTurn, pause, speak
from .test_session import running

MOON = "Tell me a short fact about the moon."
# Whisper base, 4.2 s of audio starting with 2 s of silence: 100 words, cut by the length limit.
BASE_LOOP = " ".join([MOON] * 12) + " Tell me a short fact about"
# Whisper tiny, the first 0.6 s of the sentence: 112 tokens.
TINY_PREFIX_LOOP = " ".join(["Tell me..."] * 37) + " Te"
# Whisper tiny, en-us+f3 at 120 wpm after 2 s of silence: the misheard sentence twice.
TINY_TWICE = "Tell me a short fact I'm out in the moon Tell me a short fact I'm out in the moon"


# --------------------------------------------------------------------------- loops


def test_a_sentence_repeated_twelve_times_is_cut_to_one() -> None:
    for text in (" ".join([MOON] * 12), BASE_LOOP):
        v = check(text, 4.2)
        assert (v.looped, v.reason, v.text) == (True, "repeat", MOON)


def test_a_short_phrase_looping_over_a_short_clip() -> None:
    v = check(TINY_PREFIX_LOOP, 0.6)
    assert (v.looped, v.reason, v.text) == (True, "repeat", "Tell me...")


def test_a_repeated_two_word_phrase_keeps_what_came_before_it() -> None:
    v = check("So I said " + " ".join(["come on,"] * 10), 5.0)
    assert (v.looped, v.reason, v.text) == (True, "repeat", "So I said come on,")


def test_a_long_unit_repeated_once_is_a_loop() -> None:
    v = check(TINY_TWICE, 5.4)
    assert (v.looped, v.text) == (True, "Tell me a short fact I'm out in the moon")


def test_more_words_than_the_audio_can_hold() -> None:
    text = "one two three four five six seven eight nine ten eleven twelve thirteen"
    v = check(text, 1.0)
    assert (v.looped, v.reason) == (True, "rate")
    assert v.text == "one two three four five six seven eight nine ten"  # max_words(1.0) == 10
    assert max_words(1.0) == 10


def test_a_decode_that_fills_its_token_limit_is_a_loop() -> None:
    # The backend caps the decoder at max_tokens(seconds): a loop stops after a few copies, too
    # few for the repeat rule, and filling the cap is what gives it away.
    text = "Tell me... Tell me... Tell me... Tell"
    assert not check(text, 0.6).looped
    v = check(text, 0.6, tokens=max_tokens(0.6))
    assert (v.looped, v.reason, v.text) == (True, "rate", "Tell me...")
    assert not check(MOON, 2.5, tokens=9).looped


def test_repetition_inside_a_word_is_caught_by_compression() -> None:
    assert compression_ratio("ha" * 60) > MAX_COMPRESSION_RATIO
    v = check("ha" * 60, 2.0)
    assert (v.looped, v.reason, v.text) == (True, "compression", "")
    v = check("Oh " + "!" * 80, 2.0)
    assert (v.looped, v.reason) == (True, "compression")
    assert not check(v.text, 2.0).looped


# --------------------------------------------------------------------------- not loops


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("", 1.0),
        ("", 0.0),
        ("no no no", 1.0),
        ("No, no, no, no, no.", 1.5),
        ("very very good", 1.0),
        ("Bye bye!", 0.8),
        ("Can you hear me? Can you hear me?", 2.5),
        ("I don't know, I don't know, I don't know.", 3.0),
        ("ha ha ha ha ha ha", 2.0),
        (MOON, 2.5),
        ("If I travel from London to Paris by train, how long does the journey usually take?", 4.5),
        ("one two three four five six seven eight nine ten", 3.0),
    ],
)
def test_speech_that_repeats_itself_is_left_alone(text: str, seconds: float) -> None:
    assert check(text, seconds) == check(text, seconds, tokens=len(text.split()))
    v = check(text, seconds)
    assert (v.looped, v.reason, v.text) == (False, "", text)


@settings(max_examples=300, deadline=None)
@given(
    words=st.lists(st.sampled_from(["tell", "me", "a", "fact", "moon.", "no", "ha", "!!!", "-", "the", "Moon,"]), max_size=60),
    seconds=st.floats(min_value=0.0, max_value=30.0),
)
def test_the_cut_is_a_prefix_that_does_not_loop(words: list[str], seconds: float) -> None:
    text = " ".join(words)
    v = check(text, seconds)
    assert text.startswith(v.text)
    assert v.looped or v.text == text
    assert not check(v.text, seconds).looped


# --------------------------------------------------------------------------- backend seam


class LoopingDecoder:
    """A decoder that loops for its first ``loops`` calls; records the penalties it was given."""

    def __init__(self, loops: int, looping: str = BASE_LOOP, clean: str = MOON) -> None:
        self.loops = loops
        self.looping = looping
        self.clean = clean
        self.penalties: list[float] = []

    def __call__(self, repetition_penalty: float) -> tuple[str, int]:
        self.penalties.append(repetition_penalty)
        text = self.looping if len(self.penalties) <= self.loops else self.clean
        return text, len(text.split()) * 13 // 10


def test_a_clean_decode_is_decoded_once(caplog: pytest.LogCaptureFixture) -> None:
    decoder = LoopingDecoder(0)
    assert decode_guarded(decoder, 4.2) == (MOON, "")
    assert decoder.penalties == [1.0]
    assert not caplog.records


def test_a_decode_that_loops_once_is_retried(caplog: pytest.LogCaptureFixture) -> None:
    decoder = LoopingDecoder(1, clean="Tell me a short fact about the moon, please.")
    with caplog.at_level(logging.WARNING):
        assert decode_guarded(decoder, 4.2) == ("Tell me a short fact about the moon, please.", "retried")
    assert decoder.penalties == [1.0, RETRY_REPETITION_PENALTY]
    assert "looped (repeat" in caplog.text


def test_a_decode_that_loops_twice_is_cut() -> None:
    decoder = LoopingDecoder(2, looping=TINY_PREFIX_LOOP)
    assert decode_guarded(decoder, 0.6) == ("Tell me...", "cut")
    assert decoder.penalties == [1.0, RETRY_REPETITION_PENALTY]


def test_a_retry_that_fills_the_token_limit_is_cut() -> None:
    def decoder(repetition_penalty: float) -> tuple[str, int]:
        return "Tell me... Tell me... Tell me... Tell", max_tokens(0.6)

    assert decode_guarded(decoder, 0.6) == ("Tell me...", "cut")


# --------------------------------------------------------------------------- stage seam


def _config(*, partials: bool) -> Config:
    return Config(
        vad=VadConfig(min_speech_ms=64, stop_ms=96, barge_in_ms=96, prefix_padding_ms=96),
        stt=SttConfig(partials=partials, partial_interval_ms=200),
        turn=TurnConfig(silence_ms=320, complete_ms=160, threshold=0.5, speculative=True),
        playout=PlayoutConfig(lead_ms=2000, chunk_ms=125),
    )


@pytest.fixture
def fakes_of() -> Iterator[Callable[..., FakeEngines]]:
    made: list[FakeEngines] = []

    def make(**kwargs: Any) -> FakeEngines:
        made.append(FakeEngines(**kwargs))
        return made[-1]

    yield make
    for fakes in made:
        fakes.close()


def test_the_stage_cuts_a_looping_final_and_hides_looping_partials(run: Callable[..., Any], fakes_of: Callable[..., FakeEngines]) -> None:
    """Whatever the backend: no looping partial is shown, and the user turn (and so the LLM) gets
    the sentence once."""
    fakes = fakes_of(stt=FakeStt(default=" ".join([MOON] * 12)), llm=FakeLlm([["It is ", "made of rock."]]), turn=FakeTurn(0.9))

    async def main() -> None:
        async with running(fakes, _config(partials=True), session_id="sess_loop") as (session, log):
            await pause(session, 160)
            await speak(session, 960)
            await pause(session, 640)
            _, final = await log.wait_type(InputTranscriptDone)
            await log.wait_type(ResponseDone)
            assert final.text == MOON
            assert log.of_type(InputTranscriptDelta) == []
            assert session.stt.decodes >= 2  # partials were decoded, and dropped
            assert session.stt.loops == session.stt.decodes
            [call] = fakes.llm.calls.items
            assert call.messages[-1] == Message("user", MOON)

    run(main(), 20)
