"""voiceagent.pipeline.loopload: the event loop thread's CPU share, on injected clocks."""

from __future__ import annotations

from voiceagent.pipeline.loopload import LoopLoad


class Clocks:
    def __init__(self) -> None:
        self.cpu = 0.0
        self.wall = 0.0

    def advance(self, wall_s: float, cpu_s: float) -> None:
        self.wall += wall_s
        self.cpu += cpu_s


def test_busy_when_the_loop_thread_uses_more_than_its_share_and_not_otherwise() -> None:
    c = Clocks()
    load = LoopLoad(threshold=0.35, cpu=lambda: c.cpu, wall=lambda: c.wall)
    assert load.sample() == 0.0 and load.busy is False  # the first sample only starts the interval
    c.advance(0.1, 0.08)
    assert abs(load.sample() - 0.8) < 1e-9 and load.busy is True
    c.advance(0.1, 0.01)
    assert abs(load.sample() - 0.1) < 1e-9 and load.busy is False
    c.advance(0.0, 0.0)  # no wall time passed: nothing to measure, the last figure stands
    assert abs(load.sample() - 0.1) < 1e-9
