"""HeapTrimmer: trims only past its slack, at most once per interval (a fake clock)."""

from __future__ import annotations

import sys

import pytest

from voiceagent.backends import heap

glibc = pytest.mark.skipif(heap.free_bytes() is None, reason="mallinfo2/malloc_trim are glibc's")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@glibc
def test_free_bytes_counts_what_was_freed() -> None:
    blocks = [bytearray(64 * 1024) for _ in range(200)]  # below the mmap threshold: from the heap
    del blocks[::2]  # holes between live blocks: free, but not at the top where glibc trims itself
    after = heap.free_bytes()
    assert after is not None
    assert after >= 100 * 64 * 1024  # at least the holes (other free memory may add to it)
    assert len(blocks) == 100


@glibc
def test_trims_past_its_slack_at_most_once_per_interval() -> None:
    clock = Clock()
    trimmer = heap.HeapTrimmer(slack=0, interval_s=5.0, clock=clock)
    assert trimmer.maybe_trim() is True
    clock.now += 4.9
    assert trimmer.maybe_trim() is False, "a second trim within the interval"
    clock.now += 0.2
    assert trimmer.maybe_trim() is True
    assert trimmer.trims == 2


@glibc
def test_no_trim_while_the_free_memory_is_within_the_slack() -> None:
    trimmer = heap.HeapTrimmer(slack=sys.maxsize, interval_s=0.0, clock=Clock())
    assert trimmer.maybe_trim() is False
    assert trimmer.trims == 0


def test_without_glibc_nothing_is_done(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(heap, "_LIBC", None)
    assert heap.free_bytes() is None
    trimmer = heap.HeapTrimmer(slack=0, interval_s=0.0, clock=Clock())
    assert trimmer.maybe_trim() is False
