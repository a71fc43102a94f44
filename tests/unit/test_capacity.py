"""voiceagent.capacity: the admission limit follows the measured per-turn work."""

from __future__ import annotations

import dataclasses

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


def test_a_batching_llm_counts_the_first_clause_in_shared_steps() -> None:
    linear = TurnCost(stt_s=0.05, turn_s=0.0, llm_first_token_s=0.05, llm_token_s=0.03, tts_first_s=0.05, clause_tokens=6)
    batched = dataclasses.replace(linear, llm_step8_s=0.06)
    # Unmeasured, 8 steps of one: the old linear sum exactly.
    assert abs(linear.critical_s(8) - 8 * linear.work_s) < 1e-9
    # Batched: 8 turns' first clauses cost 6 steps of 60 ms, not 6 * 8 steps of 30 ms.
    assert abs(batched.critical_s(8) - (8 * 0.15 + 6 * 0.06)) < 1e-9
    assert capacity(batched, 2500, 200) > capacity(linear, 2500, 200)
    # The step time grows with n between the measured points, and past 8 by the same slope.
    assert batched.step_s(1) == 0.03 and abs(batched.step_s(15) - 0.09) < 1e-9
