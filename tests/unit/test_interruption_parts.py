"""The small parts of judging speech over the agent: backchannel words, a voice's level, the
playout's pause, the VAD's start threshold in each interruption mode."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from voiceagent.audio import speech_level_db
from voiceagent.config import Config, TurnConfig, VadConfig
from voiceagent.conversation.verdict import InterruptionPolicy, Verdict
from voiceagent.pipeline.hold import PlayoutHold
from voiceagent.stages.vad import VadOptions
from voiceagent.text.backchannel import BACKCHANNELS, floor_words, phrases_for, real_words, takes_floor

EN = BACKCHANNELS["en"]


@pytest.mark.parametrize(
    ("text", "left"),
    [
        ("Yeah, yeah. Right.", []),
        ("Uh-huh.", []),
        ("Uh-uh.", []),  # how Whisper tiny writes "uh-huh"
        ("I make him, I make him.", []),  # how it writes a hummed "mhm, mhm"
        ("I make him breakfast.", ["breakfast"]),  # the rest of a sentence still counts
        ("Mm-hmm, okay.", []),
        ("All right, I see!", []),
        ("Go on.", []),
        ("Wait, stop!", ["wait", "stop"]),
        ("No, I meant Paris.", ["no", "i", "meant", "paris"]),
        ("Yeah, but what about Rome?", ["but", "what", "about", "rome"]),
        ("right now", ["now"]),
        ("A-a...", []),  # Whisper's "uh-huh", hummed
        ("Mm-mm.", []),
        ("Hmmm, ha-ha.", []),
        ("A-ha-ha-ha", []),  # a laugh
        ("D-d-m", []),  # a throat-clear
        ("B-b-but why?", ["b-b-but", "why"]),  # a stutter keeps its word
        ("Me, a ham!", ["me", "a", "ham"]),  # short words of the same letters are still words
        ("TCH", []),  # a click of the tongue
        ("BFF.", []),  # a puff of breath
        ("C'M'M'", []),  # a low hum
        ("Pfff, hmm.", []),
        ("Why try?", ["why", "try"]),  # y is a vowel
        ("MP3", ["mp3"]),  # a digit: a word
        ("Ñññ", ["ñññ"]),  # letters outside a-z are not judged
        ("M.A.K. Right.", []),  # letters spelled with dots: a hummed "mhm, right"
        ("What about the U.S.?", ["what", "about", "the"]),  # spelled letters are a sound, the words stay
        ("Nine A.M.", ["nine"]),
        ("dot, dot, dot", []),  # a short word again and again: a tut-tut
        ("Tusk, tusk.", []),
        ("La la la la.", []),
        ("Yeah, tuk tuk.", []),  # the backchannel goes, the echo is left alone
        ("Faster, faster.", ["faster", "faster"]),  # longer than ECHO_MAX_LETTERS: words
        ("Dot, dash.", ["dot", "dash"]),  # two different words
        ("Dot.", ["dot"]),  # said once: a word
        ("2, 2", ["2", "2"]),  # digits: left alone
        ("", []),
    ],
)
def test_real_words_are_what_is_left_without_backchannels(text: str, left: list[str]) -> None:
    assert real_words(text, EN) == left


def test_a_floor_word_said_again_and_again_is_kept() -> None:
    assert real_words("No, no, no.", EN, floor_words("en")) == ["no", "no", "no"]
    assert real_words("Wait, wait.", EN, floor_words("en")) == ["wait", "wait"]
    assert real_words("No, no, no.", EN) == []  # without the floor words, a short echo is a sound


def test_requests_about_the_agents_pace_and_volume_take_the_floor() -> None:
    policy = InterruptionPolicy.from_config(Config().turn)
    low = policy.min_confidence / 2
    # Whisper heard "Slower." as "slow it" at 0.11: doubted as a sound before these were floor words.
    for text in ("slow it", "Louder!", "Faster.", "Repeat that.", "Quieter, please."):
        assert policy.verdict(text, -20.0, -20.0, "en", low) is Verdict.INTERRUPT, text
    assert policy.verdict("langsamer", -20.0, -20.0, "de", low) is Verdict.INTERRUPT
    assert policy.verdict("Slowly.", -20.0, -20.0, "en", low) is Verdict.DOUBTED  # whole words only


def test_the_floor_words_are_kept_even_when_they_look_like_a_sound() -> None:
    assert real_words("Shh, psst!", EN) == []
    assert real_words("Shh, psst!", EN, floor_words("en")) == ["shh", "psst"]
    assert real_words("Pst, tch.", phrases_for("de"), floor_words("de-DE")) == ["pst"]
    policy = InterruptionPolicy.from_config(Config().turn)
    assert policy.verdict("Shh.", -20.0, -20.0, "en", confidence=0.05) is Verdict.INTERRUPT
    assert policy.verdict("TCH", -20.0, -20.0, "en", confidence=0.59) is Verdict.BACKCHANNEL  # sure of it, still a sound
    assert policy.verdict("BFF, stop!", -20.0, -20.0, "en") is Verdict.INTERRUPT


def test_a_configured_list_replaces_the_languages_and_an_unknown_language_has_none() -> None:
    assert phrases_for("en-GB") == EN
    assert phrases_for("en", "jawohl, na klar") == ("jawohl", "na klar")
    assert phrases_for("xx") == ()
    assert real_words("yeah", phrases_for("xx")) == ["yeah"]


def test_the_policy_judges_words_level_and_silence() -> None:
    policy = InterruptionPolicy.from_config(Config().turn)
    assert policy.judges and policy.min_words == 1
    assert policy.verdict("Yeah, right.", -20.0, -20.0, "en") is Verdict.BACKCHANNEL
    assert policy.verdict(" ", -20.0, -20.0, "en") is Verdict.NOTHING
    assert policy.verdict("Stop.", -20.0, -20.0, "en") is Verdict.INTERRUPT
    assert policy.verdict("Stop.", -31.0, -20.0, "en") is Verdict.BACKGROUND
    assert policy.verdict("Stop.", -31.0, None, "en") is Verdict.INTERRUPT  # no level learnt yet
    two = InterruptionPolicy(min_words=2)
    assert two.verdict("Stop.", None, None, "en") is Verdict.BACKCHANNEL
    assert two.verdict("Stop it.", None, None, "en") is Verdict.INTERRUPT
    assert not InterruptionPolicy(mode="immediate").judges


def test_the_policy_doubts_words_the_transcriber_is_unsure_of_however_many() -> None:
    policy = InterruptionPolicy.from_config(Config().turn)
    low = policy.min_confidence / 2
    assert policy.min_confidence > 0
    assert policy.verdict("BAM", -20.0, -20.0, "en", low) is Verdict.DOUBTED  # a hum, written as a word
    assert policy.verdict("Tusk now.", -20.0, -20.0, "en", low) is Verdict.DOUBTED
    assert policy.verdict("Stop.", -20.0, -20.0, "en", policy.min_confidence) is Verdict.INTERRUPT
    assert policy.verdict("Stop.", -20.0, -20.0, "en", None) is Verdict.INTERRUPT  # not told: trusted
    assert policy.verdict("Stop it now.", -20.0, -20.0, "en", low) is Verdict.INTERRUPT  # a floor word
    assert policy.verdict("You are not a man.", -20.0, -20.0, "en", low) is Verdict.DOUBTED  # a growl, written as a sentence
    assert policy.verdict("You are not a man.", -20.0, -20.0, "en", policy.min_confidence) is Verdict.INTERRUPT
    assert policy.verdict("Yeah, right, champion.", -20.0, -20.0, "en", low) is Verdict.DOUBTED  # backchannels don't count
    assert policy.verdict("Yeah.", -20.0, -20.0, "en", low) is Verdict.BACKCHANNEL
    assert InterruptionPolicy(min_confidence=0.0).verdict("BAM", None, None, "en", 0.01) is Verdict.INTERRUPT


def test_words_that_take_the_floor_are_never_doubted_however_unsure_the_transcriber() -> None:
    policy = InterruptionPolicy.from_config(Config().turn)
    low = policy.min_confidence / 10
    # "Hey, wait." cut into two segments: each one word, each under the threshold.
    for text in ("Hey", "wait", "Stop now.", "Yeah, right, stop.", "Sorry.", "No."):
        assert policy.verdict(text, -20.0, -20.0, "en", low) is Verdict.INTERRUPT, text
    assert policy.verdict("Champion.", -20.0, -20.0, "en", low) is Verdict.DOUBTED
    # By the session's language: "stop" takes the floor in English, "warte" in German.
    assert policy.verdict("warte", -20.0, -20.0, "de-DE", low) is Verdict.INTERRUPT
    assert policy.verdict("warte", -20.0, -20.0, "en", low) is Verdict.DOUBTED
    assert policy.verdict("Stop.", -20.0, -20.0, "sv", low) is Verdict.DOUBTED  # no list: nothing is exempt
    # A floor word in a quieter voice is still someone else's.
    assert policy.verdict("Stop.", -35.0, -20.0, "en", low) is Verdict.BACKGROUND


def test_takes_floor_matches_whole_words_of_the_language() -> None:
    assert takes_floor(["wait"], "en") and takes_floor(["nein"], "de")
    assert not takes_floor(["waiting", "nonsense"], "en") and not takes_floor([], "en")
    assert not takes_floor(["stop"], "xx")


def test_speech_level_is_the_loud_part_whatever_the_silence_around_it() -> None:
    rate = 16000
    t = np.arange(rate // 2) / rate
    tone = (0.1 * np.sin(2 * np.pi * 300 * t)).astype(np.float32)  # RMS 0.0707: -23 dBFS
    padded = np.concatenate([np.zeros(rate // 4, np.float32), tone, np.zeros(rate // 10, np.float32)])
    assert speech_level_db(tone) == pytest.approx(-23.0, abs=0.1)
    assert speech_level_db(padded) == pytest.approx(-23.0, abs=0.1)
    assert speech_level_db(tone * 0.1) == pytest.approx(-43.0, abs=0.1)
    assert speech_level_db(np.zeros(100, np.float32)) is None


def test_a_paused_generation_waits_and_another_does_not() -> None:
    async def main() -> None:
        hold = PlayoutHold()
        await hold.wait(3)  # nothing paused: at once
        hold.pause(3)
        waiting = asyncio.ensure_future(hold.wait(3))
        await hold.wait(4)  # another generation goes on
        await asyncio.sleep(0)
        assert not waiting.done() and hold.paused == 3
        hold.resume(2)  # not the paused one: nothing changes
        await asyncio.sleep(0)
        assert not waiting.done()
        hold.resume(3)
        await asyncio.wait_for(waiting, 1.0)
        assert hold.paused is None

    asyncio.run(main())


def test_the_vad_starts_speech_over_the_agent_sooner_when_words_decide() -> None:
    vad = VadConfig(min_speech_ms=96, barge_in_ms=320)
    assert VadOptions.from_config(vad, "immediate").barge_in_ms == 320
    assert VadOptions.from_config(vad, "words").barge_in_ms == 96


def test_words_a_second_reading_explains_as_sounds_do_not_interrupt_but_floor_words_always_do() -> None:
    policy = InterruptionPolicy.from_config(Config().turn)
    sure = 0.4  # above the doubt threshold: the words alone would interrupt
    assert policy.sound_margin > 0
    # "Mm-hmm, sure." heard as "and mamam": as likely read "mm, sure".
    assert policy.verdict("and mamam", -20.0, -20.0, "en", sure, -policy.sound_margin / 2) is Verdict.SOUNDS
    assert policy.verdict("and mamam", -20.0, -20.0, "en", sure, -policy.sound_margin) is Verdict.SOUNDS
    # A real request reads far worse in backchannels and sounds.
    assert policy.verdict("Can you tell me a joke?", -20.0, -20.0, "en", sure, -24.8) is Verdict.INTERRUPT
    assert policy.verdict("and mamam", -20.0, -20.0, "en", sure, -policy.sound_margin - 0.01) is Verdict.INTERRUPT
    assert policy.verdict("and mamam", -20.0, -20.0, "en", sure, None) is Verdict.INTERRUPT  # not read: trusted
    # A word that takes the floor is never dismissed so, nor are words when the reading is off.
    assert policy.verdict("No.", -20.0, -20.0, "en", sure, 0.0) is Verdict.INTERRUPT
    assert InterruptionPolicy(sound_margin=-1.0).verdict("and mamam", None, None, "en", sure, 0.0) is Verdict.INTERRUPT


def test_a_second_reading_is_asked_only_for_words_it_could_dismiss() -> None:
    policy = InterruptionPolicy.from_config(Config().turn)
    assert policy.reads_again("and mamam", -20.0, -20.0, "en", 0.4)
    assert policy.reads_again("and mamam", None, None, "en", None)
    assert not policy.reads_again("Wait, what?", -20.0, -20.0, "en", 0.4)  # a floor word: interrupts anyway
    assert not policy.reads_again("Yeah, right.", -20.0, -20.0, "en", 0.4)  # a backchannel: dismissed anyway
    assert not policy.reads_again("BAM", -20.0, -20.0, "en", policy.min_confidence / 2)  # doubted anyway
    assert not policy.reads_again("and mamam", -35.0, -20.0, "en", 0.4)  # a quieter voice: background
    assert not InterruptionPolicy(sound_margin=-1.0).reads_again("and mamam", None, None, "en", 0.4)
    # Five real words or more are a request.
    assert not policy.reads_again("Yeah, yeah, right. Tell me about the capital of France.", -20.0, -20.0, "en", 0.45)
    # Up to four alone ("and then them": a hummed "Mm-hmm, sure."), two when joined with
    # dismissed speech before them (a reading of the joined clip can spell the backchannel and stop).
    assert policy.reads_again("and then make them", -20.0, -20.0, "en", 0.45)
    assert not policy.reads_again("and then make them", -20.0, -20.0, "en", 0.45, joined=True)
    assert policy.reads_again("Yeah, yeah, and mamam", -20.0, -20.0, "en", 0.45, joined=True)
    assert policy.reads_again("Yeah, right, and mamam", -20.0, -20.0, "en", 0.45)  # backchannels do not count
    # A question word asks: "Okay, but why?" read as sounds at -0.33 was a real question lost.
    assert policy.reads_again("Okay, but fly.", -20.0, -20.0, "en", 0.45)
    assert not policy.reads_again("Okay, but why?", -20.0, -20.0, "en", 0.45)
    assert not policy.reads_again("Why?", -20.0, -20.0, "en", 0.45)
    assert not policy.reads_again("¿Por qué?", -20.0, -20.0, "es", 0.45)
    assert policy.reads_again("Pourquoi?", -20.0, -20.0, "en", 0.45)  # another language's question word is a word


def test_words_the_sound_model_hears_as_no_speech_are_a_sound_unless_they_take_the_floor_or_ask() -> None:
    policy = InterruptionPolicy.from_config(Config().turn)
    sure = 0.4  # above the doubt threshold: the words alone would interrupt
    low, high = policy.min_speech / 3, 0.9
    assert 0 < policy.min_speech < 0.5
    # "Tsk" written "Just...": the sound model hears no speech in it.
    assert policy.verdict("Just...", -20.0, -20.0, "en", sure, None, low) is Verdict.SOUND
    assert policy.verdict("Just...", -20.0, -20.0, "en", sure, None, high) is Verdict.INTERRUPT
    assert policy.verdict("Just...", -20.0, -20.0, "en", sure, None, policy.min_speech) is Verdict.INTERRUPT
    assert policy.verdict("Just...", -20.0, -20.0, "en", sure, None, None) is Verdict.INTERRUPT  # not heard: trusted
    # A word that takes the floor or asks interrupts whatever the sound model hears ("How so?" 0.32).
    assert policy.verdict("Stop.", -20.0, -20.0, "en", sure, None, low) is Verdict.INTERRUPT
    assert policy.verdict("How so?", -20.0, -20.0, "en", sure, None, low) is Verdict.INTERRUPT
    # Off: a threshold of 0, or no sound model.
    assert InterruptionPolicy(min_speech=0.0).verdict("Just...", None, None, "en", sure, None, 0.0) is Verdict.INTERRUPT
    assert InterruptionPolicy.from_config(TurnConfig(sound_model="none")).min_speech == 0.0


def test_the_sound_model_is_asked_only_of_words_it_could_dismiss() -> None:
    policy = InterruptionPolicy.from_config(Config().turn)
    assert policy.hears_again("Just...", -20.0, -20.0, "en", 0.4, None)
    assert policy.hears_again("And I'm them, sure", -20.0, -20.0, "en", 0.4, -5.6)  # read again and still words
    assert policy.hears_again("Tell me about the capital of France and of Spain.", -20.0, -20.0, "en", 0.6, None)  # any length
    assert not policy.hears_again("and mamam", -20.0, -20.0, "en", 0.4, 0.0)  # the second reading dismissed it already
    assert not policy.hears_again("Wait.", -20.0, -20.0, "en", 0.4, None)  # a floor word
    assert not policy.hears_again("Who is it?", -20.0, -20.0, "en", 0.4, None)  # a question
    assert not policy.hears_again("Yeah.", -20.0, -20.0, "en", 0.4, None)  # a backchannel: dismissed anyway
    assert not policy.hears_again("BAM", -20.0, -20.0, "en", policy.min_confidence / 2, None)  # doubted anyway
    assert not InterruptionPolicy(min_speech=0.0).hears_again("Just...", None, None, "en", 0.4, None)
