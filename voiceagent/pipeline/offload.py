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

__all__ = ["iterate_in", "run_at", "run_in"]

P = ParamSpec("P")
T = TypeVar("T")

_DONE = object()


async def run_in(executor: Executor, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """Run ``fn(*args, **kwargs)`` in ``executor``.

    Cancellation: the awaiting task is cancelled at once; the call itself runs to completion in
    its thread (Python cannot stop a thread) and its result is discarded.
    """
    loop = asyncio.get_running_loop()
    ctx = contextvars.copy_context()
    call = functools.partial(ctx.run, fn, *args, **kwargs)
    return await loop.run_in_executor(executor, call)


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
