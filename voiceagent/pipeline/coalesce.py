"""Joining the calls that wait for a shared model at the same time into one batched call.

A shared model runs one call at a time in its single-thread executor.  When several sessions'
calls are queued together (four users stop talking at the same instant and four final decodes
wait for Whisper), a model that takes a batch does them in less time as one call than one after
another.  A :class:`Coalescer` does that without a timer: each :meth:`Coalescer.submit` puts its
request in a shared list and queues one *drain* call on the executor; the first drain to run
takes every request waiting (up to ``max_batch``) and hands them to ``run_batch`` at once; the
drains after it find the list empty and return.  So a request that finds the executor idle runs
at once, alone, exactly as an unbatched call would; only requests that would have waited in line
anyway are joined.

The drain is queued at the request's ``priority`` on a
:class:`~voiceagent.pipeline.scheduler.PriorityExecutor`, so batched calls keep their place
against the model's other work (a final decode still runs before a queued partial).

Cancellation: cancelling :meth:`Coalescer.submit` before its batch starts takes the request out
(it is never decoded); once its batch is running, the batch finishes (Python cannot stop a
thread) and the result is dropped.  ``CancelledError`` propagates.

Failure: where ``run_batch`` raises on a batch of several, each request is run again alone, so
one request the model cannot take fails only its own caller; a request that raises alone gets
that exception.  The coalescer stays usable.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, Future
from typing import Generic, TypeVar

from voiceagent.pipeline.scheduler import submit_at

__all__ = ["Coalescer"]

Req = TypeVar("Req")
Res = TypeVar("Res")


class Coalescer(Generic[Req, Res]):
    """Batches the requests queued together on ``executor`` into calls of ``run_batch``.

    ``run_batch(requests) -> results`` runs in ``executor`` and returns one result per request, in
    order.  ``max_batch`` bounds a batch (at least 1; 1 never joins anything).  ``batches`` and
    ``batched`` count the calls of ``run_batch`` and the requests they carried.
    """

    def __init__(self, executor: Executor, run_batch: Callable[[Sequence[Req]], list[Res]], max_batch: int) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be at least 1")
        self.executor = executor
        self.max_batch = max_batch
        self._run_batch = run_batch
        self._lock = threading.Lock()
        self._pending: list[tuple[Req, Future[Res]]] = []
        self.batches = 0
        self.batched = 0

    async def submit(self, priority: int, request: Req) -> Res:
        """The result of ``request``, from a batch of it and the requests queued beside it."""
        fut: Future[Res] = Future()
        with self._lock:
            self._pending.append((request, fut))
        try:
            submit_at(self.executor, priority, self._drain)
        except BaseException:
            with self._lock:
                self._pending = [(r, f) for r, f in self._pending if f is not fut]
            raise
        return await asyncio.wrap_future(fut)

    def _drain(self) -> None:
        """In the executor: run the waiting requests (up to ``max_batch``) as one batch."""
        with self._lock:
            take, self._pending = self._pending[: self.max_batch], self._pending[self.max_batch :]
        # A request cancelled while it waited is dropped here, never run.
        live = [(r, f) for r, f in take if f.set_running_or_notify_cancel()]
        if not live:
            return
        self.batches += 1
        self.batched += len(live)
        try:
            results = self._run([r for r, _ in live])
        except Exception as exc:
            if len(live) == 1:
                live[0][1].set_exception(exc)
                return
            # Which request does the model refuse?  Each alone: the others still get their results.
            for request, fut in live:
                try:
                    (result,) = self._run([request])
                except Exception as one_exc:
                    fut.set_exception(one_exc)
                else:
                    fut.set_result(result)
            return
        except BaseException as exc:  # KeyboardInterrupt and the like: every waiter hears of it
            for _, f in live:
                f.set_exception(exc)
            raise
        for (_, f), result in zip(live, results, strict=True):
            f.set_result(result)

    def _run(self, requests: list[Req]) -> list[Res]:
        results = self._run_batch(requests)
        if len(results) != len(requests):
            raise RuntimeError(f"a batch of {len(requests)} returned {len(results)} results")
        return results
