"""The pure parts of benchmarks/eval_quality.py and of the harness it shares (benchmarks/common/: questions,
scoring, speech, conversations): WER, answer matching, speakability, the question file and how
questions are packed into conversations.  No models, no server, no audio."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from benchmarks.common import conversations, scoring, speech
from benchmarks.common import questions as question_file

ROOT = Path(__file__).resolve().parents[2]


def _load() -> Any:
    return importlib.import_module("benchmarks.eval_quality")


eq = _load()


# ----------------------------------------------------------------------------- normalization and WER


def test_number_words() -> None:
    assert scoring.number_words(0) == ["zero"]
    assert scoring.number_words(56) == ["fifty", "six"]
    assert scoring.number_words(100) == ["one", "hundred"]
    assert " ".join(scoring.number_words(8848)) == "eight thousand eight hundred forty eight"
    assert " ".join(scoring.number_words(2_800_000)) == "two million eight hundred thousand"


def test_normalize_case_punctuation_numbers_contractions() -> None:
    assert scoring.normalize("What's 2 + 2?") == ["what", "is", "two", "plus", "two"]
    assert scoring.normalize("It is 8,848 metres.") == ["it", "is", "eight", "thousand", "eight", "hundred", "forty", "eight", "meters"]
    assert scoring.normalize("About 2.8 million") == ["about", "two", "point", "eight", "million"]
    assert scoring.normalize("the 21st and 3rd") == ["the", "twenty", "first", "and", "third"]
    assert scoring.normalize("one hundred and five") == ["one", "hundred", "five"]
    assert scoring.normalize("twenty-five") == ["twenty", "five"]
    assert scoring.normalize("Colour, COLOR!") == ["color", "color"]


def test_edit_distance() -> None:
    assert scoring.edit_distance([], []) == 0
    assert scoring.edit_distance(["a", "b", "c"], ["a", "b", "c"]) == 0
    assert scoring.edit_distance(["a", "b", "c"], ["a", "x", "c"]) == 1  # substitution
    assert scoring.edit_distance(["a", "b", "c"], ["a", "c"]) == 1  # deletion
    assert scoring.edit_distance(["a", "b"], ["a", "b", "c", "d"]) == 2  # insertions
    assert scoring.edit_distance(["kitten"], []) == 1


def test_wer() -> None:
    assert scoring.wer("What is two plus two?", "what is 2 plus 2") == 0.0
    assert scoring.wer("What is two plus two?", "What's 2+2?") == 0.0
    assert scoring.wer("Which animal says moo?", "Which animal says mu?") == pytest.approx(0.25)
    assert scoring.wer("Which planet do we live on?", "") == 1.0
    assert scoring.wer("How many legs", "How many legs does it have") == pytest.approx(1.0)  # three insertions over three words


# ----------------------------------------------------------------------------- answers


@pytest.mark.parametrize(
    ("reply", "accept", "ok"),
    [
        ("A spider has eight legs.", ["8"], True),
        ("Spiders have 8 legs.", ["8"], True),
        ("Spiders have twenty-eight legs.", ["8"], False),  # a number matches only a whole number
        ("Eight hundred, more or less.", ["8"], False),
        ("Seven times eight is 56.", ["56"], True),
        ("Seven times eight is fifty six.", ["56"], True),
        ("Seven times eight is fifty-six.", ["56"], True),
        ("About 2.8 million people live in Rome.", ["2.8 million"], True),
        ("About two point eight million people.", ["2.8 million"], True),
        ("One, two, three, four, five!", ["1 2 3 4 5"], True),
        ("Spring comes after winter.", ["spring"], True),
        ("SPRING!", ["spring"], True),
        ("Summer comes after winter.", ["spring"], False),
        ("Cows say moo.", ["cow"], True),  # plural
        ("It is a cow.", ["cows"], True),
        ("Penguins can't fly.", ["cannot"], True),
        ("The springboard is here.", ["spring"], False),  # whole words only
    ],
)
def test_answer_correct(reply: str, accept: list[str], ok: bool) -> None:
    assert scoring.answer_correct(reply, accept) is ok


def test_reject_wins_over_accept() -> None:
    reject = ["elephant is bigger", "elephants are bigger"]
    assert scoring.answer_correct("A blue whale is much bigger than an elephant.", ["whale"], reject)
    assert not scoring.answer_correct("An elephant is bigger than a whale.", ["whale"], reject)


# ----------------------------------------------------------------------------- speakability


def test_speakable_reply() -> None:
    assert scoring.speakable_problems("Spring comes after winter. It brings warmer days.") == []
    assert scoring.speakable_problems("The moon is about 384,400 km away, and 3.5 billion years old.") == []
    assert scoring.speakable_problems("Dr. Smith lives on Main St. in the U.S. today.") == []


def test_unspeakable_replies() -> None:
    assert "list" in scoring.speakable_problems("Here you go:\n- eggs\n- milk")
    assert "list" in scoring.speakable_problems("1. Rome 2. Paris 3. Berlin")
    assert "markdown" in scoring.speakable_problems("The answer is **Rome**.")
    assert "markdown" in scoring.speakable_problems("Use `print`.")
    assert "emoji" in scoring.speakable_problems("The moon is lovely 🌙.")
    assert scoring.speakable_problems("One. Two. Three.") == ["3 sentences"]
    assert scoring.speakable_problems("One. Two. Three.", max_sentences=3) == []


def test_count_sentences_and_unfinished() -> None:
    assert scoring.count_sentences("") == 0
    assert scoring.count_sentences("Hi! How are you? Fine.") == 3
    assert scoring.count_sentences("Pi is 3.14 or so") == 1
    assert scoring.unfinished("The capital of Italy is")
    assert not scoring.unfinished("The capital of Italy is Rome.")
    assert not scoring.unfinished("")


# ----------------------------------------------------------------------------- the question file


@pytest.fixture(scope="module")
def questions() -> list[Any]:
    return question_file.load_questions()


def test_question_file_parses_with_enough_questions(questions: list[Any]) -> None:
    assert len(questions) >= 60
    assert len({q.id for q in questions}) == len(questions)
    assert {q.category for q in questions} == set(question_file.CATEGORIES)
    assert all(q.accept and all(a.strip() for a in q.accept) for q in questions)


def test_the_tool_requests_file_parses_and_each_names_what_its_call_needs() -> None:
    requests = question_file.load_questions(eq.ROOT / "benchmarks" / "eval_tool_questions.toml")
    assert len(requests) >= 20 and {q.category for q in requests} == {question_file.TOOLS_CATEGORY}
    # The accepted words are the call's argument as spoken, so a transcript can be checked for them.
    assert all(any(a in scoring.normalize(q.spoken) for a in q.accept) for q in requests), [q.id for q in requests]


def test_held_out_is_about_a_quarter(questions: list[Any]) -> None:
    share = sum(q.held_out for q in questions) / len(questions)
    assert 0.2 <= share <= 0.35


def test_known_failures_of_the_issue_are_asked(questions: list[Any]) -> None:
    texts = {q.spoken for q in questions}
    for text in (
        "Tell me a short fact about the moon.",
        "What season comes after winter?",
        "Which animal says moo?",
        "How many legs does a spider have?",
        "What is the opposite of hot?",
        "Which planet do we live on?",
        "Which is bigger, a whale or an elephant?",
    ):
        assert text in texts


def test_paused_questions(questions: list[Any]) -> None:
    paused = [q for q in questions if len(q.parts) == 2]
    assert len(paused) >= 5
    assert all(600 <= q.pause_ms <= 800 for q in paused)


def test_the_issue_follow_up_is_about_rome(questions: list[Any]) -> None:
    by_id = {q.id: q for q in questions}
    follow = next(q for q in questions if q.text.startswith("And how many people live there"))
    assert by_id[follow.follows].text == "What is the capital of Italy?"
    assert "rome" in follow.accept
    assert scoring.answer_correct("About 2.8 million people live in Rome.", follow.accept, follow.reject)
    assert not scoring.answer_correct("Italy has about 59 million people.", follow.accept, follow.reject)


def test_the_sun_is_93_million_miles_away(questions: list[Any]) -> None:
    # A figure with its magnitude is right; the figure alone, or kilometres' figure in miles, is not.
    sun = next(q for q in questions if q.id == "sun_distance")
    assert scoring.answer_correct("The sun is about 93 million miles away.", sun.accept, sun.reject)
    assert scoring.answer_correct("It is roughly 150 million kilometres from us.", sun.accept, sun.reject)
    assert not scoring.answer_correct("The sun is approximately 93,840 miles away from Earth.", sun.accept, sun.reject)
    assert not scoring.answer_correct("The sun is approximately 149.6 million miles away.", sun.accept, sun.reject)
    assert not scoring.answer_correct("My son is about 1.4 million miles away from Earth.", sun.accept, sun.reject)


def test_echoing_the_question_is_not_a_right_answer(questions: list[Any]) -> None:
    # A fact, sum or follow-up whose accepted word is in the question itself would count a reply
    # that only echoes the question; such questions carry reject phrases instead (or are open).
    echoes = {
        q.id
        for q in questions
        if q.category in ("facts", "arithmetic", "followup") and not q.reject and scoring.answer_correct(q.spoken, q.accept)
    }
    assert echoes == set()


def test_bad_question_files_are_refused(tmp_path: Path) -> None:
    bad = tmp_path / "q.toml"
    bad.write_text('[[question]]\nid = "a"\ntext = "Hi | there."\naccept = ["hi"]\ncategory = "small_talk"\n')
    with pytest.raises(ValueError, match="pause_ms"):
        question_file.load_questions(bad)
    bad.write_text('[[question]]\nid = "a"\ntext = "Hi."\naccept = ["hi"]\ncategory = "small_talk"\nfollows = "b"\n')
    with pytest.raises(ValueError, match="follows"):
        question_file.load_questions(bad)
    bad.write_text('[[question]]\nid = "a"\ntext = "Hi."\naccept = ["hi"]\ncategory = "chat"\n')
    with pytest.raises(ValueError, match="category"):
        question_file.load_questions(bad)


# ----------------------------------------------------------------------------- voices and conversations


def test_at_least_four_voices_even_without_flite() -> None:
    voices, notes = speech.resolve_voices(list(speech.DEFAULT_VOICES), which=lambda _name: None)
    assert len({v.label for v in voices}) == len(voices) >= 4
    assert {v.engine for v in voices} >= {"espeak", "piper"}
    assert any("flite" in n and "not installed" in n for n in notes)
    installed, notes = speech.resolve_voices(list(speech.DEFAULT_VOICES), which=lambda name: f"/usr/bin/{name}")
    assert "flite:slt" in {v.label for v in installed} and notes == []


def test_festival_stands_in_for_flite() -> None:
    voices, notes = speech.resolve_voices(["flite:slt"], which=lambda name: "/usr/bin/text2wave" if name == "text2wave" else None)
    assert voices[0].engine == "festival" and voices[0].asked == "flite:slt" and notes


def test_bad_voice_spec() -> None:
    with pytest.raises(ValueError):
        speech.resolve_voices(["say:alex"])


def test_every_follow_up_is_in_its_lead_questions_conversation(questions: list[Any]) -> None:
    voices, _ = speech.resolve_voices(list(speech.DEFAULT_VOICES), which=lambda _name: None)
    for seed in (0, 1, 12):
        convs = conversations.plan(questions, voices, seed)
        assert sorted(q.id for c in convs for q in c.questions) == sorted(q.id for q in questions)  # each question once
        assert all(1 <= len(c.questions) <= conversations.TURNS_PER_CONVERSATION for c in convs)
        for c in convs:
            ids = [q.id for q in c.questions]
            for k, q in enumerate(c.questions):
                if q.follows is not None:
                    assert k > 0 and ids[k - 1] == q.follows, (c.id, ids)
        assert {c.voice.label for c in convs} == {v.label for v in voices}  # every voice speaks


def test_every_voice_repeats_each_conversation(questions: list[Any]) -> None:
    voices, _ = speech.resolve_voices(["espeak:en-us+m3", "piper:joe"])
    convs = conversations.plan(questions[:8], voices, 3, every_voice=True)
    assert len(convs) == 2 * len(conversations.plan(questions[:8], voices, 3))
    assert len({c.id for c in convs}) == len(convs)


# ----------------------------------------------------------------------------- scoring and summaries


def _turn(transcript: str, reply: str, latency: float | None = 900.0, cutoffs: int = 0) -> Any:
    return SimpleNamespace(transcript=transcript, reply=reply, latency_ms=latency, first_audio_s=3.0, cutoffs=cutoffs)


def test_score_and_failure_guess(questions: list[Any]) -> None:
    voice = speech.Voice("espeak", "en-us+m3")
    q = next(q for q in questions if q.id == "season_after_winter")
    conv = conversations.Conversation("c", voice, [q])
    good = eq.score_turn("fast", conv, 0, _turn("What season comes after winter?", "Spring comes after winter."))
    assert good.correct and good.speakable and good.wer == 0.0 and good.failure is None
    llm = eq.score_turn("fast", conv, 0, _turn("What season comes after winter?", "Summer comes after winter."))
    assert not llm.correct and llm.failure == "llm"
    stt = eq.score_turn("fast", conv, 0, _turn("What is on after dinner?", "Dessert."))
    assert stt.failure == "stt"
    silent = eq.score_turn("fast", conv, 0, _turn("What season comes after winter?", "", latency=None))
    assert not silent.answered and silent.failure.startswith("no reply")
    lost = eq.score_turn("fast", conv, 0, None, error="RuntimeError: boom")
    assert lost.failure == "error"
    assert scoring.failure_guess(0.0, True, lead_wer=0.8) == "stt (the lead question)"


def test_metrics() -> None:
    voice = speech.Voice("espeak", "en-us+m3")
    qs = question_file.load_questions()
    paused = next(q for q in qs if len(q.parts) == 2)
    plain = next(q for q in qs if q.id == "spider_legs")
    conv = conversations.Conversation("c", voice, [plain, paused], starts_s=[0.6, 12.0])
    recs = [
        eq.score_turn("p", conv, 0, _turn(plain.spoken, "A spider has eight legs.", 800.0)),
        eq.score_turn("p", conv, 1, _turn(paused.spoken, "Well:\n- one\n- two", 1200.0, cutoffs=1)),
    ]
    m = eq.metrics(recs)
    assert m["questions"] == 2 and m["answered"] == 2
    assert m["wer_pct"] == 0.0
    assert m["accuracy_pct"] == 50.0
    assert m["speakable_pct"] == 50.0
    assert m["false_cutoffs"] == {"paused_questions": 1, "cut_off": 1}
    assert m["latency_ms"] == {"p50": 1000.0, "p95": 1180.0}
    b = eq.breakdown(recs)
    assert b["held_out"]["questions"] + b["tuned"]["questions"] == 2
    assert set(b["by_category"]) == {plain.category, paused.category}
    report = {
        "machine": "m",
        "command": "c",
        "questions": 2,
        "held_out": 0,
        "paused": 1,
        "known_failures": 1,
        "conversations": [{}],
        "voices": [voice.label],
        "gap_s": 10.0,
        "seed": 1,
        "voice_notes": [],
        "profiles": {
            "p": {
                **b,
                "models": {"stt": "whisper-tiny", "llm": "qwen"},
                "startup": {"process_to_ready_s": 1.0},
                "wall_s": 1.0,
                "cpu_steal_pct": 0.0,
                "failures": [
                    {k: getattr(r, k) for k in ("question", "voice", "said", "transcript", "wer", "reply", "failure", "error")}
                    for r in recs
                    if not r.correct
                ],
            },
            "broken": {"error": "RuntimeError: no model"},
        },
    }
    text = eq.markdown(report)
    assert "| p | whisper-tiny | qwen | 2/2 |" in text and "profile broken: RuntimeError" in text
    assert "rescored" not in text and "* rescored (`--rescore`)" in eq.markdown({**report, "rescored": True})


def test_a_reply_that_only_repeats_the_question_is_wrong() -> None:
    assert scoring.echoes("Remind me to buy milk tomorrow morning.", "Remind me to buy milk tomorrow morning.")
    assert scoring.echoes("Hello there.", "hello there")  # short questions: only the exact words
    assert not scoring.echoes("Hello there.", "Hello there! How can I help?")
    assert not scoring.echoes("Remind me to buy milk.", "I will remind you to buy milk tomorrow.")
    assert not scoring.echoes("", "Anything.")


def test_a_farewell_answered_in_kind_is_right(questions: list[Any]) -> None:
    bye = next(q for q in questions if q.id == "goodbye")
    assert bye.echo_ok and scoring.echoes(bye.spoken, "Goodbye! Have a nice day!")
    assert scoring.judge(bye, bye.spoken, "Goodbye! Have a nice day!", True, 0.0, None, None) == (True, None)
    # Elsewhere the echo rule holds: the same reply to a question it echoes is wrong.
    milk = next(q for q in questions if q.id == "remind_milk")
    assert not milk.echo_ok
    assert scoring.judge(milk, milk.spoken, milk.spoken, True, 0.0, None, None)[0] is False


def test_rescore_applies_todays_scoring_to_a_finished_run(questions: list[Any]) -> None:
    by_id = {q.id: q for q in questions}
    milk, name = by_id["remind_milk"], by_id["what_is_my_name"]

    def turn(q: Any, reply: str) -> dict[str, Any]:
        return {
            "profile": "fast", "conversation": "c1", "voice": "piper:joe", "question": q.id, "category": q.category,
            "held_out": q.held_out, "paused": False, "known_failure": q.known_failure, "said": q.spoken,
            "transcript": q.spoken, "ref_words": 5, "edits": 0, "wer": 0.0, "reply": reply, "answered": True,
            "correct": True, "speakable": True, "problems": [], "unfinished": False, "latency_ms": 700.0,
            "cutoffs": 0, "overrun": False, "failure": None,
        }  # fmt: skip

    report = {"profiles": {"fast": {"turns": [turn(milk, milk.spoken), turn(name, "My name is Sam."), turn(name, "Your name is Sam.")]}}}
    entry = eq.rescore(report, questions)["profiles"]["fast"]
    assert [t["correct"] for t in entry["turns"]] == [False, False, True]
    assert entry["summary"]["accuracy_pct"] == 33.3 and [f["failure"] for f in entry["failures"]] == ["llm", "llm"]


def test_a_profile_variant_names_its_own_settings() -> None:
    assert eq.variant("fast") == ("fast", {})
    assert eq.variant("fast+turn.text_threshold=0.003+stt.beam_size=5") == ("fast", {"turn.text_threshold": "0.003", "stt.beam_size": "5"})
    with pytest.raises(ValueError, match="text_threshold"):
        eq.variant("fast+text_threshold=0.003")
