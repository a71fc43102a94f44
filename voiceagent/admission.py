"""Admission by live load: a new conversation is taken while what the turns cost *now* leaves room.

A connected caller who is listening costs almost nothing; a caller in a turn costs a transcript,
a turn check, an LLM prompt and clause and the first audio.  So the number of conversations a
machine serves is not a constant measured at start-up: it is what the measured load says.  The
load (0–1) is the larger of two measures, both kept over the last seconds:

* **CPU**: the process's CPU seconds over wall seconds × usable cores (every thread: the models,
  the event loop, the VAD).  It predicts latency before latency moves: queueing on the cores
  grows steeply past about three quarters of them.
* **Latency**: the p95 end of speech → first audio of the turns answered lately, over
  ``server.latency_budget_ms``.  It catches what CPU does not show (a lock, a remote LLM).

A new session is admitted while ``load + recent admissions' cost + its own cost`` stays under
``server.load_threshold`` (0.75: LiveKit's production default for its workers).  A session's
cost is the measured CPU load per open session, and at least the start-up turn cost spread over
one question per :data:`PACE_S`.  A session admitted in the last :data:`PACE_S` counts that cost
provisionally, fading as the measured load comes to see it: that keeps a crowd connecting to an
idle server from all being admitted on a load that has not seen them yet.

Degrading in order (:class:`State`): past the threshold new sessions are refused (HTTP 503 with
``Retry-After``) while the running ones are still answered inside the budget (``full``); only
when the turns' p95 passes the budget itself is the server ``over_budget``: it still answers
every turn, late.  ``server.max_sessions`` stays a hard cap an operator sets.

This module is pure bookkeeping: the server calls :meth:`LoadMeter.sample` periodically and
:meth:`LoadMeter.observe_turn` for each answered turn; all times come from injected clocks.
"""

from __future__ import annotations

import collections
import enum
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["PACE_S", "LoadMeter", "State", "Verdict"]

PACE_S = 20.0
"""Seconds between a caller's questions at a natural pace: the first estimate of what a new
session costs spreads one turn over this, and it is how long a new session's provisional cost
is counted (it has not spoken yet, so the measured load has not seen it)."""


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

    ``cores``: the cores this process may use.  ``first_session_s``: one turn's CPU seconds as
    measured at start-up (every thread), the first estimate of a session's cost.  ``wall`` and
    ``cpu`` are the clocks (the process's CPU time over all threads; injected in tests).

    Not thread-safe: call it from the event loop's thread only.
    """

    def __init__(
        self,
        *,
        cores: int,
        budget_ms: float,
        threshold: float = 0.75,
        first_session_s: float = 1.0,
        max_sessions: int = 0,
        cpu_window_s: float = 10.0,
        latency_window_s: float = 30.0,
        wall: Callable[[], float] = time.monotonic,
        cpu: Callable[[], float] = time.process_time,
    ) -> None:
        if cores < 1 or not 0 < threshold <= 1 or budget_ms <= 0:
            raise ValueError("LoadMeter needs cores >= 1, 0 < threshold <= 1 and a positive budget")
        self.cores = cores
        self.budget_ms = budget_ms
        self.threshold = threshold
        self.max_sessions = max_sessions
        self.first_session_load = first_session_s / (cores * PACE_S)
        self.cpu_window_s = cpu_window_s
        self.latency_window_s = latency_window_s
        self._wall = wall
        self._cpu = cpu
        self._samples: collections.deque[tuple[float, float]] = collections.deque()
        self._turns: collections.deque[tuple[float, float]] = collections.deque()  # (wall, latency ms)
        self._admitted: collections.deque[float] = collections.deque()
        self.turns_over_budget = 0
        self.state = State.ACCEPTING

    # ------------------------------------------------------------------ inputs

    def sample(self) -> None:
        """Record the process's CPU time now (call every fraction of a second)."""
        now = self._wall()
        self._samples.append((now, self._cpu()))
        # Keep one sample at or before the window's start, so the window is always covered.
        while len(self._samples) > 2 and self._samples[1][0] <= now - self.cpu_window_s:
            self._samples.popleft()

    def observe_turn(self, latency_ms: float) -> None:
        """One answered turn's end of speech → first audio."""
        self._turns.append((self._wall(), latency_ms))
        if latency_ms > self.budget_ms:
            self.turns_over_budget += 1

    def admitted(self) -> None:
        """A session was admitted now (its cost counts provisionally for :data:`PACE_S`)."""
        self._admitted.append(self._wall())

    # ------------------------------------------------------------------ reads

    @property
    def cpu_load(self) -> float:
        """CPU seconds over wall seconds × cores in the last ``cpu_window_s`` (0 before two samples)."""
        if len(self._samples) < 2:
            return 0.0
        (w0, c0), (w1, c1) = self._samples[0], self._samples[-1]
        if w1 <= w0:
            return 0.0
        return max(0.0, min(1.0, (c1 - c0) / ((w1 - w0) * self.cores)))

    @property
    def latency_p95_ms(self) -> float | None:
        """p95 end of speech → first audio of the turns answered in the last ``latency_window_s``."""
        horizon = self._wall() - self.latency_window_s
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

    def session_load(self, sessions: int) -> float:
        """What one more session is expected to add: the measured load per open session, and at
        least the start-up estimate."""
        measured = self.cpu_load / sessions if sessions else 0.0
        return max(measured, self.first_session_load)

    def _provisional(self, sessions: int) -> float:
        """The expected cost of the sessions admitted in the last :data:`PACE_S`, each weighed by
        how little of its life the measured load has seen yet (1 when just admitted, 0 after
        :data:`PACE_S`): the measured CPU takes over from the estimate as the session talks."""
        now = self._wall()
        while self._admitted and self._admitted[0] < now - PACE_S:
            self._admitted.popleft()
        unseen = sum(1.0 - (now - t) / PACE_S for t in self._admitted)
        return unseen * self.session_load(sessions)

    def verdict(self, sessions: int) -> Verdict:
        """May a new session open beside ``sessions`` open (or reserved) ones?  One is always
        admitted to an empty server under the cap: there is nothing to protect."""
        if self.max_sessions and sessions >= self.max_sessions:
            return Verdict(False, "max_sessions", f"server full: server.max_sessions ({self.max_sessions}) reached")
        if sessions == 0:
            return Verdict(True)
        cpu = self.cpu_load + self._provisional(sessions) + self.session_load(sessions)
        latency = self.latency_load
        if max(cpu, latency) < self.threshold:
            return Verdict(True)
        p95 = self.latency_p95_ms
        seen = f"turn p95 {p95:.0f} ms" if p95 is not None else "no recent turn"
        return Verdict(
            False,
            "load",
            f"server busy: load {self.load:.2f} with {sessions} sessions (cpu {self.cpu_load:.2f}, {seen}, "
            f"budget {self.budget_ms:.0f} ms), threshold {self.threshold:.2f}",
        )

    def update_state(self, sessions: int) -> State | None:
        """Re-derive :attr:`state`; returns the new state when it changed, else None."""
        p95 = self.latency_p95_ms
        if p95 is not None and p95 > self.budget_ms:
            state = State.OVER_BUDGET
        elif sessions and not self.verdict(sessions).accept:
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
