"""Joining the calls that wait for a shared model at the same time into one batched call.

A shared model runs one call at a time in its single-thread executor.  When several sessions'
calls are queued together (four users stop talking at the same instant and four final decodes
wait for Whisper), a model that takes a batch does them in less time as one call than one after
another.  A :class:`Coalescer` does that without a timer: each :meth:`Coalescer.submit` puts its
request in a shared list, and where no *drain* call is queued on the executor yet, queues one;
the drain takes every request waiting (up to ``max_batch``; more left waiting queue the next
drain) and hands them to ``run_batch`` at once.  So a request that finds the executor idle runs at
once, alone, exactly as an unbatched call would; only requests that would have waited in line
anyway are joined.

The drain is queued at the ``priority`` of the request that queued it on a
:class:`~voiceagent.pipeline.scheduler.PriorityExecutor`, so batched calls keep their place
against the model's other work (a final decode still runs before a queued partial); give every
request of one coalescer the same priority.  Results are handed out once the drain has returned,
as the executor hands out a call's result: a caller woken by its result that asks whether the
executor is busy sees it idle if nothing else waits.

Cancellation: cancelling :meth:`Coalescer.submit` before its batch starts takes the request out
(it is never decoded); once its batch is running, the batch finishes (Python cannot stop a
thread) and the result is dropped.  ``CancelledError`` propagates.  An executor shut down with
its queue cancelled cancels the requests still waiting.

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
        self._queued = False  # a drain is queued and has not started
        self._priority = 0
        self.batches = 0
        self.batched = 0

    async def submit(self, priority: int, request: Req) -> Res:
        """The result of ``request``, from a batch of it and the requests queued beside it."""
        fut: Future[Res] = Future()
        with self._lock:
            self._pending.append((request, fut))
            queue, self._queued = not self._queued, True
        if queue:
            try:
                self._queue(priority)
            except BaseException:
                with self._lock:
                    self._queued = False
                    self._pending = [(r, f) for r, f in self._pending if f is not fut]
                raise
        return await asyncio.wrap_future(fut)

    def _queue(self, priority: int) -> None:
        self._priority = priority
        drain = submit_at(self.executor, priority, self._drain)
        drain.add_done_callback(self._deliver)

    def _drain(self) -> list[tuple[Future[Res], Res | BaseException]]:
        """In the executor: run the waiting requests (up to ``max_batch``) as one batch; the
        outcomes go to their callers from :meth:`_deliver`, once the executor has the result."""
        with self._lock:
            self._queued = False
            live: list[tuple[Req, Future[Res]]] = []
            while self._pending and len(live) < self.max_batch:
                request, fut = self._pending.pop(0)
                if fut.set_running_or_notify_cancel():  # one cancelled while it waited is never run
                    live.append((request, fut))
            more = bool(self._pending) and not self._queued
            self._queued = self._queued or more
        if more:
            try:
                self._queue(self._priority)
            except RuntimeError:  # shut down meanwhile: the requests left will never run
                with self._lock:
                    waiting, self._pending, self._queued = self._pending, [], False
                for _, fut in waiting:
                    fut.cancel()
        if not live:
            return []
        try:
            results = self._run([r for r, _ in live])
        except Exception as exc:
            if len(live) == 1:
                return [(live[0][1], exc)]
            # Which request does the model refuse?  Each alone: the others still get their results.
            outcomes: list[tuple[Future[Res], Res | BaseException]] = []
            for request, fut in live:
                try:
                    (result,) = self._run([request])
                except Exception as one_exc:
                    outcomes.append((fut, one_exc))
                else:
                    outcomes.append((fut, result))
            return outcomes
        except BaseException as exc:  # KeyboardInterrupt and the like: every waiter hears of it
            return [(f, exc) for _, f in live]
        return [(f, result) for (_, f), result in zip(live, results, strict=True)]

    def _deliver(self, drain: Future[list[tuple[Future[Res], Res | BaseException]]]) -> None:
        """The drain's future is done (the executor no longer counts it as running)."""
        if drain.cancelled():  # the executor was shut down with its queue: nobody will run these
            with self._lock:
                waiting, self._pending, self._queued = self._pending, [], False
            for _, fut in waiting:
                fut.cancel()
            return
        for fut, outcome in drain.result():
            if isinstance(outcome, BaseException):
                fut.set_exception(outcome)
            else:
                fut.set_result(outcome)

    def _run(self, requests: list[Req]) -> list[Res]:
        self.batches += 1
        self.batched += len(requests)
        results = self._run_batch(requests)
        if len(results) != len(requests):
            raise RuntimeError(f"a batch of {len(requests)} returned {len(results)} results")
        return results
