"""Answering-machine detection's rules on scripted calls: the call's audio is the clock, speech
times and transcripts come as the session would give them, and beeps are real tones in real
speech (the fixtures' recorded and synthesised voices)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from voiceagent.audio import Int16Array, read_wav, resample
from voiceagent.transports.machine_detection import MACHINE_WORDS, Answered, MachineDetector, MachineRules, ToneDetector

RATE = 16000
FRAME = 320  # 20 ms, as a phone line sends it


def tone(hz: float, ms: float, level: float = 0.25) -> Int16Array:
    t = np.arange(int(RATE * ms / 1000)) / RATE
    return (np.sin(2 * np.pi * hz * t) * level * 32767).astype(np.int16)


def silence(ms: float) -> Int16Array:
    return np.zeros(int(RATE * ms / 1000), dtype=np.int16)


def feed(det: MachineDetector, pcm: Int16Array) -> Answered | None:
    """Feed ``pcm`` in 20 ms frames; the verdict given meanwhile, if any."""
    given = None
    for i in range(0, len(pcm), FRAME):
        given = det.audio(pcm[i : i + FRAME]) or given
    return given


def test_a_beep_in_noise_is_found_with_its_frequency_start_and_end() -> None:
    rng = np.random.default_rng(1)
    pcm = np.concatenate([silence(500), tone(1000, 400), silence(500)]).astype(np.int32)
    pcm += (rng.standard_normal(len(pcm)) * 300).astype(np.int32)  # a line's hiss, 40 dB under the beep
    det = ToneDetector(RATE, 200)
    found = [det.feed(pcm[i : i + FRAME].astype(np.int16)) for i in range(0, len(pcm), FRAME)]
    assert sum(found) == 1
    assert det.found_hz == pytest.approx(1000, abs=30)
    assert det.found_ms == pytest.approx(500, abs=40) and det.ended_ms == pytest.approx(900, abs=40)


def test_speech_hums_and_a_too_short_tone_are_not_beeps(speech: dict[str, Path]) -> None:
    hum = sum(np.sin(2 * np.pi * 150 * k * np.arange(RATE) / RATE) / k for k in range(1, 8)) * 5000  # a voice's harmonics
    sounds = [np.asarray(hum, dtype=np.int16), tone(1000, 120)]
    for name in ("capital", "backchannel", "long_story"):
        pcm, rate = read_wav(speech[name])
        sounds.append(resample(pcm, rate, RATE))
    for pcm in sounds:
        det = ToneDetector(RATE, 200)
        assert not det.feed(pcm) and det.found_ms is None


def voice(ms: float) -> Int16Array:
    """A voice-like sound: a 150 Hz voice's harmonics, about -20 dBFS (not a tone)."""
    t = np.arange(int(RATE * ms / 1000)) / RATE
    return (sum(np.sin(2 * np.pi * 150 * k * t) / k for k in range(1, 8)) * 2500).astype(np.int16)


def test_a_short_hello_then_silence_is_a_person() -> None:
    det = MachineDetector()
    assert feed(det, silence(700)) is None
    assert feed(det, voice(500)) is None
    assert feed(det, silence(300)) is None
    assert det.transcript("Hello?") is None  # not yet 800 ms of silence after it
    verdict = feed(det, silence(600))
    assert verdict is not None and verdict.by == "human"
    assert 1990 <= verdict.at_ms <= 2020, verdict  # 800 ms after the voice ended
    assert "0.5 s, 'Hello'" in verdict.reasons[0]
    assert feed(det, silence(5000)) is None and det.verdict == verdict  # given once


def test_a_persons_verdict_waits_for_their_words_then_goes_without_them() -> None:
    det = MachineDetector(MachineRules(after_greeting_ms=800, words_wait_ms=1500))
    feed(det, voice(500))
    assert feed(det, silence(2000)) is None  # silence enough, but the words may be a machine's
    verdict = det.transcript("Yeah, hello.")
    assert verdict is not None and verdict.by == "human"
    det = MachineDetector(MachineRules(after_greeting_ms=800, words_wait_ms=1500))
    feed(det, voice(500))
    verdict = feed(det, silence(2400))
    assert verdict is not None and verdict.by == "human" and "its words not heard in time" in verdict.reasons[0]
    assert verdict.at_ms == pytest.approx(500 + 2300, abs=20)


def test_a_line_with_hiss_is_not_a_voice_and_a_voice_over_it_is() -> None:
    rng = np.random.default_rng(2)
    hiss = (rng.standard_normal(RATE * 6) * 200).astype(np.int16)  # about -44 dBFS
    det = MachineDetector()
    verdict = feed(det, hiss)
    assert verdict is not None and verdict.by == "unknown"
    det = MachineDetector()
    feed(det, hiss[: RATE // 2])
    feed(det, (voice(600).astype(np.int32) + hiss[:9600]).astype(np.int16))
    det.transcript("Hello?")
    verdict = feed(det, hiss[:RATE])
    assert verdict is not None and verdict.by == "human" and "0.6 s" in verdict.reasons[0]


@pytest.mark.parametrize(
    ("words", "reason"),
    [
        ("Hi, you've reached Sam.", "you've reached"),
        ("Please leave a message.", "leave a message"),
        ("Bob is not available.", "is not available"),
    ],
)
def test_a_recorded_greetings_words_make_it_a_machine_at_once(words: str, reason: str) -> None:
    det = MachineDetector()
    feed(det, voice(1200))
    verdict = det.transcript(words)
    assert verdict is not None and verdict.by == "machine" and reason in verdict.reasons[0]


def test_a_long_greeting_is_a_machine_while_it_still_plays() -> None:
    det = MachineDetector(MachineRules(greeting_max_ms=2000))
    feed(det, silence(300))
    verdict = feed(det, voice(3000))
    assert verdict is not None and verdict.by == "machine"
    assert 2300 <= verdict.at_ms <= 2340 and "longer than 2 s" in verdict.reasons[0]


def test_a_greeting_of_many_short_words_is_a_machine() -> None:
    det = MachineDetector()
    feed(det, voice(1500))
    verdict = det.transcript("Hi there, this is the Smith family.")
    assert verdict is not None and verdict.by == "machine" and "7 words" in verdict.reasons[0]


def test_a_second_sentence_after_a_short_pause_belongs_to_the_same_greeting() -> None:
    det = MachineDetector()
    feed(det, voice(800))
    det.transcript("Hello.")
    assert feed(det, silence(500)) is None  # under after_greeting_ms: not yet a person
    verdict = feed(det, voice(1000))
    assert verdict is not None and verdict.by == "machine"  # 0 → 2.1 s of greeting


def test_a_beep_makes_a_machine_and_the_message_is_due_when_it_ends() -> None:
    det = MachineDetector()
    feed(det, voice(1000))
    feed(det, silence(300))
    verdict = feed(det, tone(850, 500))
    assert verdict is not None and verdict.by == "machine" and "a beep (850 Hz)" in verdict.reasons[0]
    assert not det.message_due()  # the beep still sounds
    feed(det, silence(60))
    assert det.message_due() and det.beep_ended_ms == pytest.approx(1800, abs=40)


def test_after_a_greeting_without_a_beep_the_message_waits_for_its_silence() -> None:
    det = MachineDetector(MachineRules(message_silence_ms=2000))
    feed(det, voice(3000))
    assert det.verdict is not None and det.verdict.by == "machine"
    feed(det, voice(1000))
    feed(det, silence(1900))
    assert not det.message_due()
    feed(det, silence(200))
    assert det.message_due()


def test_a_machine_that_never_beeps_nor_falls_silent_gets_its_message_after_the_wait() -> None:
    det = MachineDetector(MachineRules(message_wait_ms=30000))
    verdict = feed(det, voice(2100))  # a greeting, then music on a loop: a voice to this detector
    assert verdict is not None and verdict.by == "machine"
    feed(det, voice(29800))
    assert not det.message_due()
    feed(det, voice(300))
    assert det.message_due()


def test_nobody_speaking_is_unknown_and_so_is_a_greeting_never_decided() -> None:
    det = MachineDetector(MachineRules(initial_silence_ms=5000))
    verdict = feed(det, silence(5100))
    assert verdict is not None and verdict.by == "unknown" and "nothing said for 5 s" in verdict.reasons[0]
    assert not det.message_due()
    det = MachineDetector(MachineRules(initial_silence_ms=7000, total_ms=8000))
    feed(det, silence(6500))
    feed(det, voice(1000))  # a late "Hello?": its silence after has not come by the end
    feed(det, silence(600))
    assert det.verdict is not None and det.verdict.by == "unknown" and "no verdict after 8 s" in det.verdict.reasons[0]
    assert det.verdict.at_ms == pytest.approx(8000, abs=20)


def test_a_person_verdict_is_revised_by_a_beep_or_a_machines_words_soon_after_and_only_then() -> None:
    det = MachineDetector(MachineRules(revise_ms=4000))
    feed(det, voice(400))
    det.transcript("Hello.")
    first = feed(det, silence(900))
    assert first is not None and first.by == "human" and det.listening()
    feed(det, voice(1200))  # "This is Paul."
    revised = feed(det, tone(1000, 400))
    assert revised is not None and revised.by == "machine" and det.verdict == revised
    assert "a beep (1000 Hz)" in revised.reasons[0] and f"after a person's verdict at {first.at_ms:.0f} ms" in revised.reasons[-1]
    assert not det.listening()

    det = MachineDetector(MachineRules(revise_ms=4000))
    feed(det, voice(400))
    det.transcript("Hello.")
    feed(det, silence(900))
    revised = det.transcript("This is Tom, leave a message.")
    assert revised is not None and revised.by == "machine" and "the words 'leave a message'" in revised.reasons[0]

    det = MachineDetector(MachineRules(revise_ms=4000))
    feed(det, voice(400))
    det.transcript("Hello?")
    feed(det, silence(900))
    assert det.transcript("Hello? Who is this?") is None  # a person asking again
    assert feed(det, silence(4000)) is None and not det.listening()
    assert feed(det, tone(1000, 400)) is None and det.verdict is not None and det.verdict.by == "human"  # too late to change


def test_the_machine_words_are_not_what_people_answer_with() -> None:
    people = ["Hello?", "Hi, this is Ann.", "Yes?", "Smith residence.", "Hello, who's calling?", "Speaking."]
    machines = ["Leave me a message.", "You have reached the voicemail of", "I can't take your call", "We'll call you back."]
    assert not [p for p in people if MACHINE_WORDS.search(p)]
    assert all(MACHINE_WORDS.search(m) for m in machines)
