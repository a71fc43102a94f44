"""The integration tests' Realtime client: paced audio out, every server event recorded.

The client side is the project's one client core (:mod:`voiceagent.client`): each server message
is fed to a :class:`~voiceagent.client.RealtimeClient` (its typed view: :meth:`Recorder.done`…)
and kept as sent (``events``: the tests check the wire itself); audio goes out through the core's
:class:`~voiceagent.client.Pacer`.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed

from benchmarks.common.metrics import read
from voiceagent.audio import Int16Array, read_wav, resample
from voiceagent.client import Pacer, RealtimeClient, Response, messages
from voiceagent.events import Event, ResponseDone
from voiceagent.transports.realtime_wire import WIRE_RATE

__all__ = ["WIRE_RATE", "Recorder", "append_msg", "recording", "scrape", "send_paced", "wire_audio"]


def wire_audio(path: Path, tail_s: float = 0.0) -> Int16Array:
    pcm, rate = read_wav(path)
    out = resample(pcm, rate, WIRE_RATE)
    return np.concatenate([out, np.zeros(int(tail_s * WIRE_RATE), dtype=np.int16)])


def append_msg(chunk: Int16Array) -> str:
    return json.dumps(messages.append_audio(chunk))


@dataclass
class Recorder:
    """Reads every server event into ``events`` (and the client core) and lets tests wait for one
    by predicate."""

    ws: ClientConnection
    events: list[dict[str, Any]] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    client: RealtimeClient = field(default_factory=RealtimeClient)
    _typed: list[list[Event]] = field(default_factory=list)
    _cond: asyncio.Condition = field(default_factory=asyncio.Condition)
    closed: bool = False

    async def pump(self) -> None:
        try:
            async for raw in self.ws:
                msg = json.loads(raw)
                now = time.monotonic()
                typed = self.client.feed(msg, now)
                async with self._cond:
                    self._typed.append(typed)  # before a waiter sees it: the typed view is current
                    self.events.append(msg)
                    self.times.append(now)
                    self._cond.notify_all()
        except ConnectionClosed:
            pass  # the close code stays readable on ``ws.close_code``
        finally:
            async with self._cond:
                self.closed = True
                self._cond.notify_all()

    async def wait_for(self, kind: str, timeout: float = 60.0, start: int = 0, **fields: Any) -> dict[str, Any]:
        def find() -> dict[str, Any] | None:
            for ev in self.events[start:]:
                if ev.get("type") == kind and all(ev.get(k) == v for k, v in fields.items()):
                    return ev
            return None

        async with self._cond:
            await asyncio.wait_for(self._cond.wait_for(lambda: find() is not None or self.closed), timeout)
            found = find()
        if found is None:
            raise AssertionError(f"connection closed before {kind}; got {[e['type'] for e in self.events]}")
        return found

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e.get("type") == kind]

    def typed(self, msg: dict[str, Any]) -> list[Event]:
        """The client core's events of ``msg``, one of :attr:`events` (the very object)."""
        return self._typed[next(i for i, e in enumerate(self.events) if e is msg)]

    def done(self, msg: dict[str, Any]) -> ResponseDone:
        """A recorded ``response.done`` as the client core reads it: ``status``, ``reason``,
        ``item_id`` and ``text`` (its message item's), ``calls``."""
        return next(ev for ev in self.typed(msg) if isinstance(ev, ResponseDone))

    def response(self, msg: dict[str, Any]) -> Response:
        """What the client core tracked of the response ``msg`` (a ``response.*`` event) belongs to."""
        return self.client.responses[msg["response"]["id"] if "response" in msg else msg["response_id"]]


async def recording(ws: ClientConnection, timeout: float = 10.0) -> tuple[Recorder, asyncio.Task[None]]:
    """A :class:`Recorder` of ``ws`` and the task that pumps it, once the server's
    ``session.created`` has arrived (within ``timeout`` s).  The caller owns the task: cancel it,
    or await it after closing ``ws``."""
    rec = Recorder(ws)
    pump = asyncio.create_task(rec.pump())
    await rec.wait_for("session.created", timeout)
    return rec, pump


async def send_paced(ws: ClientConnection, pcm: Int16Array, speed: float = 1.0, chunk_ms: int = 20) -> None:
    """Send ``pcm`` (24 kHz) in ``chunk_ms`` messages at ``speed`` × real time (pacing audio like a
    microphone, not synchronisation)."""

    async def send(chunk: Int16Array) -> None:
        await ws.send(append_msg(chunk))

    await Pacer(send, chunk_ms=chunk_ms, speed=speed).play(pcm)


def scrape(port: int) -> dict[str, float]:
    """The in-process server's ``/metrics`` on ``port`` (blocking: call it through
    ``asyncio.to_thread``; format: :func:`benchmarks.common.metrics.read`)."""
    return read(f"http://127.0.0.1:{port}")
