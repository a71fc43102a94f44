"""A real MCP server for tests: the ``mcp`` package's ``MCPServer`` over Streamable HTTP on
loopback, in its own process (``python -m tests.mcp_server``), with a few tools:

* ``get_weather(city)``: a fixed, recognisable sentence (21 degrees and sunny).
* ``get_secret()``: a tool a test leaves out with ``allowed_tools``.
* ``slow_lookup(query)``: answers after a minute (a timeout, or a call to cancel).
* ``broken_tool()``: raises (the tool's error reaches the client as ``is_error``).

The process prints its port once it listens; :class:`McpTestServer` starts and stops it.  It
also counts the calls that reached each tool (``GET /calls``), so a test can tell that a call it
cancelled really was made."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import IO, Any

WEATHER = "It is 21 degrees and sunny in {city}."
ROOT = Path(__file__).resolve().parent.parent


def build_app() -> Any:
    from mcp.server.mcpserver import MCPServer
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    calls: Counter[str] = Counter()
    server = MCPServer("weather-test")

    @server.tool()
    def get_weather(city: str) -> str:
        """Get the current weather in a city."""
        calls["get_weather"] += 1
        return WEATHER.format(city=city)

    @server.tool()
    def get_secret() -> str:
        """Get the secret code."""
        calls["get_secret"] += 1
        return "the secret is 42"

    @server.tool()
    async def slow_lookup(query: str) -> str:
        """Look something up in the archive."""
        calls["slow_lookup"] += 1
        await asyncio.sleep(60)
        return f"found {query}"

    @server.tool()
    def broken_tool() -> str:
        """Read the weather station."""
        calls["broken_tool"] += 1
        raise RuntimeError("the weather station is offline")

    async def count(request: Request) -> JSONResponse:
        return JSONResponse(dict(calls))

    app = server.streamable_http_app()
    app.router.routes.append(Route("/calls", count))
    return app


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
        return self

    def calls(self) -> dict[str, int]:
        import urllib.request

        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/calls", timeout=5) as r:
            return dict(json.loads(r.read()))

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc is not None and self.proc.stdout is not None:
            self.proc.stdout.close()


def unused_url() -> str:
    """An MCP URL on loopback where nothing listens (a server that is down)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/mcp"


if __name__ == "__main__":
    asyncio.run(_serve())
