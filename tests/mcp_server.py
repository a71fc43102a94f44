"""A real MCP server for tests: the ``mcp`` package's ``MCPServer`` over Streamable HTTP on
loopback, in its own process (``python -m tests.mcp_server``), with a few tools:

* ``get_weather(city)``: a fixed, recognisable sentence (21 degrees and sunny).
* ``get_secret()``: a tool a test leaves out with ``allowed_tools``.
* ``slow_lookup(query)``: answers after a minute (a timeout, or a call to cancel).
* ``broken_tool()``: raises (the tool's error reaches the client as ``is_error``).

The process prints its port once it listens, then a line ``call NAME`` as each call reaches a
tool; :class:`McpTestServer` starts and stops it and counts those lines, so a test can wait until
the server really has a call it is about to cancel."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import IO, Any

from tests.ports import free_port

WEATHER = "It is 21 degrees and sunny in {city}."
ROOT = Path(__file__).resolve().parent.parent


def build_app() -> Any:
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("weather-test")

    def called(name: str) -> None:
        print(f"call {name}", flush=True)

    @server.tool()
    def get_weather(city: str) -> str:
        """Get the current weather in a city."""
        called("get_weather")
        return WEATHER.format(city=city)

    @server.tool()
    def get_secret() -> str:
        """Get the secret code."""
        called("get_secret")
        return "the secret is 42"

    @server.tool()
    async def slow_lookup(query: str) -> str:
        """Look something up in the archive."""
        called("slow_lookup")
        await asyncio.sleep(60)
        return f"found {query}"

    @server.tool()
    def broken_tool() -> str:
        """Read the weather station."""
        called("broken_tool")
        raise RuntimeError("the weather station is offline")

    return server.streamable_http_app()


async def _serve() -> None:
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    print(sock.getsockname()[1], flush=True)
    server = uvicorn.Server(uvicorn.Config(build_app(), log_level="warning", lifespan="on"))
    await server.serve(sockets=[sock])


class McpTestServer:
    """The server in a child process: :meth:`start` returns once it listens; :meth:`stop` ends it."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[str] | None = None
        self.port = 0
        self._calls: Counter[str] = Counter()
        self._seen = threading.Condition()
        self._reader: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def start(self, timeout: float = 30.0) -> McpTestServer:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.mcp_server"],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
        )
        stdout: IO[str] | None = self.proc.stdout
        assert stdout is not None
        deadline = time.monotonic() + timeout
        line = stdout.readline()  # the port, printed once the socket listens
        if not line.strip().isdigit() or time.monotonic() > deadline:
            self.stop()
            raise RuntimeError(f"the MCP test server did not start (it printed {line!r})")
        self.port = int(line)
        self._reader = threading.Thread(target=self._read, args=(stdout,), daemon=True)
        self._reader.start()
        return self

    def _read(self, stdout: IO[str]) -> None:
        for line in stdout:
            if line.startswith("call "):
                with self._seen:
                    self._calls[line.split()[1]] += 1
                    self._seen.notify_all()

    def calls(self, name: str) -> int:
        """How many calls of tool ``name`` reached the server so far."""
        with self._seen:
            return self._calls[name]

    async def wait_calls(self, name: str, n: int, timeout: float = 10.0) -> None:
        """Return once ``n`` calls of ``name`` have reached the server (AssertionError after ``timeout``)."""

        def wait() -> bool:
            with self._seen:
                return self._seen.wait_for(lambda: self._calls[name] >= n, timeout)

        assert await asyncio.to_thread(wait), f"{n} calls of {name} never reached the MCP server"

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._reader is not None:
            self._reader.join(timeout=10)  # it ends at the pipe's end, with the process
        if self.proc is not None and self.proc.stdout is not None:
            self.proc.stdout.close()


def unused_url() -> str:
    """An MCP URL on loopback where nothing listens (a server that is down)."""
    return f"http://127.0.0.1:{free_port()}/mcp"  # below the ephemeral range: no client is given it meanwhile


if __name__ == "__main__":
    asyncio.run(_serve())
