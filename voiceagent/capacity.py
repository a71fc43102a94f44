"""How many sessions a process can serve: a measured number, not a constant.

The worst case for a voice server is every user finishing a sentence at the same instant.  Then
each turn's critical-path work (the final transcript, the turn check, the LLM's prompt and first
clause, the first audio of TTS) queues on the same cores, and the last session waits for all the
others.  So, with ``wait`` the silence the VAD needs before any work starts and ``work`` one
turn's critical-path compute measured on this machine at start-up, the n-th of n simultaneous
turns hears its first audio after about ``wait + n * work``.  The capacity is the largest n for
which that fits the latency budget (``server.latency_budget_ms``, the p95 target).

The LLM's share is not always linear in n: an engine that batches (backends/batch_engine.py)
decodes the next token of all n generations in one step, which costs far less than n steps.  So
the first clause's tokens are counted as ``clause_tokens`` steps of n generations, with the step
time measured at start-up for one generation and for 8 at once (``llm_step8_s``) and
interpolated; an engine that steps one generation at a time measures 8 × the single step there,
and the sum is the linear one.

``benchmarks/concurrency.py`` checks the model against real simultaneous turns and reports
the capacity it predicts beside the latencies it measured.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from voiceagent.contention import BUSY_SHARE

__all__ = ["TurnCost", "capacity"]


@dataclass(frozen=True, slots=True)
class TurnCost:
    """Seconds of one turn's critical-path work, each stage alone on the machine."""

    stt_s: float
    turn_s: float
    llm_first_token_s: float
    llm_token_s: float
    tts_first_s: float
    clause_tokens: int = 6
    llm_step8_s: float = 0.0
    """One decode step while 8 generations run at once (0: not measured, taken as 8 single steps)."""
    contention: float = 0.0
    """The share of the measurement's thread time spent waiting for a core that other work held
    (:mod:`voiceagent.contention`): near 0 on an idle machine."""

    @property
    def contended(self) -> bool:
        """Measured while the machine was busy: the figures are not this machine's speed (they
        are too slow, by as much as the others took), so nothing lasting is built on them."""
        return self.contention >= BUSY_SHARE

    @property
    def work_s(self) -> float:
        """Transcript + turn check + first token + the rest of the first clause + first audio."""
        return self.stt_s + self.turn_s + self.llm_first_token_s + self.clause_tokens * self.llm_token_s + self.tts_first_s

    def step_s(self, n: int) -> float:
        """Seconds of one decode step while ``n`` generations run at once (linear between the
        single step and the 8-generation one, extrapolated past 8)."""
        one = self.llm_token_s
        eight = self.llm_step8_s or 8 * one
        return one + (eight - one) * (n - 1) / 7

    def critical_s(self, n: int) -> float:
        """The work before the last of ``n`` simultaneous turns hears its first audio: every
        turn's transcript, turn check, first token and first audio, one after another, and the
        first clause's tokens in steps of ``n`` generations."""
        each = self.stt_s + self.turn_s + self.llm_first_token_s + self.tts_first_s
        return n * each + self.clause_tokens * self.step_s(n)

    @property
    def audio_after_first_token_s(self) -> float:
        """The time from the LLM's first token to the first audio of a typical first clause
        (``clause_tokens``) and its synthesis, each alone on the machine.  A shorter first clause
        ("Sure.") can be faster: the turn-model skip that uses this trades that rare case for the
        turn model's CPU time on every turn whose first audio comes after the silence fallback."""
        return (self.clause_tokens - 1) * self.llm_token_s + self.tts_first_s

    def as_dict(self) -> dict[str, float]:
        return {k: round(float(v), 4) for k, v in asdict(self).items()} | {"work_s": round(self.work_s, 4)}


def capacity(cost: TurnCost, budget_ms: float, wait_ms: float, limit: int = 1024) -> int:
    """Largest n (up to ``limit``) with ``wait + critical(n) <= budget`` (at least 1: one session
    is always served)."""
    if cost.work_s <= 0:
        return 1
    room = (budget_ms - wait_ms) / 1000.0
    n = 1
    while n < limit and cost.critical_s(n + 1) <= room:
        n += 1
    return n
