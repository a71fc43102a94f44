"""voiceagent.capacity: the admission limit follows the measured per-turn work."""

from __future__ import annotations

import dataclasses

import pytest

from voiceagent.capacity import TurnCost, capacity
from voiceagent.config import load_config


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


class _Watch:
    """A ContentionWatch whose shares are given in advance, one per measurement."""

    def __init__(self, shares: list[float]) -> None:
        self.shares = shares

    def __call__(self) -> _Watch:
        return self

    def __enter__(self) -> _Watch:
        self.share = 0.0  # as the real watch: known only when the block has ended
        return self

    def __exit__(self, *exc: object) -> None:
        self.share = self.shares.pop(0)


def _measured(monkeypatch: pytest.MonkeyPatch, share: float) -> TurnCost:
    from voiceagent.backends import registry

    def measure(engines: object, config: object, repeats: int) -> TurnCost:
        return TurnCost(stt_s=3.0, turn_s=0.0, llm_first_token_s=0.0, llm_token_s=0.0, tts_first_s=0.0)

    monkeypatch.setattr(registry, "_measure_turn_cost", measure)
    return registry.measure_turn_cost(None, load_config(env={}), watch=_Watch([share]))  # type: ignore[arg-type]


def test_a_turn_cost_says_whether_it_was_measured_on_a_busy_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    quiet, busy = _measured(monkeypatch, 0.02), _measured(monkeypatch, 0.7)
    assert quiet.contention == 0.02 and not quiet.contended
    assert busy.contention == 0.7 and busy.contended and busy.stt_s == 3.0  # the figures kept, flagged
    assert busy.as_dict()["contention"] == 0.7
