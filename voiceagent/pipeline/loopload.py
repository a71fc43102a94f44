"""How busy the event loop's thread is, for models that adapt their threads to the cores' load.

On a small machine the event loop is one more thread that wants a core: a server parsing a flood
of client messages (or a fuzzer's) keeps it busy, and a two-thread llama.cpp step then waits for a
descheduled peer at every barrier, as it does when another model runs.  :class:`LoopLoad` samples,
inside the loop, the loop thread's CPU time over wall time; :data:`loop_load` is the process's one
instance, which the servers of a process keep up to date and the model registry reads (a plain
attribute: any thread may read it).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

__all__ = ["LoopLoad", "loop_load"]


class LoopLoad:
    """``busy``: the loop thread used more than ``threshold`` of a core over the last interval.

    ``cpu``/``wall`` are injected for tests (the loop thread's CPU clock and a monotonic clock).
    """

    def __init__(
        self,
        threshold: float = 0.35,
        cpu: Callable[[], float] = time.thread_time,
        wall: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.threshold = threshold
        self._cpu = cpu
        self._wall = wall
        self.fraction = 0.0
        self.busy = False
        self._last: tuple[float, float] | None = None

    def sample(self) -> float:
        """Call in the loop's thread; returns the CPU share since the previous call."""
        now = (self._cpu(), self._wall())
        if self._last is not None and now[1] > self._last[1]:
            self.fraction = (now[0] - self._last[0]) / (now[1] - self._last[1])
            self.busy = self.fraction > self.threshold
        self._last = now
        return self.fraction

    async def watch(self, interval_s: float = 0.1) -> None:
        """Sample every ``interval_s`` until cancelled (then ``busy`` goes back to False)."""
        self._last = None
        try:
            while True:
                self.sample()
                await asyncio.sleep(interval_s)  # a periodic sampler, not a wait for anything
        finally:
            self.busy = False


loop_load = LoopLoad()
