"""The hostile clients: seeded scenarios on every route, until enough hostile messages were sent."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from typing import Any

from benchmarks.fuzz.hostile_realtime import RealtimeScenarios
from benchmarks.fuzz.hostile_tcp import TcpScenarios
from benchmarks.fuzz.hostile_twilio import TwilioScenarios
from benchmarks.fuzz.pacing import PACER, Pacer

SCENARIOS = {"realtime_batch": 50, "twilio_call": 34, "raw_tcp": 8, "audio_burst": 2, "slow_reader": 2}
"""Hostile scenarios and their weights; ``stalled_reader`` (one per route, about 50 s) runs beside them."""


class Hostile(RealtimeScenarios, TwilioScenarios, TcpScenarios):
    """The hostile clients: scenarios picked by a seeded generator until ``target`` hostile
    messages have been sent and (``go_on`` cleared) the good session has finished its turns under
    load: every one of them is under load, and the count at the end is at least the target."""

    async def client(self, index: int, rate: float) -> None:
        rng = random.Random(f"{self.seed}-{index}")
        PACER.set(Pacer(rate))
        run: dict[str, Callable[[random.Random, str], Any]] = {
            "realtime_batch": self.realtime_batch,
            "twilio_call": self.twilio_call,
            "raw_tcp": self.raw_tcp,
            "audio_burst": self.audio_burst,
            "slow_reader": self.slow_reader,
        }
        names = [k for k in SCENARIOS if k in self.kinds]
        if not names:
            return
        weights = [SCENARIOS[k] for k in names]
        n = 0
        while not self.reached.is_set() or self.go_on.is_set():
            n += 1
            name = rng.choices(names, weights)[0]
            fn = run[name]
            self.stats.scenarios[name] += 1
            try:
                await asyncio.wait_for(fn(rng, f"c{index}s{n}"), 120)
            except Exception as exc:  # recorded and reported; the run goes on
                self.stats.exception(name, exc)
                if isinstance(exc, ConnectionRefusedError):
                    return  # the server is gone: the run will say so
            if sum(self.stats.sent.values()) >= self.target:
                self.reached.set()
