"""The machine a run measured: a one-line description for the report, and the CPU time the
hypervisor gave to others during the run (steal: the main cause of drift on a shared VM)."""

from __future__ import annotations

import os
import platform

__all__ = ["cpu_times", "machine", "steal_pct"]


def machine() -> str:
    """``"N cores, CPU model, Python X.Y.Z"`` (the CPU model from /proc/cpuinfo, else
    :func:`platform.processor`)."""
    cpu = ""
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next(line.split(":", 1)[1].strip() for line in fh if line.startswith("model name"))
    except (OSError, StopIteration):
        cpu = platform.processor()
    return f"{os.cpu_count()} cores, {cpu}, Python {platform.python_version()}"


def cpu_times() -> tuple[int, int]:
    """(steal, total) jiffies of all CPUs from /proc/stat; (0, 0) where there is none."""
    try:
        with open("/proc/stat") as fh:
            fields = [int(x) for x in fh.readline().split()[1:]]
    except (OSError, ValueError):
        return 0, 0
    return (fields[7] if len(fields) > 7 else 0), sum(fields)


def steal_pct(before: tuple[int, int], after: tuple[int, int]) -> float:
    """The share (%, one decimal) of all CPU time stolen between two :func:`cpu_times` readings:
    time the hypervisor gave to others while we wanted the CPU.  0.0 where there is no /proc/stat."""
    (steal0, total0), (steal1, total1) = before, after
    return round(100.0 * (steal1 - steal0) / max(1, total1 - total0), 1)
