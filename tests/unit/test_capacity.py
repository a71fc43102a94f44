"""voiceagent.capacity: the admission limit follows the measured per-turn work."""

from __future__ import annotations

from voiceagent.capacity import TurnCost, capacity


def cost(work_ms: float) -> TurnCost:
    return TurnCost(stt_s=work_ms / 1000.0, turn_s=0.0, llm_first_token_s=0.0, llm_token_s=0.0, tts_first_s=0.0)


def test_capacity_is_how_many_simultaneous_turns_fit_the_budget() -> None:
    # wait 160 ms + n * 500 ms <= 2500 ms  ->  n = 4
    assert capacity(cost(500), 2500, 160) == 4
    # A machine twice as fast serves twice as many; a slower one fewer.
    assert capacity(cost(250), 2500, 160) == 9
    assert capacity(cost(1000), 2500, 160) == 2


def test_one_session_is_always_admitted() -> None:
    assert capacity(cost(5000), 2500, 160) == 1
    assert capacity(cost(0), 2500, 160) == 1


def test_work_adds_every_critical_path_stage() -> None:
    c = TurnCost(stt_s=0.1, turn_s=0.05, llm_first_token_s=0.12, llm_token_s=0.02, tts_first_s=0.07, clause_tokens=6)
    assert abs(c.work_s - (0.1 + 0.05 + 0.12 + 6 * 0.02 + 0.07)) < 1e-9
    assert c.as_dict()["work_s"] == round(c.work_s, 4)
