"""The offline decoder comparison's summary: what today's interruption rules would get wrong."""

from __future__ import annotations

from typing import Any

from scripts.eval_interruption_decoders import judged


def _case(kind: str, *texts: tuple[str, float | None]) -> dict[str, Any]:
    cuts = [{"ms": 500, "a": {"text": t, "confidence": c, "ms": 90}} for t, c in texts]
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
    assert judged(cases, ["a"]) == {"a": {"lost": 1, "false_cases": 4, "missed": 1, "interruptions": 3}}
