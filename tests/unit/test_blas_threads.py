"""numpy's OpenBLAS runs on the calling thread in a voiceagent process (``voiceagent/__init__.py``).

Its worker threads spun after every matrix product and cost 0.27 CPU-s per answered turn at 8
conversations on 2 cores. Each case runs a fresh interpreter: OpenBLAS reads its setting once, as
numpy loads it.
"""

from __future__ import annotations

import os
import subprocess
import sys

PROBE = (
    "import os, sys\n"
    "{first}\n"
    "import numpy\n"
    "numpy.ones((64, 64)) @ numpy.ones((64, 64))\n"
    "print(len(os.listdir('/proc/self/task')), os.environ.get('OPENBLAS_NUM_THREADS', '-'))\n"
)


def _cores() -> int:
    """The cores this process may run on (what OpenBLAS sizes its pool by)."""
    return len(os.sched_getaffinity(0))


def _probe(first: str, **env: str) -> tuple[int, str]:
    clean = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"} | env
    out = subprocess.run([sys.executable, "-c", PROBE.format(first=first)], env=clean, capture_output=True, text=True, check=True)
    threads, setting = out.stdout.split()
    return int(threads), setting


def test_importing_voiceagent_first_leaves_numpy_with_no_blas_worker_and_the_environment_as_it_was() -> None:
    # The one thread is the interpreter's own; the environment is untouched for child processes.
    assert _probe("import voiceagent") == (1, "-")


def test_without_voiceagent_numpy_starts_its_workers_on_this_machine() -> None:
    # What the setting prevents: OpenBLAS starts one thread per core besides the caller.
    threads, _ = _probe("")
    assert (threads > 1) == (_cores() > 1)


def test_an_operators_own_setting_wins() -> None:
    threads, setting = _probe("import voiceagent", OPENBLAS_NUM_THREADS="2")
    assert setting == "2"
    assert threads == min(2, _cores())
