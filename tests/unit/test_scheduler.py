"""PriorityExecutor: one thread, lower priority first, FIFO within a priority, cancellable queue."""

from __future__ import annotations

import _thread
import contextlib
import threading
from concurrent.futures import Future
from pathlib import Path

import pytest

from voiceagent.pipeline.scheduler import PriorityExecutor, name_os_thread, os_thread_named, submit_at

from .fakes import deadline, executor


def occupy(ex: PriorityExecutor) -> tuple[threading.Event, Future[bool]]:
    """Keep the worker busy until the returned gate is set (returns once the call is running)."""
    started, gate = threading.Event(), threading.Event()

    def hold() -> bool:
        started.set()
        return gate.wait(deadline())

    fut = ex.submit(hold)
    assert started.wait(deadline())
    return gate, fut


def test_queued_calls_run_by_priority_then_in_submission_order() -> None:
    ex = PriorityExecutor("prio")
    order: list[str] = []
    try:
        gate, blocker = occupy(ex)
        futures = [
            ex.submit_at(5, order.append, "late-a"),
            ex.submit_at(0, order.append, "urgent-a"),
            ex.submit_at(5, order.append, "late-b"),
            ex.submit_at(-1, order.append, "close"),
            ex.submit_at(0, order.append, "urgent-b"),
        ]
        assert ex.depth == 5
        gate.set()
        blocker.result(deadline())
        for fut in futures:
            fut.result(deadline())
    finally:
        ex.shutdown()
    assert order == ["close", "urgent-a", "urgent-b", "late-a", "late-b"]
    assert ex.calls == 6


def test_every_call_runs_in_the_one_named_thread_and_exceptions_reach_the_caller() -> None:
    ex = PriorityExecutor("one-thread")
    try:
        names = {ex.submit_at(i % 3, lambda: threading.current_thread().name).result(deadline()) for i in range(20)}
        assert names == {"one-thread"}
        with pytest.raises(ZeroDivisionError):
            ex.submit(lambda: 1 / 0).result(deadline())
    finally:
        ex.shutdown()


def test_a_cancelled_queued_call_never_runs() -> None:
    ex = PriorityExecutor("cancel")
    ran: list[int] = []
    try:
        gate, blocker = occupy(ex)
        doomed = ex.submit_at(0, ran.append, 1)
        kept = ex.submit_at(1, ran.append, 2)
        assert doomed.cancel()
        gate.set()
        blocker.result(deadline())
        kept.result(deadline())
    finally:
        ex.shutdown()
    assert ran == [2]


def test_shutdown_refuses_new_work_and_can_cancel_the_queue() -> None:
    ex = PriorityExecutor("shut")
    gate, blocker = occupy(ex)
    queued = ex.submit(lambda: None)
    ex.shutdown(wait=False, cancel_futures=True)
    assert queued.cancelled()
    gate.set()
    assert blocker.result(deadline()) is True
    with pytest.raises(RuntimeError):
        ex.submit(lambda: None)


def test_submit_at_falls_back_to_plain_submit_on_other_executors() -> None:
    ex = executor("plain")
    try:
        assert submit_at(ex, 3, lambda: 42).result(deadline()) == 42
    finally:
        ex.shutdown()


@pytest.mark.parametrize("fails", [False, True])
def test_a_finished_call_is_not_busy_when_its_waiter_hears_of_it(fails: bool) -> None:
    # The STT stage's final wakes the turn stage, which asks ``busy`` at once before a rejoin
    # decode: the call it has just seen finish must not count as still running.  Done callbacks
    # run inside set_result/set_exception, so this sees the state a woken waiter sees.
    ex = PriorityExecutor("idle-on-done")
    gate, held = occupy(ex)
    seen: list[tuple[bool, int]] = []
    done = threading.Event()

    def work() -> int:
        if fails:
            raise ValueError("model raised")
        return 1

    def on_done(_fut: Future[int]) -> None:
        seen.append((ex.busy, ex.depth))
        done.set()

    first = ex.submit(work)
    first.add_done_callback(on_done)
    second = ex.submit(work)
    second.add_done_callback(on_done)
    gate.set()
    assert held.result(deadline()) is True
    assert done.wait(deadline())
    if fails:
        with pytest.raises(ValueError, match="model raised"):
            first.result(deadline())
    else:
        assert first.result(deadline()) == 1
    with pytest.raises(ValueError) if fails else contextlib.nullcontext():
        second.result(deadline())
    # When the first call's waiter hears, the second is still queued (busy); when the second's
    # does, nothing is left.
    assert seen == [(True, 1), (False, 0)]
    ex.shutdown()


def _os_name() -> str:
    return Path(f"/proc/self/task/{threading.get_native_id()}/comm").read_text().strip()


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux's /proc")
def test_the_worker_thread_carries_the_executors_name_in_the_operating_system() -> None:
    ex = PriorityExecutor("stt-worker-name-long")
    try:
        assert ex.submit(_os_name).result(deadline()) == "stt-worker-name"  # the kernel keeps 15 bytes
    finally:
        ex.shutdown()


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux's /proc")
def test_a_thread_named_for_a_block_gets_its_old_name_back_and_its_children_keep_the_new_one() -> None:
    seen: dict[str, str] = {}

    def body() -> None:
        name_os_thread("loader")
        with os_thread_named("tts"):
            seen["inside"] = _os_name()
            # A bare thread, as a library starts its workers (Python 3.14's Thread names its own).
            done = threading.Event()
            _thread.start_new_thread(lambda: (seen.setdefault("child", _os_name()), done.set()), ())
            assert done.wait(deadline())
        seen["after"] = _os_name()

    t = threading.Thread(target=body)
    t.start()
    t.join()
    assert seen == {"inside": "tts", "child": "tts", "after": "loader"}
