"""The offline decoder comparison's summary: what today's interruption rules would get wrong."""

from __future__ import annotations

from typing import Any

from scripts.eval_interruption_decoders import judged


def _case(kind: str, *texts: tuple[str, float | None], margin: float | None = None) -> dict[str, Any]:
    cuts = [{"ms": 500, "a": {"text": t, "confidence": c, "ms": 90, "sound_margin": margin}} for t, c in texts]
    return {"kind": kind, "case": kind, "group": "dev", "cuts": cuts}


def test_a_false_case_is_lost_when_any_cut_interrupts_and_a_real_one_missed_when_none_does() -> None:
    cases = [
        _case("backchannel", ("Yeah.", 0.4)),  # kept
        _case("backchannel", ("Yeah.", 0.4), ("On course.", 0.43)),  # one cut interrupts: lost
        _case("noise", ("dot, dot, dot", 0.2)),  # a sound: kept
        _case("noise", ("BAM", 0.04)),  # doubted: kept
        _case("interruption", ("Stop.", 0.05)),  # a floor word, however unsure: honoured
        _case("interruption", ("Yeah.", 0.3)),  # "Enough." heard as a backchannel: missed
        _case("interruption", ("Palt", 0.11), ("Halt.", 0.3)),  # the second cut decides: honoured
        _case("background", ("What time is dinner?", 0.9)),  # the level decides these: not counted
    ]
    summary = judged(cases, ["a"])["a"]
    assert {k: summary[k] for k in ("lost", "false_cases", "missed", "interruptions")} == {
        "lost": 1,
        "false_cases": 4,
        "missed": 1,
        "interruptions": 3,
    }
    assert summary["missed_cases"] == ["interruption"] and summary["lost_cases"] == ["backchannel"]


def test_a_second_reading_counts_within_the_margin_and_only_where_the_server_would_read() -> None:
    cases = [
        _case("backchannel", ("On course.", 0.43), margin=-0.5),  # reads as "Of course.": kept at 1 nat
        _case("interruption", ("Skip it.", 0.37), margin=-2.4),  # a real request close to "Mm-hm."
        _case("interruption", ("Why?", 0.37), margin=-0.3),  # a question word: never read again
        _case("interruption", ("Yeah, but what about the princess?", 0.4), margin=-0.2),  # too many words to read again
    ]
    assert judged(cases, ["a"])["a"]["lost"] == 1  # no second reading: "On course." interrupts
    at_1 = judged(cases, ["a"], 1.0)["a"]
    assert at_1["lost"] == 0 and at_1["missed"] == 0
    at_3 = judged(cases, ["a"], 3.0)["a"]
    assert at_3["lost"] == 0 and at_3["missed"] == 1  # "Skip it." dismissed, "Why?" not
