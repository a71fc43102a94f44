"""Admission by live load: a new conversation is taken while what the turns cost *now* leaves room.

A connected caller who is listening costs little; a caller in a turn costs a transcript, a turn
check, a reply and its voice.  So the number of conversations a machine serves is not a constant
measured at start-up: it is what the measured load says.  Two measures, both kept over the last
seconds:

* **CPU**: the process's CPU seconds over wall seconds × usable cores (every thread: the models,
  the event loop, the VAD), and the CPU seconds spent per answered turn (the same CPU over the
  turns answered meanwhile: a turn with its share of all the listening around it).
* **Latency**: the p95 end of speech → first audio of the turns answered lately, over
  ``server.latency_budget_ms``.  It catches what CPU does not show (a lock, a remote LLM).

The load (0–1) is the larger of the CPU share and the latency share.  A conversation is expected
to cost one turn per :data:`PACE_S` (a natural pace) at the measured CPU per turn; before any turn
is measured, at the start-up estimate.  A new session is admitted while the CPU share of the last
:data:`PACE_S` (where every caller who talks at that pace has had a turn), plus the expected cost
of each open session that has not been heard yet (:meth:`LoadMeter.unheard`), plus the new
one's, stays under ``server.load_threshold``; so must the latency share.  Counting the sessions
not yet heard at their expected cost keeps a crowd that connects to an idle server at the same
second from being admitted on a load that has not seen any of them talk; a session whose reply
has started is in the measured share, and is not counted twice (counting every open session at
the CPU per turn, which carries the listening around each turn, refused callers who arrived one
by one at two thirds of the cores: docs/decisions/admission.md).  The share of the last few
seconds (:attr:`LoadMeter.cpu_load`, the balancer's figure) does not decide: while callers
arrive one by one it holds each newcomer's first turn within seconds, turns that the pace spreads
over :data:`PACE_S` (docs/decisions/admission.md, run 7).

Degrading in order (:class:`State`): past the threshold new sessions are refused (HTTP 503 with
``Retry-After``) while the running ones are still answered inside the budget (``full``); only
when the turns' p95 passes the budget itself is the server ``over_budget``: it still answers
every turn, late.  ``server.max_sessions``, when an operator sets it, is a fixed number of
sessions that replaces the load (for a machine measured by hand, and for tests that must not
depend on how busy the machine is).

This module is pure bookkeeping: the server calls :meth:`LoadMeter.sample` periodically and
:meth:`LoadMeter.observe_turn` for each answered turn; all times come from injected clocks.
"""

from __future__ import annotations

import collections
import enum
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

__all__ = ["IDLE_LOAD", "MIN_TURNS", "PACE_S", "LoadMeter", "State", "Verdict"]

PACE_S = 20.0
"""Seconds between a caller's questions at a natural pace: a conversation is expected to cost one
turn's CPU per this many seconds."""
MIN_TURNS = 3
"""Answered turns the CPU per turn is measured over before it replaces the start-up estimate
(one, when that estimate is suspect: measured on a busy machine)."""
IDLE_LOAD = 0.05
"""A process whose CPU share over :data:`PACE_S` is under this is idle: it does not refuse a
caller on a suspect start-up estimate alone."""


class State(enum.Enum):
    """What the server does with new and running conversations."""

    ACCEPTING = "accepting"
    """New sessions are admitted."""
    FULL = "full"
    """New sessions are refused; the running ones are answered inside the budget."""
    OVER_BUDGET = "over_budget"
    """New sessions are refused and the running ones' turns pass the latency budget (every turn
    is still answered, late)."""


@dataclass(frozen=True, slots=True)
class Verdict:
    """Whether a new session may open, and why not."""

    accept: bool
    reason: str = ""
    """Empty when accepted; else ``max_sessions`` (the operator's cap) or ``load``."""
    detail: str = ""
    """One sentence for the refusal's body and the log."""


class LoadMeter:
    """The server's measured load and the admission decision made on it.

    ``cores``: the cores this process may use.  ``first_turn_s``: the start-up estimate of one
    turn's CPU seconds (every thread, the listening around it included), used until
    :data:`MIN_TURNS` turns are measured.  ``first_turn_suspect``: that estimate was measured while
    the machine was busy (:attr:`voiceagent.capacity.TurnCost.contended`), so it may be many times
    the truth: the first answered turn replaces it, and while it stands an idle process
    (:data:`IDLE_LOAD`) admits callers whatever it predicts.  ``wall`` and ``cpu`` are the clocks
    (the process's CPU time over all threads; injected in tests).

    Not thread-safe: call it from the event loop's thread only.
    """

    def __init__(
        self,
        *,
        cores: int,
        budget_ms: float,
        threshold: float = 0.75,
        first_turn_s: float = 2.0,
        first_turn_suspect: bool = False,
        max_sessions: int = 0,
        cpu_window_s: float = 10.0,
        turn_window_s: float = 30.0,
        cost_window_s: float = 60.0,
        wall: Callable[[], float] = time.monotonic,
        cpu: Callable[[], float] = time.process_time,
    ) -> None:
        if cores < 1 or not 0 < threshold <= 1 or budget_ms <= 0:
            raise ValueError("LoadMeter needs cores >= 1, 0 < threshold <= 1 and a positive budget")
        self.cores = cores
        self.budget_ms = budget_ms
        self.threshold = threshold
        self.max_sessions = max_sessions
        self.first_turn_s = first_turn_s
        self.first_turn_suspect = first_turn_suspect
        self.cpu_window_s = cpu_window_s
        self.turn_window_s = turn_window_s
        self.cost_window_s = cost_window_s
        self._wall = wall
        self._cpu = cpu
        self._samples: collections.deque[tuple[float, float, int]] = collections.deque()  # (wall, cpu, turns so far)
        self._turns: collections.deque[tuple[float, float]] = collections.deque()  # (wall, latency ms)
        self._heard: set[str] = set()  # the open sessions that have had a turn answered
        self.turns = 0
        self.turns_over_budget = 0
        self.state = State.ACCEPTING

    # ------------------------------------------------------------------ inputs

    def sample(self) -> None:
        """Record the process's CPU time now (call every fraction of a second)."""
        now = self._wall()
        self._samples.append((now, self._cpu(), self.turns))
        # Keep one sample at or before the longest window's start, so it is always covered.
        while len(self._samples) > 2 and self._samples[1][0] <= now - max(self.turn_window_s, self.cost_window_s, PACE_S):
            self._samples.popleft()

    def observe_turn(self, latency_ms: float, session: str = "") -> None:
        """One turn's first audio, ``latency_ms`` after the end of its speech; ``session``: whose
        (from then on its cost is in the measured CPU share: :meth:`unheard`).  Counted at the
        first audio rather than when the reply ends: by then the turn's critical path is spent,
        and counting at the end read the CPU of replies still playing against fewer turns."""
        if session:
            self._heard.add(session)
        self.turns += 1
        self._turns.append((self._wall(), latency_ms))
        if latency_ms > self.budget_ms:
            self.turns_over_budget += 1

    def forget(self, session: str) -> None:
        """``session`` closed."""
        self._heard.discard(session)

    # ------------------------------------------------------------------ reads

    def unheard(self, sessions: Iterable[str]) -> int:
        """How many of ``sessions`` (open ones' ids) have had no turn answered yet."""
        return sum(1 for s in sessions if s not in self._heard)

    def _since(self, seconds: float) -> tuple[float, float, int] | None:
        """The oldest sample within the last ``seconds`` (or the one just before them)."""
        if len(self._samples) < 2:
            return None
        horizon = self._samples[-1][0] - seconds
        first = self._samples[0]
        for sample in self._samples:
            if sample[0] > horizon:
                break
            first = sample
        return first

    @property
    def cpu_load(self) -> float:
        """CPU seconds over wall seconds × cores in the last ``cpu_window_s`` (0 before two samples)."""
        return self._cpu_share(self.cpu_window_s)

    @property
    def paced_cpu_load(self) -> float:
        """The CPU share over the last :data:`PACE_S`: every caller at a natural pace is in it."""
        return self._cpu_share(PACE_S)

    def _cpu_share(self, seconds: float) -> float:
        first = self._since(seconds)
        if first is None:
            return 0.0
        w1, c1, _ = self._samples[-1]
        if w1 <= first[0]:
            return 0.0
        return max(0.0, min(1.0, (c1 - first[1]) / ((w1 - first[0]) * self.cores)))

    @property
    def cpu_per_turn_s(self) -> float:
        """CPU seconds per turn over the last ``cost_window_s``, once :data:`MIN_TURNS` turns (one
        for a suspect estimate) were heard there; the start-up estimate before.  A minute rather
        than the pace: a turn's cost swings with its reply's length, and over 30 s a few long
        replies refused callers the machine could serve (docs/decisions/admission.md, run 7)."""
        measured = self._measured_cpu_per_turn_s()
        return self.first_turn_s if measured is None else measured

    def _measured_cpu_per_turn_s(self) -> float | None:
        """:attr:`cpu_per_turn_s` as measured, or None while too few turns were answered."""
        first = self._since(self.cost_window_s)
        if first is None:
            return None
        _, c1, n1 = self._samples[-1]
        turns = n1 - first[2]
        if turns < (1 if self.first_turn_suspect else MIN_TURNS):
            return None
        return max(0.0, c1 - first[1]) / turns

    @property
    def on_suspect_estimate(self) -> bool:
        """The CPU per turn is still a start-up estimate measured on a busy machine."""
        return self.first_turn_suspect and self._measured_cpu_per_turn_s() is None

    @property
    def latency_p95_ms(self) -> float | None:
        """p95 end of speech → first audio of the turns answered in the last ``turn_window_s``."""
        horizon = self._wall() - self.turn_window_s
        while self._turns and self._turns[0][0] < horizon:
            self._turns.popleft()
        if not self._turns:
            return None
        values = sorted(ms for _, ms in self._turns)
        return values[min(len(values) - 1, int(0.95 * len(values)))]

    @property
    def latency_load(self) -> float:
        """The recent p95 over the budget, capped at 1 (0 with no recent turn)."""
        p95 = self.latency_p95_ms
        return 0.0 if p95 is None else min(1.0, p95 / self.budget_ms)

    @property
    def load(self) -> float:
        """The server's load, 0–1: the larger of :attr:`cpu_load` and :attr:`latency_load`."""
        return max(self.cpu_load, self.latency_load)

    @property
    def session_load(self) -> float:
        """What one conversation is expected to cost, 0–1: a turn's CPU per :data:`PACE_S`."""
        return self.cpu_per_turn_s / (PACE_S * self.cores)

    def predicted(self, sessions: int, unheard: int | None = None) -> float:
        """The load of the next :data:`PACE_S` with one more session: the CPU share measured over
        the last one, plus the expected cost of the ``unheard`` open sessions (None: all
        ``sessions``) and of the new one."""
        each = self.session_load
        unheard = sessions if unheard is None else min(unheard, sessions)
        return self.paced_cpu_load + (unheard + 1) * each

    def verdict(self, sessions: int, unheard: int | None = None) -> Verdict:
        """May a new session open beside ``sessions`` open (or reserved) ones, ``unheard`` of
        which have had no turn answered yet (None: none has)?  One is always admitted to an empty
        server under the cap: there is nothing to protect."""
        if self.max_sessions:  # the operator's fixed number replaces the load (as it replaced the measured capacity)
            if sessions >= self.max_sessions:
                return Verdict(False, "max_sessions", f"server full: server.max_sessions ({self.max_sessions}) reached")
            return Verdict(True)
        if sessions == 0:
            return Verdict(True)
        predicted = self.predicted(sessions, unheard)
        if max(predicted, self.latency_load) < self.threshold:
            return Verdict(True)
        if self.on_suspect_estimate and self.paced_cpu_load < IDLE_LOAD and self.latency_load < self.threshold:
            # Nothing measured says busy: only a guess taken while another process held the cores
            # does, and an idle machine refusing callers is the worse error.  The first answered
            # turn replaces the guess.
            return Verdict(True)
        p95 = self.latency_p95_ms
        seen = f"turn p95 {p95:.0f} ms" if p95 is not None else "no recent turn"
        estimate = " (the start-up estimate)" if self._measured_cpu_per_turn_s() is None else ""
        return Verdict(
            False,
            "load",
            f"server busy: load {self.load:.2f} with {sessions} sessions ({sessions if unheard is None else min(unheard, sessions)} "
            f"not heard yet), {predicted:.2f} with one more (cpu {self.paced_cpu_load:.2f} over {PACE_S:.0f} s, {self.cpu_load:.2f} now, "
            f"{self.cpu_per_turn_s:.1f} CPU-s a turn{estimate}, {seen}, budget {self.budget_ms:.0f} ms), threshold {self.threshold:.2f}",
        )

    def update_state(self, sessions: int, unheard: int | None = None) -> State | None:
        """Re-derive :attr:`state` (arguments as :meth:`verdict`'s); returns the new state when
        it changed, else None."""
        p95 = self.latency_p95_ms
        if p95 is not None and p95 > self.budget_ms:
            state = State.OVER_BUDGET
        elif sessions and not self.verdict(sessions, unheard).accept:
            state = State.FULL
        else:
            state = State.ACCEPTING
        if state is self.state:
            return None
        self.state = state
        return state

    @property
    def weight(self) -> int:
        """A load balancer's weight for this replica, 1–100 (100: idle)."""
        return max(1, round(100 * (1.0 - self.load)))
