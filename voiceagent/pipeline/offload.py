"""Running blocking model code off the event loop.

Every model call, **and every step of a generator a model returns**, runs in the executor that
its backend owns.  Backends use single-thread executors, so calls on one model never overlap.
Where the executor is a :class:`~voiceagent.pipeline.scheduler.PriorityExecutor`, ``priority``
orders the queue (lower first: critical-path work ahead of background work of other sessions);
elsewhere work runs in submission order.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import AsyncGenerator, Callable, Iterator
from concurrent.futures import Executor
from typing import ParamSpec, TypeVar

from voiceagent.pipeline.scheduler import submit_at

__all__ = ["iterate_in", "run_at", "run_in", "submit_in"]

P = ParamSpec("P")
T = TypeVar("T")

_DONE = object()


def submit_in(executor: Executor, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> asyncio.Future[T]:
    """Start ``fn(*args, **kwargs)`` in ``executor`` (in the caller's context variables); the
    running loop's future of its result.  For callers that take the result in a callback rather
    than a task; cancelling the future discards the result, the call runs to completion."""
    call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
    return asyncio.get_running_loop().run_in_executor(executor, call)


async def run_in(executor: Executor, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """Run ``fn(*args, **kwargs)`` in ``executor``.

    Cancellation: the awaiting task is cancelled at once; the call itself runs to completion in
    its thread (Python cannot stop a thread) and its result is discarded.
    """
    return await submit_in(executor, fn, *args, **kwargs)


async def run_at(executor: Executor, priority: int, fn: Callable[[], T]) -> T:
    """Run ``fn()`` in ``executor`` at ``priority``; cancellation as :func:`run_in` (a call that
    has not started yet is taken off the queue)."""
    ctx = contextvars.copy_context()
    return await asyncio.wrap_future(submit_at(executor, priority, ctx.run, fn))


def _step(it: Iterator[T]) -> T | object:
    return next(it, _DONE)


async def iterate_in(executor: Executor, make: Callable[[], Iterator[T]], priority: int = 0) -> AsyncGenerator[T, None]:
    """Create the iterator with ``make()`` and pull each item from it inside ``executor``.

    Cancellation (or ``aclose``) stops after the step in flight; the generator is then closed in
    the same executor, after that step, so its own clean-up (``finally`` blocks) runs too.
    """
    it = await asyncio.wrap_future(submit_at(executor, priority, make))
    finished = False
    try:
        while True:
            item = await asyncio.wrap_future(submit_at(executor, priority, _step, it))
            if item is _DONE:
                finished = True
                return
            yield item  # type: ignore[misc]
    finally:
        if not finished:
            close = getattr(it, "close", None)
            if close is not None:
                # Single-thread executor: this runs after the step that may still be running.
                submit_at(executor, priority, close)
