"""voiceagent.admission: new sessions are admitted by the measured load, not a start-up constant."""

from __future__ import annotations

import pytest

from voiceagent.admission import IDLE_LOAD, MIN_TURNS, PACE_S, LoadMeter, State


class Clocks:
    """A wall clock and a process CPU clock that move only when the test says so."""

    def __init__(self) -> None:
        self.wall = 1000.0
        self.cpu = 50.0

    def run(self, seconds: float, busy: float, meter: LoadMeter, step: float = 0.5) -> None:
        """``seconds`` pass with ``busy`` of the meter's cores used, sampled every ``step``."""
        t = 0.0
        while t < seconds - 1e-9:
            self.wall += step
            self.cpu += step * busy * meter.cores
            meter.sample()
            t += step


def meter(clocks: Clocks, **kw: float) -> LoadMeter:
    args: dict[str, float] = {"cores": 2, "budget_ms": 2500, "threshold": 0.75, "first_turn_s": 4.0} | kw
    m = LoadMeter(
        cores=int(args.pop("cores")),
        budget_ms=args.pop("budget_ms"),
        wall=lambda: clocks.wall,
        cpu=lambda: clocks.cpu,
        **args,  # type: ignore[arg-type]
    )
    m.sample()
    return m


def test_cpu_load_is_the_cpu_share_of_the_cores_over_the_last_window_only() -> None:
    c = Clocks()
    m = meter(c)
    assert m.cpu_load == 0.0  # one sample: nothing measured yet
    c.run(10, 0.8, m)
    assert m.cpu_load == pytest.approx(0.8)
    c.run(5, 0.2, m)  # half the window at 0.2, half still at 0.8
    assert m.cpu_load == pytest.approx(0.5)
    c.run(10, 0.2, m)  # the busy seconds have left the window
    assert m.cpu_load == pytest.approx(0.2)


def test_latency_load_is_the_recent_turns_p95_over_the_budget_and_forgets_old_turns() -> None:
    c = Clocks()
    m = meter(c)
    assert m.latency_load == 0.0 and m.latency_p95_ms is None
    for ms in [500.0] * 19 + [2000.0]:
        m.observe_turn(ms)
    assert m.latency_p95_ms == 2000.0
    assert m.latency_load == pytest.approx(0.8)
    assert m.load == pytest.approx(0.8)  # the larger of cpu (0) and latency
    c.run(31, 0.0, m)
    assert m.latency_p95_ms is None and m.load == 0.0
    m.observe_turn(9000.0)
    assert m.latency_load == 1.0 and m.turns_over_budget == 1


def test_an_empty_server_always_admits_one_session_under_the_cap() -> None:
    c = Clocks()
    m = meter(c)
    c.run(10, 1.0, m)  # the cores are saturated by something else
    assert m.verdict(0).accept
    assert not m.verdict(1).accept


def test_a_crowd_connecting_to_an_idle_server_is_admitted_only_up_to_what_its_turns_will_cost() -> None:
    """Open sessions count at their expected cost (4 CPU-s a turn, one every 20 s, on 2 cores:
    0.1 each) even before any of them talks: the measured load has not seen them yet."""
    c = Clocks()
    m = meter(c)
    c.run(10, 0.0, m)
    assert m.session_load == pytest.approx(4.0 / (2 * PACE_S))
    sessions = 1
    while m.verdict(sessions).accept:
        sessions += 1
    assert sessions == 7  # 6 open × 0.1 + the next 0.1 = 0.7 passed; 7 × 0.1 + 0.1 does not
    verdict = m.verdict(sessions)
    assert verdict.reason == "load" and "threshold 0.75" in verdict.detail and "0.80 with one more" in verdict.detail


def test_an_idle_process_does_not_refuse_callers_on_an_estimate_measured_on_a_busy_machine() -> None:
    """Issue #71: two replicas started together timed each other's model loading and each took
    15.2 CPU-s a turn from it.  Such an estimate is marked suspect: while the process is idle it
    refuses nobody on that estimate alone; a trusted estimate still guards against a crowd."""
    c_trusted, c_suspect = Clocks(), Clocks()
    trusted = meter(c_trusted, first_turn_s=15.2)
    suspect = meter(c_suspect, first_turn_s=15.2, first_turn_suspect=True)
    c_trusted.run(PACE_S, 0.01, trusted)
    c_suspect.run(PACE_S, 0.01, suspect)
    assert suspect.paced_cpu_load < IDLE_LOAD
    assert not trusted.verdict(2).accept  # 2 quiet sessions at 0.38 each: the crowd rule
    assert suspect.on_suspect_estimate and all(suspect.verdict(n).accept for n in range(1, 9))
    # Busy (cpu over IDLE_LOAD): the estimate counts again, suspect or not.
    c_suspect.run(PACE_S, 0.3, suspect)
    refused = suspect.verdict(2)
    assert not refused.accept and "15.2 CPU-s a turn (the start-up estimate)" in refused.detail
    # Idle again; then turns slower than the budget refuse whatever the estimate.
    c_suspect.run(PACE_S, 0.0, suspect)
    assert suspect.verdict(2).accept
    suspect.observe_turn(3000.0)
    assert not suspect.verdict(2).accept


def test_one_answered_turn_replaces_a_suspect_estimate() -> None:
    c = Clocks()
    m = meter(c, first_turn_s=15.2, first_turn_suspect=True)
    c.run(5, 0.0, m)
    m.observe_turn(600.0, "sess_a")
    c.run(5, 0.2, m)  # 2 CPU-s for that one turn
    assert not m.on_suspect_estimate
    assert m.cpu_per_turn_s == pytest.approx(2.0)
    assert m.verdict(4, m.unheard(["sess_a", "b", "c", "d"])).accept  # 0.05 a session now


def test_the_cpu_measured_per_turn_replaces_the_first_estimate_after_a_few_turns() -> None:
    c = Clocks()
    m = meter(c)
    c.run(5, 0.0, m)
    for _ in range(MIN_TURNS - 1):
        m.observe_turn(600.0)
    c.run(5, 0.2, m)  # 2 CPU-s for two turns: not enough turns to trust yet
    assert m.cpu_per_turn_s == 4.0
    m.observe_turn(600.0)
    c.run(1, 0.2, m)
    assert m.cpu_per_turn_s == pytest.approx((5 * 0.2 * 2 + 1 * 0.2 * 2) / MIN_TURNS)  # 2.4 CPU-s over 3 turns
    assert m.session_load < 0.05  # cheap turns: many more conversations fit
    assert m.verdict(10).accept


def test_the_cpu_per_turn_is_measured_over_the_last_minute() -> None:
    """A turn's cost swings with its reply's length: the figure is averaged over a minute, and
    what is older than that is forgotten."""
    c = Clocks()
    m = meter(c)
    for busy in (0.1, 0.1, 0.1, 0.1, 0.15, 0.15):  # 10 s each, one turn in each
        m.observe_turn(600.0)
        c.run(10, busy, m)
    # 2, 2, 2, 2, 3, 3 CPU-s: the last minute's mean, not the last 30 s' (2.67) nor the last turn's
    assert m.cpu_per_turn_s == pytest.approx(14.0 / 6)
    for _ in range(6):
        m.observe_turn(600.0)
        c.run(10, 0.15, m)
    assert m.cpu_per_turn_s == pytest.approx(3.0)  # the cheap turns are a minute old


def test_callers_who_talk_more_than_the_pace_show_in_the_measured_cpu() -> None:
    c = Clocks()
    m = meter(c, first_turn_s=0.4)  # 0.01 a session by the pace
    c.run(20, 0.7, m)  # but the cores are 70 % busy, and all four have been heard
    assert m.predicted(4, unheard=0) == pytest.approx(0.71)
    assert m.verdict(4, unheard=0).accept
    c.run(20, 0.8, m)
    assert not m.verdict(4, unheard=0).accept


def test_sessions_already_heard_are_in_the_measured_cpu_and_not_counted_again() -> None:
    """Callers arriving one by one: those who have talked cost what the CPU share over the last
    20 s shows; only those not heard yet are counted at a turn's CPU per 20 s."""
    c = Clocks()
    m = meter(c)  # 4 CPU-s a turn: 0.1 a session by the pace
    for _ in range(MIN_TURNS):
        m.observe_turn(600.0, "sess_a")
    m.observe_turn(600.0, "sess_b")
    c.run(20, 0.4, m)  # 16 CPU-s over the 4 turns: 4 CPU-s a turn, 0.1 a session
    assert m.unheard(["sess_a", "sess_b", "sess_c"]) == 1
    assert m.session_load == pytest.approx(0.1)
    assert m.predicted(3, m.unheard(["sess_a", "sess_b", "sess_c"])) == pytest.approx(0.6)
    assert m.predicted(3) == pytest.approx(0.8)  # not told who was heard: none was
    assert m.verdict(3, unheard=1).accept and not m.verdict(3).accept
    m.forget("sess_a")  # closed: a new session of that id would be unheard again
    assert m.unheard(["sess_a", "sess_b"]) == 1


def test_the_admission_share_is_measured_over_the_pace_not_only_the_last_seconds() -> None:
    c = Clocks()
    m = meter(c, first_turn_s=0.4)
    c.run(10, 0.9, m)  # a burst of turns 15 s ago...
    c.run(10, 0.1, m)  # ...and a quiet spell since: the 10 s share forgets the burst
    assert m.cpu_load == pytest.approx(0.1) and m.paced_cpu_load == pytest.approx(0.5)
    assert m.predicted(4, unheard=0) == pytest.approx(0.51)


def test_slow_turns_refuse_new_sessions_even_with_idle_cores() -> None:
    """A remote LLM or a lock shows in the turns' latency, not in this process's CPU."""
    c = Clocks()
    m = meter(c)
    c.run(10, 0.05, m)
    for _ in range(10):
        m.observe_turn(1900.0)  # 0.76 of the budget
    verdict = m.verdict(3)
    assert not verdict.accept and "turn p95 1900 ms" in verdict.detail


def test_max_sessions_is_a_fixed_number_whatever_the_load() -> None:
    c = Clocks()
    m = meter(c, max_sessions=2)
    c.run(10, 1.0, m)  # saturated cores do not refuse below the operator's number
    assert m.verdict(1).accept
    verdict = m.verdict(2)
    assert (verdict.accept, verdict.reason) == (False, "max_sessions")
    assert "server.max_sessions" in verdict.detail


def test_the_state_degrades_in_order_and_recovers() -> None:
    c = Clocks()
    m = meter(c)
    assert m.update_state(3) is None and m.state is State.ACCEPTING
    c.run(10, 0.9, m)
    assert m.update_state(3) is State.FULL
    assert m.update_state(3) is None  # no change, nothing to log
    for _ in range(5):
        m.observe_turn(3000.0)
    assert m.update_state(3) is State.OVER_BUDGET
    c.run(31, 0.1, m)  # the slow turns age out and the cores calm down
    assert m.update_state(3) is State.ACCEPTING


def test_the_balancer_weight_falls_with_the_load_and_never_reaches_zero() -> None:
    c = Clocks()
    m = meter(c)
    assert m.weight == 100
    c.run(10, 0.4, m)
    assert m.weight == 60
    c.run(10, 1.0, m)
    assert m.weight == 1


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError):
        LoadMeter(cores=0, budget_ms=2500)
    with pytest.raises(ValueError):
        LoadMeter(cores=2, budget_ms=2500, threshold=1.5)


def test_a_ramp_of_callers_is_judged_by_the_next_20_s_not_by_the_last_seconds() -> None:
    """Callers arriving one by one: the last seconds' CPU share is high because the newest
    callers' first turns are being answered right now, turns the pace spreads over 20 s.  The new
    session is admitted by the load of the next 20 s (the 20 s share plus the unheard sessions,
    who are not in it yet), not by the last 10 s, and not by their sum."""
    c = Clocks()
    m = meter(c, first_turn_s=4.0)  # 0.1 a session by the pace
    c.run(10, 0.1, m)
    c.run(10, 0.7, m)  # the ramp: 0.7 of the cores in the last 10 s, 0.4 over 20 s
    assert m.cpu_load == pytest.approx(0.7) and m.paced_cpu_load == pytest.approx(0.4)
    assert m.predicted(6, unheard=2) == pytest.approx(0.4 + 0.2 + 0.1)  # 0.7, not 0.7 + 0.1 or 1.0
    assert m.verdict(6, unheard=2).accept
    assert not m.verdict(6, unheard=3).accept  # 0.4 + 0.3 + 0.1: the next 20 s would not fit
    c.run(10, 0.7, m)  # the pace confirms the ramp: 0.7 over 20 s
    assert not m.verdict(6, unheard=0).accept


def test_a_crowd_that_has_not_talked_is_counted_in_full() -> None:
    """An idle server and a crowd connecting in the same second: nothing measured, every session
    at its expected cost."""
    c = Clocks()
    m = meter(c, first_turn_s=4.0)
    c.run(20, 0.0, m)
    assert m.predicted(6) == pytest.approx(0.7)
    assert m.verdict(6).accept and not m.verdict(7).accept
