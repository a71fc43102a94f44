"""A ``voiceagent serve`` child process for tests that run several (replicas of a fleet): its
output read on by a thread, its ready line, and a hard stop; and :func:`until`, the wait for
another process's state."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping

from tests.conftest import SCALE

READY = "voiceagent ready: "


class ServeProcess:
    """``voiceagent serve --port PORT`` with ``sets`` (``--set KEY=VALUE`` each); started at once.
    :attr:`ready` is set at the ready line, or when the process ends without one."""

    def __init__(self, port: int = 0, sets: Mapping[str, object] | None = None) -> None:
        args = [sys.executable, "-m", "voiceagent.cli", "serve", "--port", str(port)]
        for key, value in (sets or {}).items():
            args += ["--set", f"{key}={value}"]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        self.lines: list[str] = []
        self.ready = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)
            if line.startswith(READY):
                self.ready.set()
        self.ready.set()  # ended: the waiter finds no ready line and says why

    @property
    def started(self) -> bool:
        """The ready line was printed and the process still runs."""
        return any(line.startswith(READY) for line in self.lines) and self.proc.poll() is None

    @property
    def url(self) -> str:
        """The Realtime WebSocket URL from the ready line."""
        return next(line for line in self.lines if line.startswith(READY)).split()[2]

    def output(self, last: int = 40) -> str:
        return "".join(self.lines[-last:])

    def stop(self) -> None:
        """SIGKILL (if still running) and reap."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


async def until(pred: Callable[[], bool], timeout: float, what: str, every: float = 0.1) -> float:
    """Poll ``pred()`` (blocking: a request to another process, run in a thread) every ``every``
    seconds until true; the seconds it took.  ``timeout`` is a guard, scaled by
    ``VOICEAGENT_TEST_TIMEOUT_SCALE``; past it, an AssertionError names ``what``."""
    t0 = time.monotonic()
    while not await asyncio.to_thread(pred):
        if time.monotonic() - t0 > timeout * SCALE:
            raise AssertionError(f"{what}: not within {timeout * SCALE} s")
        await asyncio.sleep(every)  # polling another process's state, with a deadline
    return time.monotonic() - t0
