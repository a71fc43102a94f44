"""Whether a measurement of this machine's speed was taken while other work held its cores.

Start-up times one turn's work stage by stage (:func:`voiceagent.backends.registry.measure_turn_cost`),
and admission, the burst capacity and ``profile = "auto"`` all build on that figure.  Timed beside
another busy process (a second replica loading its models, a build), the wall time is mostly
waiting for a core: two replicas started together on two cores each measured about 20 times their
usual decode step, and that start-up estimate then refused callers on an idle machine.

The kernel counts, for every thread, the time it was runnable but waiting for a CPU (the run-queue
delay in ``/proc/self/task/<tid>/schedstat``).  Over a measurement, that wait as a share of the
threads' run + wait time is :attr:`ContentionWatch.share`: near 0 when the process had the cores
it asked for, towards 1 when others held them.  Threads that sleep or block (an idle executor)
add to neither, so the share speaks only of work that wanted a core.

:func:`startup_lock` lets the processes that share a cache directory (replicas of one fleet on
one machine) load their models together but warm up and measure one at a time, with nobody
loading beside them, so two start-ups do not time each other.

Linux only; elsewhere the share is 0.0 (unknown, taken as quiet) and the lock is a plain file lock
where ``fcntl`` exists.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType

__all__ = ["BUSY_SHARE", "ContentionWatch", "startup_lock", "thread_times", "waited_share"]

log = logging.getLogger(__name__)

BUSY_SHARE = 0.25
"""A measurement whose threads waited this share of their time for a core was taken on a busy
machine: its wall times are not this machine's speed.  One process alone on an idle 2-core
machine measures under 0.05 (docs/decisions/startup-measurement.md)."""

_TASKS = Path("/proc/self/task")


def thread_times(tasks: Path = _TASKS) -> dict[int, tuple[int, int]]:
    """Each live thread of this process: (ns run on a CPU, ns runnable but waiting for one).
    Empty where the kernel does not say (not Linux, no schedstat)."""
    times: dict[int, tuple[int, int]] = {}
    try:
        entries = list(os.scandir(tasks))
    except OSError:
        return times
    for entry in entries:
        try:
            with open(os.path.join(entry.path, "schedstat"), encoding="ascii") as f:
                run, wait, _ = f.read().split()
            times[int(entry.name)] = (int(run), int(wait))
        except (OSError, ValueError):
            continue  # the thread ended between the listing and the read
    return times


def waited_share(before: dict[int, tuple[int, int]], after: dict[int, tuple[int, int]]) -> float:
    """The run-queue wait between two :func:`thread_times` readings as a share of run + wait
    (threads that started in between count from zero; threads that ended are lost, a small
    undercount).  0.0 when nothing ran."""
    run = wait = 0
    for tid, (r1, w1) in after.items():
        r0, w0 = before.get(tid, (0, 0))
        run += max(0, r1 - r0)
        wait += max(0, w1 - w0)
    return wait / (run + wait) if run + wait else 0.0


class ContentionWatch:
    """``with ContentionWatch() as watch: work()``, then :attr:`share` is how much of the work's
    thread time was spent waiting for a core (see the module docstring).  ``read`` is the
    readings' source (a test seam)."""

    def __init__(self, read: Callable[[], dict[int, tuple[int, int]]] = thread_times) -> None:
        self._read = read
        self._before: dict[int, tuple[int, int]] = {}
        self.share = 0.0

    def __enter__(self) -> ContentionWatch:
        self._before = self._read()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.share = waited_share(self._before, self._read())


@contextlib.contextmanager
def startup_lock(directory: Path, *, shared: bool, timeout_s: float = 180.0, poll_s: float = 0.1) -> Iterator[bool]:
    """Hold ``<directory>/startup.lock`` (an advisory file lock), ``shared`` while loading models
    and exclusive while warming them up and timing them, so that of the processes sharing
    ``directory`` (a fleet's replicas on one machine) many load at once but one measures at a
    time, with nobody loading beside it.  Blocks (call it from a worker thread) up to
    ``timeout_s``; yields True when the lock is held, False when it could not be had (no
    ``fcntl``, a directory that cannot be written, or the time ran out): the work goes on
    regardless, and the measurement's contention share says whether it was disturbed.
    Released on exit, also when the process dies (the kernel drops the lock with the file).

    Not re-entrant: a process holding it must leave it before asking again (two holds of one
    process on two descriptors are two holders, and an exclusive one waits for the other)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield False
        return
    try:
        directory.mkdir(parents=True, exist_ok=True)
        handle = open(directory / "startup.lock", "a+b")  # noqa: SIM115 - held across the yield
    except OSError as exc:
        log.info("starting without the start-up lock (%s)", exc)
        yield False
        return
    mode = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
    with handle:
        deadline = time.monotonic() + timeout_s
        held = False
        while True:
            try:
                fcntl.flock(handle.fileno(), mode | fcntl.LOCK_NB)
                held = True
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    log.warning("other start-ups held %s for %.0f s: going on beside them", directory / "startup.lock", timeout_s)
                    break
                time.sleep(poll_s)  # a lock held by another process: nothing to wait on but time
        try:
            yield held
        finally:
            if held:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
