"""Giving freed heap memory back to the operating system (glibc's ``malloc_trim``).

Why: a model run that allocates large, variably sized buffers (Piper synthesizing a long clause,
from several threads, each with its own glibc arena) leaves its freed blocks in the heap, where
they count in the process's RSS until something reuses them: over a conversation the RSS wandered
up and down by 100 MB and more (benchmarks/tts_memory.py).  ``malloc_trim`` returns the free
pages, but it walks the heap (2–30 ms) and the next run faults the pages back in (a synthesis
right after a trim took about 30 % longer), so it runs only when the heap holds more than
``slack`` bytes free, which ``mallinfo2`` tells in about 0.3 ms, and at most once per
``interval_s`` seconds.

Where the C library is not glibc (musl, macOS), nothing is done.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import threading
import time
from collections.abc import Callable

__all__ = ["HeapTrimmer", "free_bytes"]


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")
    ]


def _libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallinfo2.restype = _MallInfo2
        libc.malloc_trim.argtypes = [ctypes.c_size_t]
        libc.malloc_trim.restype = ctypes.c_int
    except (OSError, AttributeError):  # not glibc, or a glibc older than 2.33
        return None
    return libc


_LIBC = _libc()


def free_bytes() -> int | None:
    """Bytes the heap holds free, over every arena; None where that cannot be known."""
    if _LIBC is None:
        return None
    return int(_LIBC.mallinfo2().fordblks)


class HeapTrimmer:
    """Trims the process's heap when it holds much free memory, not too often (module docstring).
    Thread-safe; :meth:`maybe_trim` blocks for the trim, so call it from a worker thread."""

    def __init__(self, slack: int = 64 * 2**20, interval_s: float = 5.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.slack = slack
        self.interval_s = interval_s
        self._clock = clock
        self._last = -interval_s
        self._lock = threading.Lock()
        self.trims = 0

    def maybe_trim(self) -> bool:
        """Trim if more than ``slack`` bytes are free and the last trim is ``interval_s`` old;
        True if it trimmed."""
        now = self._clock()
        if _LIBC is None or now - self._last < self.interval_s or not self._lock.acquire(blocking=False):
            return False
        try:
            free = free_bytes()
            if free is None or free <= self.slack:
                return False
            _LIBC.malloc_trim(0)
            self._last = self._clock()
            self.trims += 1
            return True
        finally:
            self._lock.release()
