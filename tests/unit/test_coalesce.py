"""Coalescer: requests queued together on a busy executor become one batch; alone, one runs at once."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from voiceagent.pipeline.coalesce import Coalescer
from voiceagent.pipeline.scheduler import PriorityExecutor

from .fakes import deadline
from .test_scheduler import occupy


class Upper:
    """A batch model: upper-cases each request; ``bad`` ones make the whole batch raise."""

    def __init__(self, bad: str = "") -> None:
        self.batches: list[list[str]] = []
        self.bad = bad

    def __call__(self, requests: Sequence[str]) -> list[str]:
        self.batches.append(list(requests))
        if self.bad and self.bad in requests:
            raise ValueError(f"cannot take {self.bad}")
        return [r.upper() for r in requests]


async def queued(ex: PriorityExecutor, count: int) -> None:
    """Let the tasks just created run to their first await (the first queues the drain there,
    before awaiting), then check that ``count`` calls wait in ``ex``'s queue."""
    await asyncio.sleep(0)  # one turn of the loop: the tasks created before it run first
    assert ex.depth == count


def test_a_request_that_finds_the_executor_idle_runs_alone_at_once(run: Callable[..., Any]) -> None:
    async def main() -> None:
        ex = PriorityExecutor("stt")
        model = Upper()
        co = Coalescer(ex, model, max_batch=4)
        try:
            assert await asyncio.wait_for(co.submit(0, "hello"), deadline()) == "HELLO"
            assert await asyncio.wait_for(co.submit(0, "again"), deadline()) == "AGAIN"
        finally:
            ex.shutdown()
        assert model.batches == [["hello"], ["again"]]
        assert (co.batches, co.batched) == (2, 2)

    run(main())


def test_requests_queued_together_are_one_batch_each_with_its_own_result_in_order(run: Callable[..., Any]) -> None:
    async def main() -> None:
        ex = PriorityExecutor("stt")
        model = Upper()
        co = Coalescer(ex, model, max_batch=4)
        try:
            gate, blocker = occupy(ex)
            tasks = [asyncio.create_task(co.submit(0, word)) for word in ("a", "b", "c", "d", "e")]
            await queued(ex, 1)  # one drain for all of them
            gate.set()
            results = await asyncio.wait_for(asyncio.gather(*tasks), deadline())
            blocker.result(deadline())
        finally:
            ex.shutdown()
        assert results == ["A", "B", "C", "D", "E"]
        assert model.batches == [["a", "b", "c", "d"], ["e"]]  # max_batch bounds a batch
        assert (co.batches, co.batched) == (2, 5)

    run(main())


def test_batches_keep_their_priority_against_the_models_other_work(run: Callable[..., Any]) -> None:
    async def main() -> None:
        ex = PriorityExecutor("stt")
        order: list[str] = []

        def model(requests: Sequence[str]) -> list[str]:
            order.append("batch:" + ",".join(requests))
            return list(requests)

        co = Coalescer(ex, model, max_batch=8)
        try:
            gate, blocker = occupy(ex)
            partial = ex.submit_at(1, order.append, "partial")
            finals = [asyncio.create_task(co.submit(0, w)) for w in ("x", "y")]
            await queued(ex, 2)
            gate.set()
            await asyncio.wait_for(asyncio.gather(*finals), deadline())
            partial.result(deadline())
            blocker.result(deadline())
        finally:
            ex.shutdown()
        assert order == ["batch:x,y", "partial"]

    run(main())


def test_a_request_cancelled_while_it_waits_is_never_run_and_the_others_are(run: Callable[..., Any]) -> None:
    async def main() -> None:
        ex = PriorityExecutor("stt")
        model = Upper()
        co = Coalescer(ex, model, max_batch=4)
        try:
            gate, blocker = occupy(ex)
            keep = asyncio.create_task(co.submit(0, "keep"))
            drop = asyncio.create_task(co.submit(0, "drop"))
            await queued(ex, 1)
            drop.cancel()
            with pytest.raises(asyncio.CancelledError):
                await drop
            gate.set()
            assert await asyncio.wait_for(keep, deadline()) == "KEEP"
            blocker.result(deadline())
        finally:
            ex.shutdown()
        assert model.batches == [["keep"]]

    run(main())


def test_a_request_the_model_refuses_fails_only_its_own_caller(run: Callable[..., Any]) -> None:
    async def main() -> None:
        ex = PriorityExecutor("stt")
        model = Upper(bad="poison")
        co = Coalescer(ex, model, max_batch=4)
        try:
            gate, blocker = occupy(ex)
            tasks = [asyncio.create_task(co.submit(0, w)) for w in ("one", "poison", "two")]
            await queued(ex, 1)
            gate.set()
            results = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), deadline())
            blocker.result(deadline())
            assert await asyncio.wait_for(co.submit(0, "after"), deadline()) == "AFTER"  # still usable
        finally:
            ex.shutdown()
        assert results[0] == "ONE" and results[2] == "TWO"
        assert isinstance(results[1], ValueError)
        # The batch, then each alone to find the one refused, then the later request.
        assert model.batches == [["one", "poison", "two"], ["one"], ["poison"], ["two"], ["after"]]

    run(main())


def test_a_batch_that_returns_the_wrong_number_of_results_fails_its_callers(run: Callable[..., Any]) -> None:
    async def main() -> None:
        ex = PriorityExecutor("stt")
        co: Coalescer[str, str] = Coalescer(ex, lambda requests: [], max_batch=4)
        try:
            with pytest.raises(RuntimeError, match="returned 0 results"):
                await asyncio.wait_for(co.submit(0, "x"), deadline())
        finally:
            ex.shutdown()

    run(main())


def test_a_shut_down_executor_refuses_the_request_and_leaves_nothing_pending(run: Callable[..., Any]) -> None:
    async def main() -> None:
        ex = PriorityExecutor("stt")
        co = Coalescer(ex, Upper(), max_batch=4)
        ex.shutdown()
        with pytest.raises(RuntimeError, match="shut down"):
            await co.submit(0, "late")
        assert co._pending == []

    run(main())


def test_max_batch_must_be_positive() -> None:
    with pytest.raises(ValueError):
        Coalescer(PriorityExecutor("x"), Upper(), max_batch=0)


def test_batches_run_in_the_executors_one_thread(run: Callable[..., Any]) -> None:
    async def main() -> None:
        ex = PriorityExecutor("whisper-thread")
        names: list[str] = []

        def model(requests: Sequence[str]) -> list[str]:
            names.append(threading.current_thread().name)
            return list(requests)

        co = Coalescer(ex, model, max_batch=2)
        try:
            await asyncio.wait_for(asyncio.gather(*(co.submit(0, str(i)) for i in range(5))), deadline())
        finally:
            ex.shutdown()
        assert set(names) == {"whisper-thread"}

    run(main())


def test_a_caller_woken_by_its_result_finds_the_executor_idle(run: Callable[..., Any]) -> None:
    # The STT stage's rejoin asks whether the decoder is busy as soon as its final arrives; a
    # drain left queued, or a result handed out while the executor still counts the call as
    # running, would make it skip the rejoin for nothing.
    async def main() -> None:
        ex = PriorityExecutor("stt")
        co = Coalescer(ex, Upper(), max_batch=4)
        busy: list[bool] = []

        async def final(word: str) -> str:
            result = await co.submit(0, word)
            busy.append(ex.busy)
            return result

        try:
            gate, blocker = occupy(ex)
            tasks = [asyncio.create_task(final(w)) for w in ("a", "b", "c", "d")]
            await queued(ex, 1)
            gate.set()
            assert await asyncio.wait_for(asyncio.gather(*tasks), deadline()) == ["A", "B", "C", "D"]
            blocker.result(deadline())
            assert await asyncio.wait_for(final("e"), deadline()) == "E"  # alone, on an idle executor
        finally:
            ex.shutdown()
        assert busy == [False] * 5

    run(main())


def test_requests_waiting_when_the_executor_is_shut_down_are_cancelled_not_left_hanging(run: Callable[..., Any]) -> None:
    async def main() -> None:
        ex = PriorityExecutor("stt")
        model = Upper()
        co = Coalescer(ex, model, max_batch=4)
        gate, blocker = occupy(ex)
        tasks = [asyncio.create_task(co.submit(0, w)) for w in ("a", "b")]
        await queued(ex, 1)
        ex.shutdown(wait=False, cancel_futures=True)
        gate.set()
        results = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), deadline())
        blocker.result(deadline())
        assert all(isinstance(r, asyncio.CancelledError) for r in results), results
        assert model.batches == []

    run(main())
