"""voiceagent.contention: whether a start-up's measurement was taken on a busy machine, and the
lock that keeps a fleet's start-ups from timing each other (issue #71)."""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.synchronize
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from voiceagent.contention import BUSY_SHARE, ContentionWatch, startup_lock, thread_times, waited_share


def test_the_share_is_the_run_queue_wait_over_run_and_wait_of_the_threads_that_ran() -> None:
    before = {1: (100, 10), 2: (50, 0), 3: (10, 10)}
    after = {1: (400, 210), 2: (50, 0), 4: (100, 100)}  # 3 ended (lost), 4 began (from zero)
    assert waited_share(before, after) == pytest.approx((200 + 100) / (300 + 200 + 100 + 100))
    assert waited_share(after, after) == 0.0


def test_the_watch_reads_before_and_after_its_block() -> None:
    readings = iter([{7: (0, 0)}, {7: (3_000, 1_000)}])
    with ContentionWatch(read=lambda: next(readings)) as watch:
        pass
    assert watch.share == pytest.approx(0.25) and watch.share >= BUSY_SHARE


@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="Linux only: no per-thread schedstat elsewhere")
def test_this_process_threads_are_read_from_the_kernel() -> None:
    seen = thread_times()
    assert threading.get_native_id() in seen
    run, wait = seen[threading.get_native_id()]
    assert run > 0 and wait >= 0


def _hold(directory: str, shared: bool, held: multiprocessing.synchronize.Event, release: multiprocessing.synchronize.Event) -> None:
    with startup_lock(Path(directory), shared=shared) as got:
        assert got
        held.set()
        release.wait(30)


@contextlib.contextmanager
def _held_elsewhere(directory: Path, *, shared: bool) -> Iterator[None]:
    """Another process holds the start-up lock of ``directory`` for the block."""
    held, release = multiprocessing.Event(), multiprocessing.Event()
    other = multiprocessing.Process(target=_hold, args=(str(directory), shared, held, release))
    other.start()
    try:
        assert held.wait(30)
        yield
        release.set()
        other.join(30)
        assert other.exitcode == 0
    finally:
        release.set()
        other.join(5)
        if other.is_alive():
            other.kill()


def test_one_process_measures_at_a_time_and_none_while_another_loads(tmp_path: Path) -> None:
    with _held_elsewhere(tmp_path, shared=False):  # another process is measuring
        for shared in (True, False):  # neither loading nor measuring may start beside it
            with startup_lock(tmp_path, shared=shared, timeout_s=0.3, poll_s=0.05) as got:
                assert not got  # the time ran out: the work goes on, and says so
    with _held_elsewhere(tmp_path, shared=True):  # another process is loading
        with startup_lock(tmp_path, shared=True, timeout_s=0.3, poll_s=0.05) as got:
            assert got  # loading beside it is fine
        with startup_lock(tmp_path, shared=False, timeout_s=0.3, poll_s=0.05) as got:
            assert not got  # measuring is not
    with startup_lock(tmp_path, shared=False, timeout_s=5) as got:
        assert got  # everyone left


def test_an_unwritable_directory_starts_without_the_lock(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with startup_lock(blocker / "sub", shared=False) as got:
        assert not got


def test_the_lock_lives_in_the_cache_directory_unless_a_shared_one_is_set(tmp_path: Path) -> None:
    from voiceagent.config import load_config

    assert load_config(env={}, overrides={"cache_dir": str(tmp_path)}).startup_lock_path == tmp_path
    shared = load_config(env={"VOICEAGENT_SERVER__STARTUP_LOCK_DIR": "/run/voiceagent-startup"}, overrides={"cache_dir": str(tmp_path)})
    assert shared.startup_lock_path == Path("/run/voiceagent-startup")
