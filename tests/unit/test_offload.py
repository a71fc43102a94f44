"""pipeline.offload: model calls and generator steps run in the backend's executor thread."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import AsyncGenerator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from voiceagent.pipeline import iterate_in, run_in

from .fakes import Recorder, deadline

Run = Callable[..., Any]
PREFIX = "offload-test"

request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="unset")


@pytest.fixture
def executor() -> Iterator[ThreadPoolExecutor]:
    ex = ThreadPoolExecutor(max_workers=1, thread_name_prefix=PREFIX)
    yield ex
    ex.shutdown(wait=True, cancel_futures=True)


class Source:
    """A generator factory that records, per step, the thread it ran in, and when it was closed."""

    def __init__(self, n: int, fail_at: int | None = None, block_at: int | None = None) -> None:
        self.n = n
        self.fail_at = fail_at
        self.block_at = block_at
        self.made_in: list[str] = []
        self.steps = Recorder()  # (index, thread name) each time the generator body runs to produce an item
        self.closed = Recorder()  # thread name where the finally ran
        self.release = threading.Event()
        self.blocking = threading.Event()

    def make(self) -> Iterator[int]:
        self.made_in.append(threading.current_thread().name)
        return self._gen()

    def _gen(self) -> Iterator[int]:
        try:
            for i in range(self.n):
                if i == self.fail_at:
                    raise ValueError(f"failed at {i}")
                if i == self.block_at:
                    self.blocking.set()
                    assert self.release.wait(deadline()), "test never released the step"
                self.steps.record((i, threading.current_thread().name))
                yield i
        finally:
            self.closed.record(threading.current_thread().name)


def test_run_in_runs_in_the_executor_thread(run: Run, executor: ThreadPoolExecutor) -> None:
    def work(a: int, *, b: int) -> tuple[int, str, str]:
        return a + b, threading.current_thread().name, request_id.get()

    async def main() -> None:
        request_id.set("req-1")
        total, thread, ctx_value = await run_in(executor, work, 2, b=3)
        assert total == 5
        assert thread.startswith(PREFIX)
        assert thread != threading.current_thread().name
        assert ctx_value == "req-1"  # the caller's context variables travel with the call

    run(main(), 5)


def test_run_in_propagates_exceptions(run: Run, executor: ThreadPoolExecutor) -> None:
    def fail() -> None:
        raise KeyError("model missing")

    async def main() -> None:
        with pytest.raises(KeyError, match="model missing"):
            await run_in(executor, fail)

    run(main(), 5)


def test_run_in_cancellation_returns_at_once_and_the_call_finishes_in_its_thread(run: Run, executor: ThreadPoolExecutor) -> None:
    started = threading.Event()
    release = threading.Event()
    finished = Recorder()

    def slow() -> int:
        started.set()
        assert release.wait(deadline())
        finished.record(threading.current_thread().name)
        return 1

    async def main() -> None:
        task = asyncio.create_task(run_in(executor, slow))
        assert await asyncio.to_thread(started.wait, deadline())
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, deadline(2.0))  # returns although the call is still running
        assert len(finished) == 0
        release.set()
        [thread] = await finished.wait(1)
        assert thread.startswith(PREFIX)

    run(main(), 5)


def test_iterate_in_pulls_every_item_in_the_executor(run: Run, executor: ThreadPoolExecutor) -> None:
    src = Source(4)

    async def main() -> list[int]:
        return [x async for x in iterate_in(executor, src.make)]

    assert run(main(), 5) == [0, 1, 2, 3]
    assert len(src.made_in) == 1 and src.made_in[0].startswith(PREFIX)
    steps = src.steps.items
    assert [i for i, _ in steps] == [0, 1, 2, 3]
    assert all(thread.startswith(PREFIX) for _, thread in steps)
    [closed] = src.closed.items  # exhausted normally: the finally ran on the last step
    assert closed.startswith(PREFIX)


def test_iterate_in_aclose_closes_the_generator_in_the_executor(run: Run, executor: ThreadPoolExecutor) -> None:
    src = Source(100)

    async def main() -> None:
        agen = iterate_in(executor, src.make)
        assert isinstance(agen, AsyncGenerator)
        assert await agen.__anext__() == 0
        assert await agen.__anext__() == 1
        await agen.aclose()
        [thread] = await src.closed.wait(1)
        assert thread.startswith(PREFIX)

    run(main(), 5)
    assert [i for i, _ in src.steps.items] == [0, 1]  # nothing was produced after the close


def test_iterate_in_break_closes_the_generator(run: Run, executor: ThreadPoolExecutor) -> None:
    src = Source(100)

    async def main() -> None:
        async for x in iterate_in(executor, src.make):
            if x == 2:
                break
        [thread] = await src.closed.wait(1)
        assert thread.startswith(PREFIX)

    run(main(), 5)
    assert [i for i, _ in src.steps.items] == [0, 1, 2]


def test_iterate_in_cancellation_closes_the_generator_after_the_step_in_flight(run: Run, executor: ThreadPoolExecutor) -> None:
    src = Source(100, block_at=2)

    async def main() -> None:
        got: list[int] = []

        async def consume() -> None:
            async for x in iterate_in(executor, src.make):
                got.append(x)

        task = asyncio.create_task(consume())
        assert await asyncio.to_thread(src.blocking.wait, deadline())  # step 2 is running in the executor
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, deadline(2.0))
        assert len(src.closed) == 0  # the generator cannot be closed while its step runs
        src.release.set()
        [thread] = await src.closed.wait(1)
        assert thread.startswith(PREFIX)
        assert got == [0, 1]

    run(main(), 5)
    # The step in flight finished (item 2 was produced and discarded); nothing after it ran.
    assert [i for i, _ in src.steps.items] == [0, 1, 2]


def test_iterate_in_cancellation_of_a_consumer_awaiting_elsewhere_closes_the_generator(run: Run, executor: ThreadPoolExecutor) -> None:
    # As the LLM stage: cancelled while awaiting back-pressure in the loop body, not a step.
    src = Source(100)

    async def main() -> None:
        first = asyncio.Event()

        async def consume() -> None:
            async for _ in iterate_in(executor, src.make):
                first.set()
                await asyncio.Event().wait()

        task = asyncio.create_task(consume())
        await asyncio.wait_for(first.wait(), deadline(2.0))
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        [thread] = await src.closed.wait(1)
        assert thread.startswith(PREFIX)

    run(main(), 5)
    assert [i for i, _ in src.steps.items] == [0]


def test_iterate_in_propagates_an_exception_from_the_generator(run: Run, executor: ThreadPoolExecutor) -> None:
    src = Source(10, fail_at=2)

    async def main() -> list[int]:
        got: list[int] = []
        with pytest.raises(ValueError, match="failed at 2"):
            async for x in iterate_in(executor, src.make):
                got.append(x)
        return got

    assert run(main(), 5) == [0, 1]
    [thread] = src.closed.items
    assert thread.startswith(PREFIX)


def test_iterate_in_propagates_an_exception_from_make(run: Run, executor: ThreadPoolExecutor) -> None:
    def make() -> Iterator[int]:
        raise OSError("cannot open model")

    async def main() -> None:
        with pytest.raises(OSError, match="cannot open model"):
            async for _ in iterate_in(executor, make):
                pass

    run(main(), 5)
