"""The fuzzed server: a ``voiceagent serve`` child process, and what the fuzzer asks of any server
(``/metrics`` samples, ``/healthz``)."""

from __future__ import annotations

import re
import socket
import time
import urllib.request
from urllib.parse import urlsplit

from benchmarks.common.serve import ServeProcess


class FuzzedServer(ServeProcess):
    """``voiceagent serve`` on a free loopback port, its whole log kept for the report."""

    def __init__(self, config: str | None, overrides: dict[str, str]) -> None:
        super().__init__(overrides, ("--host", "127.0.0.1", *(("--config", config) if config else ())), wait_ready=False)

    @property
    def base(self) -> str:
        parts = urlsplit(self.url)
        return f"ws://{parts.netloc}"

    def problems(self) -> list[str]:
        """Log lines that show an unhandled exception."""
        pattern = re.compile(r"Traceback|connection handler failed|Task exception was never retrieved|Exception in callback|ERROR")
        return [line.rstrip()[:300] for line in self.lines() if pattern.search(line)]


def metric(base: str, name: str, timeout: float = 10.0) -> float | None:
    """One sample of the server's ``/metrics`` (``name`` with its labels as exposed); None when
    the server does not answer."""
    parts = urlsplit(base)
    try:
        with urllib.request.urlopen(f"http://{parts.hostname}:{parts.port}/metrics", timeout=timeout) as resp:
            text = resp.read().decode()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def sessions_left(base: str, timeout: float) -> tuple[float | None, float]:
    """``voiceagent_sessions_active`` once it is 0, or when ``timeout`` has passed; and the wait."""
    t0 = time.monotonic()
    while True:
        value = metric(base, "voiceagent_sessions_active")
        if value is None or value == 0 or time.monotonic() - t0 > timeout:
            return value, round(time.monotonic() - t0, 1)
        time.sleep(0.5)  # polling the server's own count, with a deadline


def healthz(base: str, timeout: float = 10.0) -> bool:
    parts = urlsplit(base)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 80), timeout=timeout) as s:
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            return s.recv(64).startswith(b"HTTP/1.1 200")
    except OSError:
        return False
