"""Health checks and scrapes do not fill the server's log (``voiceagent/transports/probe_log.py``).

A real ``websockets`` server with the server's wire logger: plain HTTP answers under 400 leave no
INFO line; refusals and WebSocket connections keep theirs; at DEBUG every line is back.
"""

from __future__ import annotations

import asyncio
import http
import logging
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from websockets.asyncio.client import connect
from websockets.asyncio.server import ServerConnection, serve
from websockets.http11 import Request, Response

from voiceagent.transports.probe_log import WIRE_LOGGER, wire_logger


def _route(conn: ServerConnection, request: Request) -> Response | None:
    if request.path == "/readyz":
        return conn.respond(http.HTTPStatus.OK, "ready\n")
    if request.path == "/full":
        return conn.respond(http.HTTPStatus.SERVICE_UNAVAILABLE, "full\n")
    return None


async def _echo(ws: ServerConnection) -> None:
    async for message in ws:
        await ws.send(message)


def _get(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


async def _exchanges(paths: list[str], *, websocket: bool) -> list[int]:
    async with serve(_echo, "127.0.0.1", 0, process_request=_route, logger=wire_logger()) as server:
        port = server.sockets[0].getsockname()[1]
        codes = [await asyncio.to_thread(_get, f"http://127.0.0.1:{port}{p}") for p in paths]
        if websocket:
            async with connect(f"ws://127.0.0.1:{port}/") as ws:
                await ws.send("hi")
                assert await ws.recv() == "hi"
    return codes


def _lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    # The server's own lines (listening, closing, closed) are not about a connection.
    return [r.getMessage() for r in caplog.records if r.name == WIRE_LOGGER and not r.getMessage().startswith("server ")]


@pytest.fixture
def wire_level() -> Iterator[None]:
    logger = logging.getLogger(WIRE_LOGGER)
    level = logger.level
    yield
    logger.setLevel(level)


def test_successful_probes_leave_no_info_line(caplog: pytest.LogCaptureFixture, wire_level: None) -> None:
    caplog.set_level(logging.INFO)
    logging.getLogger(WIRE_LOGGER).setLevel(logging.INFO)
    assert asyncio.run(_exchanges(["/readyz", "/readyz"], websocket=False)) == [200, 200]
    assert _lines(caplog) == []


def test_refusals_and_websocket_connections_are_still_logged(caplog: pytest.LogCaptureFixture, wire_level: None) -> None:
    caplog.set_level(logging.INFO)
    logging.getLogger(WIRE_LOGGER).setLevel(logging.INFO)
    assert asyncio.run(_exchanges(["/full"], websocket=True)) == [503]
    lines = _lines(caplog)
    assert "HTTP response sent (503 Service Unavailable)" in lines
    assert lines.count("connection closed") == 2  # the refused request's and the WebSocket's
    assert "connection open" in lines


def test_at_debug_every_probe_is_logged(caplog: pytest.LogCaptureFixture, wire_level: None) -> None:
    caplog.set_level(logging.DEBUG, logger=WIRE_LOGGER)
    assert asyncio.run(_exchanges(["/readyz"], websocket=False)) == [200]
    lines = _lines(caplog)
    assert "HTTP response sent (200 OK)" in lines and "connection closed" in lines
