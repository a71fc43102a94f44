"""Hostile ``/twilio`` calls: a valid start, then one bad frame (or another bad ending)."""

from __future__ import annotations

import asyncio
import contextlib
import random
from typing import Any

from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from benchmarks.fuzz.categories import TWILIO_CATEGORIES
from benchmarks.fuzz.frames import close_code, server_json
from benchmarks.fuzz.hostile_base import HostileBase
from benchmarks.fuzz.pacing import pace
from benchmarks.fuzz.twilio_gen import TwilioGen


class TwilioScenarios(HostileBase):
    """The hostile scenarios on ``/twilio``."""

    async def twilio_call(self, rng: random.Random, tag: str) -> None:
        gen = TwilioGen(rng)
        ws = await connect(f"{self.base}/twilio", max_size=None, open_timeout=self.timeout, compression=rng.choice(("deflate", None)))
        events: list[dict[str, Any]] = []

        async def pump() -> None:
            with contextlib.suppress(ConnectionClosed):
                async for raw in ws:
                    events.append(server_json(raw))

        reader = asyncio.create_task(pump())
        ending = rng.choices(("bad", "stop_twice", "abort", "oversized", "invalid_utf8", "protocol_violation"), (70, 6, 6, 6, 6, 6))[0]
        category = rng.choice(TWILIO_CATEGORIES)
        started = ending != "bad" or rng.random() < 0.7  # most bad frames come mid-call, some before ``start``
        frames: list[str] = []
        if rng.random() < 0.8:
            frames.append(gen.connected())
        if started:
            frames.append(gen.start())
            frames += [gen.media() for _ in range(rng.randint(0, 25))]
            if rng.random() < 0.3:
                frames.append(gen.dtmf())
        for frame in frames:
            await pace()
            await ws.send(frame)
        self.stats.valid_frames["twilio"] += len(frames)
        await pace()
        expected: set[int] | None
        if ending == "bad":
            frame = gen.bad(category, started)
            self.stats.sent[f"twilio.{category}"] += 1
            self.stats.tw_bad += 1
            expected = {1003} if isinstance(frame, bytes) else {1008}
            with contextlib.suppress(ConnectionClosed):
                await ws.send(frame)
        elif ending == "stop_twice":
            self.stats.sent["twilio.out_of_order"] += 1
            expected = {1000}
            with contextlib.suppress(ConnectionClosed):
                if not started:
                    await ws.send(gen.start())
                await ws.send(gen.stop())
                await ws.send(gen.stop())
        elif ending == "abort":
            self.stats.sent["twilio.abrupt_disconnect"] += 1
            ws.transport.abort()
            await self._await_close(reader)
            return
        elif ending == "oversized":
            self.stats.sent["twilio.oversized"] += 1
            self.stats.tw_bad += 1
            await self._oversized(ws, rng, {"event": "media", "streamSid": gen.sid, "media": {"payload": ""}}, "pad")
            expected = {1009}
        elif ending == "invalid_utf8":
            self.stats.sent["twilio.invalid_utf8"] += 1
            self.stats.tw_bad += 1
            await self._invalid_utf8(ws, rng, f'{{"event": "dtmf", "streamSid": "{gen.sid}", "dtmf": {{"digit": "')
            expected = {1007}
        else:
            self.stats.sent["twilio.protocol_violation"] += 1
            self.stats.tw_bad += 1
            self._protocol_violation(ws, rng)
            expected = {1002, 1007}
        await self._await_close(reader)
        code = close_code(ws)
        if ending != "stop_twice":
            if code is not None and code != 1000:
                self.stats.tw_refused += 1
            else:
                self.stats.tw_not_refused += 1
                if len(self.stats.tw_not_refused_samples) < 20:
                    self.stats.tw_not_refused_samples.append(f"{tag} {ending}/{category} started={started}: close {code}")
        self.stats.close("twilio", code, expected, ending if ending != "bad" else category)
