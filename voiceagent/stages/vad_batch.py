"""One VAD call for the audio of every session at once, not one per message per session.

A session's client sends about fifty audio messages a second, and each used to cost a trip to the
VAD's thread and back and one ONNX call of one 32 ms window.  At 8 conversations that was more
CPU than the VAD model itself.  :class:`VadBatch` gathers the frames the sessions hand it and
runs them in one executor call (Silero's ONNX takes a batch: :meth:`SileroVad.process_many`;
other backends are looped inside that one call).

When does a batch run?  As soon as every session that sent audio lately (within
:data:`ACTIVE_S`) has a frame waiting, or once the oldest waiting frame has waited
:data:`MAX_WAIT_S`, whichever comes first, and never while the previous batch is still running
(frames that arrive meanwhile go in the next).  So a lone session waits for nothing, and many
sessions wait at most one window (32 ms) for each other.

Order: one stream's frames are processed in the order its stage sends them (each stage awaits the
result of its frame before it sends the next).  Cancellation: a frame whose ``process`` is
cancelled before its batch begins is dropped (its session is closing); one cancelled after is
still processed (the model call cannot be stopped) and its result dropped.  No task is made: a
batch is an executor future with a callback.  A batch that raises fails every frame in it with
that exception.
"""

from __future__ import annotations

import asyncio
import functools
import weakref
from collections.abc import Sequence

from voiceagent.audio import Float32Array
from voiceagent.backends.protocols import VadBackend, VadStream
from voiceagent.pipeline.offload import submit_in

__all__ = ["ACTIVE_S", "MAX_WAIT_S", "VadBatch", "process_many"]

MAX_WAIT_S = 0.032
"""The longest a frame waits for other sessions' frames (one Silero window)."""
ACTIVE_S = 0.1
"""A session that sent audio within this long is expected to send more soon (clients send a
message every 20–100 ms, silence included)."""


def process_many(backend: VadBackend, jobs: Sequence[tuple[VadStream, Float32Array]]) -> list[list[float]]:
    """Each job's window probabilities, in one call of the backend where it batches
    (``process_many``), else one stream after another.  Runs in the backend's executor."""
    batching = getattr(backend, "process_many", None)
    if batching is not None:
        return list(batching(jobs))
    return [stream.process(pcm) for stream, pcm in jobs]


class VadBatch:
    """The batching of one VAD backend's frames on one event loop (:meth:`of` finds it)."""

    def __init__(self, backend: VadBackend, loop: asyncio.AbstractEventLoop) -> None:
        self._backend = backend
        self._loop = loop
        self._waiting: list[tuple[VadStream, Float32Array, asyncio.Future[list[float]]]] = []
        self._first_wait = 0.0
        self._recent: dict[int, float] = {}  # id(stream) -> when it last sent audio
        self._running = False
        self._timer: asyncio.TimerHandle | None = None
        self.started = 0
        """Batches started (the ones that finished are ``batches``)."""
        self.batches = 0
        self.frames = 0

    @classmethod
    def of(cls, backend: VadBackend) -> VadBatch:
        """The batch of ``backend`` on the running loop (made on first use)."""
        loop = asyncio.get_running_loop()
        per_loop = _BATCHES.setdefault(backend, weakref.WeakKeyDictionary())
        batch = per_loop.get(loop)
        if batch is None:
            batch = per_loop[loop] = cls(backend, loop)
        return batch

    async def process(self, stream: VadStream, pcm: Float32Array) -> list[float]:
        """``stream.process(pcm)``, run in a batch with the other sessions' frames."""
        now = self._loop.time()
        fut: asyncio.Future[list[float]] = self._loop.create_future()
        if not self._waiting:
            self._first_wait = now
        self._waiting.append((stream, pcm, fut))
        self._recent[id(stream)] = now
        self._consider()
        return await fut

    def _consider(self) -> None:
        """Start a batch now if every recently active stream has a frame waiting or the oldest
        frame has waited long enough; else make sure a timer will look again."""
        if self._running or not self._waiting:
            return
        now = self._loop.time()
        # Each stream has at most one frame waiting (its stage awaits it), so the count of waiting
        # frames is the count of streams waiting, all of which are recent.
        if len(self._waiting) < len(self._recent):
            horizon = now - ACTIVE_S
            for key in [k for k, t in self._recent.items() if t < horizon]:
                del self._recent[key]
        if len(self._waiting) >= len(self._recent) or now - self._first_wait >= MAX_WAIT_S:
            self._start()
        elif self._timer is None:
            self._timer = self._loop.call_at(self._first_wait + MAX_WAIT_S, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._consider()

    def _start(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        # A frame whose stage was cancelled before its batch began is dropped: its session is
        # closing.  One cancelled after its batch began is still processed (the call cannot stop).
        jobs = [job for job in self._waiting if not job[2].cancelled()]
        self._waiting = []
        if not jobs:
            return
        self._running = True
        self.started += 1
        # A plain executor future and a callback, no task: nothing outlives a closed session but
        # the model call in flight.
        future = submit_in(self._backend.executor, process_many, self._backend, [(s, p) for s, p, _ in jobs])
        future.add_done_callback(functools.partial(self._finish, jobs))

    def _finish(
        self, jobs: list[tuple[VadStream, Float32Array, asyncio.Future[list[float]]]], future: asyncio.Future[list[list[float]]]
    ) -> None:
        self._running = False
        if future.cancelled():  # the loop is shutting down: nobody waits for these any more
            for _, _, fut in jobs:
                fut.cancel()
            return
        exc = future.exception()
        if exc is not None:  # the model raised: every frame of this batch fails with it
            for _, _, fut in jobs:
                if not fut.done():
                    fut.set_exception(exc)
        else:
            self.batches += 1
            self.frames += len(jobs)
            for (_, _, fut), probs in zip(jobs, future.result(), strict=True):
                if not fut.done():  # its stage was cancelled meanwhile: the result is dropped
                    fut.set_result(probs)
        self._consider()  # the frames that came in meanwhile


_BATCHES: weakref.WeakKeyDictionary[object, weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, VadBatch]] = weakref.WeakKeyDictionary()
"""The batch of each backend on each loop (a process may run several servers, tests several loops)."""
