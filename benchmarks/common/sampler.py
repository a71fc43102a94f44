"""Sampling during a run: a thread that takes a sample every so often while in a ``with`` block
(:class:`Periodic`), and the CPU time and memory of processes (:class:`Sampler`;
concurrency.py, soak.py)."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Self

__all__ = ["Periodic", "Sampler"]


class Periodic:
    """Calls :meth:`sample` every ``period`` seconds in a daemon thread from entering a ``with``
    block until leaving it: first ``period`` after entering, or at once with ``at_start``.
    Leaving stops the thread (no sample after that) and waits for a sample under way."""

    def __init__(self, period: float, *, at_start: bool = False) -> None:
        self.period = period
        self._at_start = at_start
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def sample(self) -> None:
        """One sample, in the thread; a subclass keeps what it reads."""
        raise NotImplementedError

    def _run(self) -> None:
        if self._at_start:
            self.sample()
        while not self._stop.wait(self.period):
            self.sample()

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


class Sampler(Periodic):
    """The processes ``pids`` (a server, and a llama-server beside it): their summed RSS sampled
    every ``period`` seconds and their summed PSS every ``pss_period`` seconds, in a thread while in
    the ``with`` block (the peaks in ``peak_rss`` / ``peak_pss``, bytes), and their CPU time read on
    demand.

    PSS is read less often because reading it is not free: ``smaps_rollup`` walks every page
    table of the process, about 40 ms of kernel time for a 1.6 GB server, holding the server's
    mmap lock meanwhile.  At 4 reads a second that was 0.16 cores (py-spy of concurrency.py
    at 12 sessions): most of the benchmark's own CPU, on the two cores the server was measured on.
    RSS comes from ``statm``, a constant-time read."""

    def __init__(self, pids: list[int], period: float = 0.25, pss_period: float = 5.0) -> None:
        super().__init__(period)
        self.peak_rss = 0
        self.peak_pss = 0
        self.pids = pids
        self._pss_every = max(1, round(pss_period / period))
        self._samples = 0

    @staticmethod
    def rss(pid: int | str) -> int:
        """RSS of a process in bytes, from ``/proc/PID/statm``; 0 when it cannot be read."""
        try:
            return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, IndexError, ValueError):
            return 0

    @staticmethod
    def pss(pid: int | str) -> int:
        """PSS of a process in bytes, from ``/proc/PID/smaps_rollup``; 0 when it cannot be read."""
        try:
            with open(f"/proc/{pid}/smaps_rollup") as fh:
                for line in fh:
                    if line.startswith("Pss:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            pass
        return 0

    @staticmethod
    def cpu_s(pid: int | str) -> float:
        """User + system CPU seconds of a process so far; 0.0 when it cannot be read."""
        return Sampler._stat_cpu_s(Path(f"/proc/{pid}/stat")) or 0.0

    @staticmethod
    def _stat_cpu_s(stat: Path) -> float | None:
        """User + system CPU seconds from a ``/proc/…/stat`` file; None when it cannot be read
        (a process or thread that has ended)."""
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError, ValueError):
            return None

    def sample(self) -> None:
        """The watched processes' summed RSS (and, every ``pss_period``, PSS), into the peaks."""
        self.peak_rss = max(self.peak_rss, sum(self.rss(pid) for pid in self.pids))
        if self._samples % self._pss_every == 0:
            self.peak_pss = max(self.peak_pss, sum(self.pss(pid) for pid in self.pids))
        self._samples += 1

    def total_cpu_s(self) -> float:
        """CPU seconds so far of all the watched processes."""
        return sum(self.cpu_s(pid) for pid in self.pids)

    def threads_cpu_s(self) -> dict[str, float]:
        """CPU seconds so far of each thread name in the watched processes (``stt``, ``tts``,
        ``turn``, ``vad``: the model executors; llama.cpp's and onnxruntime's worker threads
        carry the name of the thread that started them, so the pools a model makes when it is
        loaded, in the main thread, are ``python``).  The main thread itself, which runs the
        event loop, is ``event-loop``."""
        out: dict[str, float] = {}
        for pid in self.pids:
            for task in Path(f"/proc/{pid}/task").glob("*"):
                try:
                    name = "event-loop" if task.name == str(pid) else (task / "comm").read_text().strip()
                except OSError:
                    continue  # a thread that ended between the listing and the read
                cpu = self._stat_cpu_s(task / "stat")
                if cpu is not None:
                    out[name] = out.get(name, 0.0) + cpu
        return out
