"""``voiceagent serve`` in a child process, for the scripts that measure a real server
(concurrency.py, cache.py, long_prompt.py, eval_quality.py, soak.py,
fuzz/server.py).

The server takes a free port (``--port 0``) and prints ``voiceagent ready: URL``; its log goes to
stderr, which a thread reads throughout (so the child never blocks on a full pipe), keeping the
last ``log_lines`` lines and the start-up report it logs as ``{"event": "ready", ...}``.
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

__all__ = ["ServeFailed", "ServeProcess"]

ROOT = Path(__file__).resolve().parents[2]


class ServeFailed(SystemExit):
    """The server did not start.  A SystemExit: a script ends with this message unless it catches
    it to go on without that server (eval_quality.py records it and moves to the next profile)."""


class ServeProcess:
    """``voiceagent serve --port 0 ARGS --set K=V ...`` until :meth:`stop`: ``url``, ``ready``
    (the start-up report, {} when none was logged) and ``log`` (stderr lines)."""

    def __init__(
        self,
        overrides: dict[str, str],
        args: tuple[str, ...] = (),
        *,
        log_lines: int | None = None,
        wait_ready: bool = True,
        tree: Path = ROOT,
    ) -> None:
        """``log_lines``: how many of the last log lines to keep (None: all).  ``wait_ready``: wait
        (at most 10 s) for the ready report, which is logged just before the URL is printed.
        ``tree``: the checkout whose ``voiceagent`` package runs (another one: a before/after
        comparison in one run, with this environment's packages)."""
        cmd = [sys.executable, "-m", "voiceagent.cli", "serve", "--port", "0", *args]
        for k, v in overrides.items():
            cmd += ["--set", f"{k}={v}"]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tree, env=env)
        self.log: collections.deque[str] = collections.deque(maxlen=log_lines)
        """The server's output so far; a thread appends to it, so read it through :meth:`lines`."""
        self.ready: dict[str, Any] = {}
        self.url = ""
        assert self.proc.stdout is not None and self.proc.stderr is not None
        self._reader = threading.Thread(target=self._read_log, daemon=True)
        self._reader.start()
        for line in self.proc.stdout:
            if line.startswith("voiceagent ready: "):
                self.url = line.split()[2]
                break
        if not self.url:
            code = self.proc.wait()
            self._reader.join(5)
            raise ServeFailed(f"voiceagent {' '.join(cmd[3:])} did not start (exit {code}):\n{''.join(self.lines()[-30:])}")
        threading.Thread(target=self.proc.stdout.read, daemon=True).start()
        deadline = time.monotonic() + 10
        while wait_ready and not self.ready and time.monotonic() < deadline:
            time.sleep(0.05)  # the ready log line is written just before the stdout line

    def _read_log(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.log.append(line)
            if '"event": "ready"' in line:
                self.ready = json.loads(line[line.index("{") :])

    def lines(self) -> list[str]:
        """A snapshot of :attr:`log`: ``deque.copy`` runs without letting the reader thread in,
        where iterating the deque while the server writes raises "deque mutated during iteration"."""
        return list(self.log.copy())

    def alive(self) -> bool:
        """Whether the server process is still running."""
        return self.proc.poll() is None

    def stop(self, timeout_s: float = 60.0) -> int | None:
        """SIGTERM (the server drains), then SIGKILL after ``timeout_s``; returns the exit code."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(5)
        return self.proc.returncode
