"""stages.turn.Endpointer: speculate, confirm, retract (pure, no loop)."""

from __future__ import annotations

import dataclasses

import numpy as np

from voiceagent.events import TranscriptSegment
from voiceagent.stages.turn import Confirm, Endpointer, Retract, RunTurnModel, Speculate

COMPLETE_MS = 240.0
SILENCE_MS = 500.0
THRESHOLD = 0.5


def segment(text: str, end_ms: float = 1000.0, *, committed: bool = False, samples: int = 1600) -> TranscriptSegment:
    return TranscriptSegment(
        t=0.0,
        gen=0,
        text=text,
        audio=np.full(samples, 0.1, dtype=np.float32),
        start_ms=end_ms - 500,
        end_ms=end_ms,
        committed=committed,
    )


def silence(ep: Endpointer, ms: float) -> list[object]:
    return list(ep.on_silence(ms, COMPLETE_MS, SILENCE_MS, THRESHOLD))


def prob(ep: Endpointer, p: float) -> list[object]:
    return list(ep.on_probability(p, COMPLETE_MS, SILENCE_MS, THRESHOLD))


def test_speculate_when_the_segment_transcript_arrives_after_a_stop() -> None:
    ep = Endpointer(speculative=True, use_model=False)
    assert ep.on_speech_started() == []
    assert ep.on_speech_stopped(1000.0) == []
    assert ep.on_segment(segment(" hello there "), respond=True) == [Speculate("hello there")]
    assert ep.speculating


def test_no_speculation_when_disabled_or_not_responding() -> None:
    for speculative, respond in ((False, True), (True, False)):
        ep = Endpointer(speculative=speculative, use_model=False)
        ep.on_speech_started()
        ep.on_speech_stopped(1000.0)
        assert ep.on_segment(segment("hello"), respond=respond) == []
        assert not ep.speculating
        # the turn is still confirmed at the silence fallback
        assert silence(ep, SILENCE_MS) == [Confirm("hello", 1000.0)]


def test_confirm_at_the_silence_fallback() -> None:
    ep = Endpointer(speculative=True, use_model=False)
    ep.on_speech_started()
    ep.on_speech_stopped(1234.0)
    ep.on_segment(segment("hello"), respond=True)
    assert silence(ep, 96.0) == []
    assert silence(ep, COMPLETE_MS) == []  # no turn model: complete_ms means nothing
    assert silence(ep, SILENCE_MS - 1) == []
    assert silence(ep, SILENCE_MS) == [Confirm("hello", 1234.0)]
    assert not ep.speculating
    assert silence(ep, SILENCE_MS + 32) == []  # confirmed once only


def test_turn_model_requested_with_the_turn_audio() -> None:
    ep = Endpointer(speculative=True, use_model=True)
    ep.on_speech_started()
    ep.on_speech_stopped(1000.0)
    actions = ep.on_segment(segment("hello", samples=3200), respond=True)
    assert actions[0] == Speculate("hello")  # speculation first: the answer starts while the model judges
    assert isinstance(actions[1], RunTurnModel)
    assert len(actions[1].audio) == 3200


def test_confirm_early_when_the_turn_model_says_complete() -> None:
    ep = Endpointer(speculative=True, use_model=True)
    ep.on_speech_started()
    ep.on_speech_stopped(1000.0)
    ep.on_segment(segment("what time is it"), respond=True)
    assert prob(ep, 0.8) == []  # complete, but the silence is still short
    assert silence(ep, COMPLETE_MS - 32) == []
    assert silence(ep, COMPLETE_MS) == [Confirm("what time is it", 1000.0)]


def test_probability_arriving_after_complete_ms_confirms_at_once() -> None:
    ep = Endpointer(speculative=True, use_model=True)
    ep.on_speech_started()
    ep.on_speech_stopped(1000.0)
    ep.on_segment(segment("what time is it"), respond=True)
    assert silence(ep, COMPLETE_MS + 64) == []  # no probability yet
    assert prob(ep, THRESHOLD) == [Confirm("what time is it", 1000.0)]  # >= threshold counts


def test_incomplete_turn_waits_for_the_silence_fallback() -> None:
    ep = Endpointer(speculative=True, use_model=True)
    ep.on_speech_started()
    ep.on_speech_stopped(1000.0)
    ep.on_segment(segment("I would like to"), respond=True)
    assert prob(ep, 0.2) == []
    assert silence(ep, COMPLETE_MS) == []
    assert silence(ep, 400.0) == []
    assert silence(ep, SILENCE_MS) == [Confirm("I would like to", 1000.0)]


def test_retract_when_speech_resumes_and_the_turn_joins_both_segments() -> None:
    ep = Endpointer(speculative=True, use_model=True)
    ep.on_speech_started()
    ep.on_speech_stopped(1000.0)
    assert ep.on_segment(segment("I would like"), respond=True)[0] == Speculate("I would like")
    assert prob(ep, 0.2) == []
    assert silence(ep, 200.0) == []
    assert ep.on_speech_started() == [Retract()]
    assert not ep.speculating
    assert silence(ep, SILENCE_MS) == []  # the old pause no longer counts
    ep.on_speech_stopped(2500.0)
    actions = ep.on_segment(segment("a coffee", end_ms=2500.0), respond=True)
    assert actions[0] == Speculate("I would like a coffee")
    assert prob(ep, 0.9) == []
    assert silence(ep, COMPLETE_MS) == [Confirm("I would like a coffee", 2500.0)]


def test_speech_start_without_speculation_retracts_nothing() -> None:
    ep = Endpointer(speculative=False, use_model=False)
    ep.on_speech_started()
    ep.on_speech_stopped(1000.0)
    ep.on_segment(segment("one"), respond=True)
    assert ep.on_speech_started() == []


def test_empty_segment_is_noise_and_makes_no_turn() -> None:
    ep = Endpointer(speculative=True, use_model=True)
    ep.on_speech_started()
    ep.on_speech_stopped(1000.0)
    assert ep.on_segment(segment("   "), respond=True) == []
    assert not ep.speculating
    assert prob(ep, 0.99) == []
    assert silence(ep, SILENCE_MS * 4) == []
    # and the noise leaves nothing behind for the next turn
    ep.on_speech_started()
    ep.on_speech_stopped(3000.0)
    assert ep.on_segment(segment("hi", end_ms=3000.0), respond=True)[0] == Speculate("hi")


def test_segment_arriving_while_speaking_again_joins_the_turn() -> None:
    ep = Endpointer(speculative=True, use_model=False)
    ep.on_speech_started()
    ep.on_speech_stopped(1000.0)
    ep.on_speech_started()  # the user went on before the transcript was in
    assert ep.on_segment(segment("first"), respond=True) == []
    assert silence(ep, SILENCE_MS) == []
    ep.on_speech_stopped(2000.0)
    assert ep.on_segment(segment("second", end_ms=2000.0), respond=True) == [Speculate("first second")]
    assert silence(ep, SILENCE_MS) == [Confirm("first second", 2000.0)]


def test_silence_before_the_transcript_does_not_confirm() -> None:
    ep = Endpointer(speculative=True, use_model=False)
    ep.on_speech_started()
    ep.on_speech_stopped(1000.0)
    assert silence(ep, SILENCE_MS + 100) == []  # transcript not in yet
    ep.on_segment(segment("late"), respond=True)
    assert silence(ep, SILENCE_MS + 132) == [Confirm("late", 1000.0)]


def test_committed_segment_confirms_immediately() -> None:
    ep = Endpointer(speculative=True, use_model=True)
    actions = ep.on_segment(segment("manual turn", end_ms=777.0, committed=True), respond=False)
    assert actions == [Confirm("manual turn", 777.0, committed=True)]
    assert silence(ep, SILENCE_MS) == []


def test_committed_segment_includes_earlier_segments_of_the_turn() -> None:
    ep = Endpointer(speculative=False, use_model=False)
    ep.on_speech_started()
    ep.on_segment(segment("before"), respond=False)  # arrives while the user is still speaking
    assert ep.on_segment(segment("now", committed=True), respond=False) == [Confirm("before now", 1000.0, committed=True)]
    assert ep.text == ""


# ----------------------------------------------------------------- unfinished words (turn_words)

INCOMPLETE_MS = 1500.0


def test_a_turn_that_stops_on_an_unfinished_word_waits_for_more_and_then_goes_on() -> None:
    ep = Endpointer(speculative=True, use_model=True, incomplete_ms=INCOMPLETE_MS)
    ep.on_speech_started()
    ep.on_speech_stopped(1000.0)
    # no speculative answer and no turn model for "... the capital of"
    assert ep.on_segment(segment("Tell me the capital of."), respond=True) == []
    assert not ep.speculating
    assert silence(ep, SILENCE_MS) == []  # the fallback does not end it
    assert silence(ep, INCOMPLETE_MS - 20) == []
    # the speaker goes on: one turn with both halves, answered as usual
    assert ep.on_speech_started() == []
    ep.on_speech_stopped(2600.0)
    out = ep.on_segment(segment("Germany."), respond=True)
    assert out[0] == Speculate("Tell me the capital of. Germany.") and isinstance(out[1], RunTurnModel)
    assert prob(ep, 0.9) == []
    assert silence(ep, COMPLETE_MS) == [Confirm("Tell me the capital of. Germany.", 2600.0)]


def test_an_unfinished_turn_still_ends_after_incomplete_ms() -> None:
    ep = Endpointer(speculative=True, use_model=True, incomplete_ms=INCOMPLETE_MS)
    ep.on_speech_started()
    ep.on_speech_stopped(1000.0)
    assert ep.on_segment(segment("What is three plus"), respond=True) == []
    assert silence(ep, INCOMPLETE_MS - 20) == []
    assert silence(ep, INCOMPLETE_MS) == [Confirm("What is three plus", 1000.0)]


def test_the_rule_is_off_at_zero_and_never_shortens_the_fallback() -> None:
    off = Endpointer(speculative=True, use_model=False)
    off.on_speech_started()
    off.on_speech_stopped(1000.0)
    assert off.on_segment(segment("Remind me to"), respond=True) == [Speculate("Remind me to")]
    assert silence(off, SILENCE_MS) == [Confirm("Remind me to", 1000.0)]
    short = Endpointer(speculative=True, use_model=False, incomplete_ms=100.0)
    short.on_speech_started()
    short.on_speech_stopped(1000.0)
    assert short.on_segment(segment("Remind me to"), respond=True) == []
    assert silence(short, 200.0) == []  # max(silence_ms, incomplete_ms)
    assert silence(short, SILENCE_MS) == [Confirm("Remind me to", 1000.0)]


def test_which_transcripts_end_unfinished() -> None:
    from voiceagent.text.turn_words import ends_unfinished

    unfinished = [
        "Tell me the capital of",
        "Tell me the capital of.",  # Whisper's habitual full stop
        "What is three plus?",
        "Remind me to",
        "I want a coffee and",
        "Can you, um",
        "So the thing is,",
        "Tell me about...",
        "Tell me about\u2026",
        "Which is bigger - ",
        "What is THE",
    ]
    finished = [
        "",
        "   ",
        "What is the capital of France?",
        "Hello.",
        "Where are you from?",
        "What is this for",
        "Okay",
        "Thanks a lot!",
        "What is 3 plus? 4.",  # Whisper writes numbers as digits: the last word is "4"
        "Set a timer for 10",
    ]
    assert [t for t in unfinished if not ends_unfinished(t)] == []
    assert [t for t in finished if ends_unfinished(t)] == []


# ----------------------------------------------------------------- a turn of several segments


def _seg(text: str, start_ms: float, end_ms: float, value: float) -> TranscriptSegment:
    n = int((end_ms - start_ms) * 16)
    return TranscriptSegment(t=0.0, gen=0, text=text, audio=np.full(n, value, dtype=np.float32), start_ms=start_ms, end_ms=end_ms)


def test_a_second_segment_is_joined_with_the_first_and_replaces_it() -> None:
    ep = Endpointer(speculative=True, use_model=False, incomplete_ms=INCOMPLETE_MS)
    first = _seg("What is the capital of", 600.0, 1800.0, 0.1)
    ep.on_speech_started()
    ep.on_speech_stopped(1700.0)
    assert ep.joined(first) is None  # nothing before it
    assert ep.on_segment(first, respond=True) == []  # unfinished: waits
    ep.on_speech_started()
    ep.on_speech_stopped(3000.0)
    second = _seg("Germany?", 2600.0, 3100.0, 0.2)
    joined = ep.joined(second)
    assert joined is not None and (joined.start_ms, joined.end_ms, joined.text) == (600.0, 3100.0, "Germany?")
    # the first segment, 800 ms of silence for the gap, then the second
    assert len(joined.audio) == 2500 * 16
    assert np.all(joined.audio[: 1200 * 16] == np.float32(0.1))
    assert np.all(joined.audio[1200 * 16 : 2000 * 16] == 0.0)
    assert np.all(joined.audio[2000 * 16 :] == np.float32(0.2))
    rejoined = dataclasses.replace(joined, text="What is the capital of Germany?")
    assert ep.on_segment(rejoined, respond=True, alone="Germany?") == [Speculate("What is the capital of Germany?")]
    assert silence(ep, SILENCE_MS) == [Confirm("What is the capital of Germany?", 3000.0)]
    assert ep.joined(_seg("next", 9000.0, 9500.0, 0.3)) is None  # a new turn starts from nothing


def test_segments_whose_padding_overlaps_are_joined_without_repeating_audio() -> None:
    # A 200 ms pause: the second segment's 300 ms prefix padding starts before the first
    # segment's end (its speech end plus 96 ms of tail), so both hold that stretch of audio.
    ep = Endpointer(speculative=True, use_model=False, incomplete_ms=INCOMPLETE_MS)
    line = np.arange(4000 * 16, dtype=np.float32)  # each sample's value is its position in the stream

    def cut(text: str, start_ms: float, end_ms: float) -> TranscriptSegment:
        audio = line[int(start_ms * 16) : int(end_ms * 16)]
        return TranscriptSegment(t=0.0, gen=0, text=text, audio=audio, start_ms=start_ms, end_ms=end_ms)

    ep.on_speech_started()
    ep.on_speech_stopped(1500.0)
    assert ep.on_segment(cut("How many wheels does a", 300.0, 1596.0), respond=True) == []  # unfinished: waits
    ep.on_speech_started()
    ep.on_speech_stopped(2800.0)
    joined = ep.joined(cut("bicycle have?", 1400.0, 2896.0))
    assert joined is not None and (joined.start_ms, joined.end_ms) == (300.0, 2896.0)
    assert np.array_equal(joined.audio, line[300 * 16 : 2896 * 16])  # every sample once, in order


def test_no_joined_clip_for_a_commit_or_past_twenty_seconds() -> None:
    ep = Endpointer(speculative=True, use_model=False)
    ep.on_speech_started()
    ep.on_speech_started()
    ep.on_segment(_seg("so", 0.0, 500.0, 0.1), respond=True)  # still speaking: kept, no answer
    assert ep.joined(_seg("then", 21000.0, 21500.0, 0.1)) is None
    committed = dataclasses.replace(_seg("all", 600.0, 900.0, 0.1), committed=True)
    assert ep.joined(committed) is None
    assert ep.joined(_seg("then", 1000.0, 1500.0, 0.1)) is not None


def test_a_rejoined_turn_is_judged_unfinished_on_its_last_segment_alone() -> None:
    ep = Endpointer(speculative=True, use_model=False, incomplete_ms=INCOMPLETE_MS)
    ep.on_speech_started()
    ep.on_speech_stopped(1700.0)
    ep.on_segment(_seg("What is three plus", 600.0, 1800.0, 0.1), respond=True)
    ep.on_speech_started()
    ep.on_speech_stopped(3000.0)
    second = _seg("4.", 2600.0, 3100.0, 0.2)
    joined = ep.joined(second)
    assert joined is not None
    # the whole-clip decode trailed off into "or", the segment alone said "4.": not unfinished
    garbled = dataclasses.replace(joined, text="What is free plus? Or?")
    assert ep.on_segment(garbled, respond=True, alone="4.") == [Speculate("What is free plus? Or?")]
    assert silence(ep, SILENCE_MS) == [Confirm("What is free plus? Or?", 3000.0)]


TEXT_THRESHOLD = 0.003
DOUBT_MS = 1000.0  # shorter than INCOMPLETE_MS: the LLM's doubt is less sure than an unfinished word


def spoken(ep: Endpointer, text: str, end_ms: float = 1000.0) -> list[object]:
    ep.on_speech_started()
    ep.on_speech_stopped(end_ms)
    return list(ep.on_segment(segment(text, end_ms), respond=True))


def test_words_the_llm_doubts_end_a_sentence_wait_for_more() -> None:
    ep = Endpointer(speculative=True, use_model=True, incomplete_ms=INCOMPLETE_MS, text_threshold=TEXT_THRESHOLD, doubt_ms=DOUBT_MS)
    out = spoken(ep, "How many wheels?")
    assert out[0] == Speculate("How many wheels?")  # the answer starts: the verdict comes with its prompt
    assert ep.on_sentence_end(0.0006)
    assert ep.doubts_end
    assert prob(ep, 0.9) == []  # the turn model's "complete" does not count
    assert silence(ep, SILENCE_MS) == []  # nor does the usual fallback
    assert silence(ep, DOUBT_MS - 20) == []
    # the speaker goes on: the speculation is withdrawn and the new words judged afresh
    assert ep.on_speech_started() == [Retract()]
    assert not ep.doubts_end
    ep.on_speech_stopped(2600.0)
    assert ep.on_segment(segment("does a bicycle have?", 2600.0), respond=True)[0] == Speculate("How many wheels? does a bicycle have?")
    assert ep.on_sentence_end(0.86)
    assert not ep.doubts_end
    assert silence(ep, SILENCE_MS) == [Confirm("How many wheels? does a bicycle have?", 2600.0)]


def test_doubted_words_still_end_the_turn_after_doubt_ms_and_unfinished_ones_after_incomplete_ms() -> None:
    ep = Endpointer(speculative=True, use_model=False, incomplete_ms=INCOMPLETE_MS, text_threshold=TEXT_THRESHOLD, doubt_ms=DOUBT_MS)
    spoken(ep, "Can you recommend a good book")
    ep.on_sentence_end(0.0038 / 2)
    assert silence(ep, DOUBT_MS - 20) == []
    assert silence(ep, DOUBT_MS) == [Confirm("Can you recommend a good book", 1000.0)]
    # an unfinished word waits the longer incomplete_ms, whatever the LLM says
    assert spoken(ep, "Tell me the capital of") == []
    assert silence(ep, DOUBT_MS) == []
    assert silence(ep, INCOMPLETE_MS) == [Confirm("Tell me the capital of", 1000.0)]
    # a doubt wait shorter than the fallback never shortens it
    short = Endpointer(speculative=True, use_model=False, incomplete_ms=INCOMPLETE_MS, text_threshold=TEXT_THRESHOLD, doubt_ms=100.0)
    spoken(short, "Which country")
    short.on_sentence_end(0.0001)
    assert silence(short, 200.0) == []
    assert silence(short, SILENCE_MS) == [Confirm("Which country", 1000.0)]


def test_the_turn_is_not_confirmed_before_the_verdict_is_in() -> None:
    ep = Endpointer(speculative=True, use_model=True, incomplete_ms=INCOMPLETE_MS, text_threshold=TEXT_THRESHOLD, doubt_ms=DOUBT_MS)
    spoken(ep, "What is the capital of Italy?")
    assert prob(ep, 0.9) == []
    assert silence(ep, SILENCE_MS) == []  # pending: neither the model nor the fallback confirms
    assert ep.on_sentence_end(0.91)
    assert silence(ep, SILENCE_MS + 32) == [Confirm("What is the capital of Italy?", 1000.0)]


def test_an_engine_that_cannot_tell_leaves_the_usual_rules() -> None:
    ep = Endpointer(speculative=True, use_model=True, incomplete_ms=INCOMPLETE_MS, text_threshold=TEXT_THRESHOLD, doubt_ms=DOUBT_MS)
    spoken(ep, "What is the capital of Italy?")
    assert ep.on_sentence_end(None)
    assert not ep.doubts_end
    assert prob(ep, 0.9) == []
    assert silence(ep, COMPLETE_MS) == [Confirm("What is the capital of Italy?", 1000.0)]


def test_a_verdict_counts_once_and_only_for_a_waiting_speculation() -> None:
    ep = Endpointer(speculative=True, use_model=False, incomplete_ms=INCOMPLETE_MS, text_threshold=TEXT_THRESHOLD, doubt_ms=DOUBT_MS)
    assert not ep.on_sentence_end(0.0001)  # nothing speculated
    spoken(ep, "Which country")
    assert ep.on_sentence_end(0.9)
    assert not ep.on_sentence_end(0.0001)  # told already: the first verdict stands
    assert not ep.doubts_end
    ep.on_speech_started()  # retracted
    assert not ep.on_sentence_end(0.0001)
    # no threshold: nothing waits for a verdict
    off = Endpointer(speculative=True, use_model=False, incomplete_ms=INCOMPLETE_MS)
    spoken(off, "Which country")
    assert not off.on_sentence_end(0.0001)
    assert silence(off, SILENCE_MS) == [Confirm("Which country", 1000.0)]


def test_no_verdict_is_awaited_for_a_turn_not_answered_speculatively() -> None:
    ep = Endpointer(speculative=False, use_model=False, incomplete_ms=INCOMPLETE_MS, text_threshold=TEXT_THRESHOLD, doubt_ms=DOUBT_MS)
    assert spoken(ep, "Which country") == []
    assert silence(ep, SILENCE_MS) == [Confirm("Which country", 1000.0)]
