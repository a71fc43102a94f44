"""Careless clients cannot hold the server: every connection's end is noticed, and SIGTERM ends
the process within ``server.drain_s`` plus a few seconds whatever the clients do (issue #31).

Real ``voiceagent serve`` processes and real sockets: a client that floods messages and reads
nothing (its receive buffer shrunk, so the server's answers back up), one that stops reading in
the middle of a spoken reply, one that stalls half-way through its HTTP handshake, and clients
that do all that and then vanish."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection, connect

from tests.integration.serve_process import until
from tests.profile import SERVE_PROFILE

pytestmark = [pytest.mark.models, pytest.mark.unpaced]

CLI = [sys.executable, "-m", "voiceagent.cli"]
GRACE_S = 5.0
"""What the issue allows beyond ``server.drain_s`` between SIGTERM and the exit."""


@contextmanager
def serving(*sets: str) -> Iterator[tuple[subprocess.Popen[str], str, list[str]]]:
    """``voiceagent serve`` on a free port: the process, its base URL and its output so far
    (read on until the process ends, by a thread)."""
    args = [*CLI, "serve", "--port", "0", "--profile", SERVE_PROFILE]
    for s in sets:
        args += ["--set", s]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("voiceagent ready: ") or "Traceback" in line:
                break
        assert lines and lines[-1].startswith("voiceagent ready: "), "".join(lines[-30:])
        base = lines[-1].split()[2].split("/v1/")[0]
        threading.Thread(target=lambda: lines.extend(proc.stdout or ()), daemon=True).start()
        yield proc, base, lines
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def metric(base: str, name: str) -> float:
    with urllib.request.urlopen(base.replace("ws://", "http://") + "/metrics", timeout=10) as resp:
        for line in resp.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.rsplit(" ", 1)[1])
    return 0.0


def small_socket(base: str) -> socket.socket:
    """A TCP connection whose receive buffer is shrunk: what the server sends backs up at once."""
    host, port = base.split("//")[1].split(":")
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((host, int(port)))
    return sock


async def flooder(base: str, messages: int = 20000) -> ClientConnection:
    """Sends ``messages`` bad events (each answered with an error) and reads nothing."""
    ws = await connect(base + "/v1/realtime", sock=small_socket(base), ping_interval=None, max_size=None)
    bad = json.dumps({"type": "no.such.event", "event_id": "e" * 40})
    for _ in range(messages):
        try:
            await asyncio.wait_for(ws.send(bad), 2)
        except TimeoutError:
            break  # the server stopped reading us: its answers are backed up
    return ws


async def mid_reply_reader(base: str) -> ClientConnection:
    """Asks for a long spoken reply, reads until it starts, then reads nothing more."""
    ws = await connect(base + "/v1/realtime", sock=small_socket(base), ping_interval=None, max_size=None)
    item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Tell me a long story about the sea."}]}
    await ws.send(json.dumps({"type": "conversation.item.create", "item": item}))
    await ws.send(json.dumps({"type": "response.create"}))
    async with asyncio.timeout(60):
        async for raw in ws:
            if json.loads(raw).get("type") == "response.output_audio.delta":
                break
    return ws


def half_handshake(base: str) -> socket.socket:
    """A TCP connection that sends half an HTTP upgrade and stalls."""
    sock = small_socket(base)
    sock.sendall(b"GET /v1/realtime HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n")
    return sock


# Alone: "within drain_s plus a few seconds" is a claim about this machine's time, and beside a
# busy parallel run the exit took 8.8 and 9.4 s (the process's own teardown shares its cores).
@pytest.mark.serial
def test_sigterm_ends_the_process_in_time_with_careless_clients_connected(run: Any) -> None:
    drain_s = 3.0
    with serving(f"server.drain_s={drain_s:g}", "server.max_sessions=8") as (proc, base, lines):

        async def main() -> tuple[float, list[Any]]:
            careless: list[Any] = [await flooder(base), await mid_reply_reader(base), half_handshake(base)]
            await until(lambda: metric(base, "voiceagent_sessions_active") == 2, 30, "both sessions open", every=0.25)
            t0 = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            await asyncio.to_thread(proc.wait, drain_s + GRACE_S + 30)
            return time.monotonic() - t0, careless

        took, careless = run(main(), 180)
        log = "".join(lines)
        assert proc.returncode == 0, log[-3000:]
        assert took <= drain_s + GRACE_S, f"exit took {took:.1f} s\n{log[-3000:]}"
        print(f"SIGTERM to exit: {took:.1f} s (drain_s {drain_s:g})")
        assert "Traceback" not in log, log[-3000:]
        for c in careless:
            if isinstance(c, socket.socket):
                c.close()


def test_sigterm_while_the_models_load_still_drains_and_exits_0() -> None:
    """A SIGTERM that comes before the server is ready (a deploy that gives up on a slow start,
    or a test that stops the server the moment it reads the ready line) is a clean stop: the
    process exits 0 after loading rather than dying of the signal's default action (-15)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [*CLI, "serve", "--port", "0", "--profile", SERVE_PROFILE], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    try:
        assert proc.stdout is not None
        lines = []
        for line in proc.stdout:  # the first model loaded: the server is mid-start
            lines.append(line)
            if "loaded vad" in line or "Traceback" in line:
                break
        assert "loaded vad" in lines[-1], "".join(lines)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=120)
        lines.append(out)
        assert proc.returncode == 0, "".join(lines)[-3000:]
        assert "stopped" in out and "Traceback" not in out, out[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_clients_that_stop_reading_and_vanish_leave_nothing_counted(run: Any) -> None:
    """Twenty clients flood, stop reading, then vanish (some with a reset, some with no word);
    once they are gone the server counts no session, and admits as many as before them."""
    with serving("server.max_sessions=4", "server.idle_timeout_s=300") as (_proc, base, lines):

        async def main() -> None:
            for wave in range(5):  # four at a time: the server's capacity here
                clients = await asyncio.gather(*(flooder(base, 3000) for _ in range(4)))
                for n, ws in enumerate(clients):
                    if (wave + n) % 2:
                        ws.transport.abort()  # a reset
                    else:
                        sock = ws.transport.get_extra_info("socket")
                        sock.shutdown(socket.SHUT_RDWR)  # a FIN, with nothing read
                        ws.transport.abort()
                gone = f"wave {wave}: sessions counted after the clients left"
                await until(lambda: metric(base, "voiceagent_sessions_active") == 0, 30, gone, every=0.25)
            # As many as before: four sessions open and talk.
            admitted = [await connect(base + "/v1/realtime") for _ in range(4)]
            for ws in admitted:
                created = json.loads(await asyncio.wait_for(ws.recv(), 10))
                assert created["type"] == "session.created"
            assert metric(base, "voiceagent_sessions_active") == 4
            for ws in admitted:
                await ws.close()

        run(main(), 240)
        assert "Traceback" not in "".join(lines)
