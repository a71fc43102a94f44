"""A single-thread executor that runs queued calls by priority: the scheduler of a shared model.

Every session's calls on one model meet in its executor.  With a plain FIFO, one session's
background work (a partial decode, the tenth token of a long reply) can sit in front of another
session's critical-path call (a final decode, a first token).  Here each call carries a
priority: lower runs first, equal priorities run in submission order.  One thread means calls on
the model never overlap, which is what makes sharing its state safe.

Cancelling a queued call's future means it is skipped when its turn comes (it never runs); a call
already running finishes (Python cannot stop a thread) and its result is dropped by whoever
cancelled.
"""

from __future__ import annotations

import contextlib
import ctypes
import heapq
import itertools
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future
from typing import Any, TypeVar

__all__ = ["PriorityExecutor", "name_os_thread", "os_thread_named", "submit_at"]

T = TypeVar("T")

_Item = tuple[int, int, "Future[Any]", Callable[[], Any], float]
_PR_SET_NAME, _PR_GET_NAME = 15, 16


def _prctl(option: int, buf: ctypes.Array[ctypes.c_char] | bytes) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        return int(ctypes.CDLL(None).prctl(option, buf, 0, 0, 0)) == 0
    except (OSError, AttributeError, TypeError):  # no prctl in this libc: names stay Python's
        return False


def name_os_thread(name: str) -> None:
    """Give the calling thread ``name`` in the operating system too (Linux: ``prctl``, 15 bytes),
    where Python 3.11 names it only for itself.  ``top -H``, ``/proc/PID/task/*/comm`` and the
    benchmarks' CPU accounting then tell the model threads apart, and the worker threads a model
    library starts from this thread later (llama.cpp's OpenMP team) inherit the name.  Does
    nothing where the call is not available."""
    _prctl(_PR_SET_NAME, name.encode()[:15])


@contextlib.contextmanager
def os_thread_named(name: str) -> Iterator[None]:
    """The calling thread carries ``name`` in the operating system inside the block, then its
    old name again: for loading a model, whose library starts its worker threads then
    (CTranslate2's, onnxruntime's), so that those carry the model's name."""
    old = ctypes.create_string_buffer(16)
    known = _prctl(_PR_GET_NAME, old)
    name_os_thread(name)
    try:
        yield
    finally:
        if known:
            _prctl(_PR_SET_NAME, old.value)


class PriorityExecutor(Executor):
    """One worker thread (started on first use); ``submit_at(priority, fn, ...)`` orders the queue.

    ``submit`` (the :class:`~concurrent.futures.Executor` API) uses priority 0.  The executor
    keeps the total time calls waited in the queue (``wait_seconds``) and the number that ran.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._heap: list[_Item] = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._shutdown = False
        self._running = False
        self.wait_seconds = 0.0
        self.calls = 0

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        return self.submit_at(0, fn, *args, **kwargs)

    def submit_at(self, priority: int, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        """Queue ``fn(*args, **kwargs)``; lower ``priority`` runs sooner."""
        fut: Future[T] = Future()
        with self._cond:
            if self._shutdown:
                raise RuntimeError(f"executor {self.name} is shut down")
            heapq.heappush(self._heap, (priority, next(self._seq), fut, lambda: fn(*args, **kwargs), time.perf_counter()))
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name=self.name, daemon=True)
                self._thread.start()
            self._cond.notify()
        return fut

    @property
    def depth(self) -> int:
        """Calls waiting (not counting the one running)."""
        with self._cond:
            return len(self._heap)

    @property
    def busy(self) -> bool:
        """A call is running or waiting."""
        with self._cond:
            return self._running or bool(self._heap)

    def _work(self) -> None:
        name_os_thread(self.name)
        while True:
            with self._cond:
                while not self._heap and not self._shutdown:
                    self._cond.wait()
                if not self._heap:
                    return
                _prio, _seq, fut, call, queued_at = heapq.heappop(self._heap)
                self._running = True
            if not fut.set_running_or_notify_cancel():
                with self._cond:
                    self._running = False
                continue
            self.wait_seconds += time.perf_counter() - queued_at
            self.calls += 1
            failure: BaseException | None = None
            try:
                result = call()
            except BaseException as exc:  # handed to the waiter, as ThreadPoolExecutor does
                failure = exc
            # Not running any more *before* the waiter hears of it: a waiter woken by the result
            # asks ``busy`` at once (the STT stage's final, then the turn's rejoin), and a call it
            # has already seen finish must not count as one still running.
            with self._cond:
                self._running = False
            if failure is not None:
                fut.set_exception(failure)
            else:
                fut.set_result(result)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._cond:
            self._shutdown = True
            if cancel_futures:
                for _p, _s, fut, _c, _t in self._heap:
                    fut.cancel()
                self._heap.clear()
            self._cond.notify_all()
            thread = self._thread
        if wait and thread is not None and thread is not threading.current_thread():
            thread.join()


def submit_at(executor: Executor, priority: int, fn: Callable[..., T], /, *args: Any) -> Future[T]:
    """``executor.submit`` that honours ``priority`` where the executor is a :class:`PriorityExecutor`."""
    if isinstance(executor, PriorityExecutor):
        return executor.submit_at(priority, fn, *args)
    return executor.submit(fn, *args)
