"""Running blocking model code off the event loop.

Every model call, **and every step of a generator a model returns**, runs in the executor that
its backend owns.  Backends use single-thread executors, so calls on one model never overlap and
work queued on it runs in order.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import AsyncGenerator, Callable, Iterator
from concurrent.futures import Executor
from typing import ParamSpec, TypeVar

__all__ = ["iterate_in", "run_in"]

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


def _step(it: Iterator[T]) -> T | object:
    return next(it, _DONE)


async def iterate_in(executor: Executor, make: Callable[[], Iterator[T]]) -> AsyncGenerator[T, None]:
    """Create the iterator with ``make()`` and pull each item from it inside ``executor``.

    Cancellation (or ``aclose``) stops after the step in flight; the generator is then closed in
    the same executor, after that step, so its own clean-up (``finally`` blocks) runs too.
    """
    loop = asyncio.get_running_loop()
    it = await loop.run_in_executor(executor, make)
    finished = False
    try:
        while True:
            item = await loop.run_in_executor(executor, _step, it)
            if item is _DONE:
                finished = True
                return
            yield item  # type: ignore[misc]
    finally:
        if not finished:
            close = getattr(it, "close", None)
            if close is not None:
                # Single-thread executor: this runs after the step that may still be running.
                executor.submit(close)
