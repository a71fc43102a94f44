"""A fleet run for real (issue #71, item 1): Debian's HAProxy with the shipped docker/haproxy.cfg
(hosts and ports substituted, and a runtime API socket added to read it), three ``voiceagent serve`` replicas on one shared
OpenAI-compatible LLM server (``llama_cpp.server``), and WebSocket clients going through the
proxy as a deployment's users would.  Loopback only.

One fleet, in phases, because starting it is the expensive part:

1. **full**: each replica admits two sessions (``server.max_sessions``, so the phase does not
   depend on the machine's speed); six callers through the proxy land two on each, and the
   seventh is refused with 503 and ``Retry-After``.  A place freed on one replica is where the
   next caller lands.
2. **WebRTC**: offers through the proxy spread over the replicas, and each call's hangup
   reaches the replica that holds it (docker/haproxy.cfg's stick table on the call id).
3. **spread by load**: with a call on each replica, one answers a spoken turn; its agent's weight
   falls (read from HAProxy's runtime API, the one line the test adds to the file), and the
   next two callers land on the two idle replicas.
4. **retry**: a replica full since its agent's last check refuses the upgrade, and HAProxy puts
   the caller on another without the client seeing the refusal.
5. **drain**: SIGTERM to a replica in the middle of a reply: its agent tells HAProxy ``drain``,
   new callers go elsewhere, the reply finishes, then the replica closes the call and exits 0.
6. **failover**: SIGKILL to a replica holding a call: the caller's connection closes at the
   proxy, its next connection lands on a live replica within 2 s, and a call on another replica
   goes on answering."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from tests.conftest import SCALE
from tests.integration.llm_server import LlamaCppServer
from tests.integration.rt_client import send_paced, wire_audio
from tests.integration.serve_process import ServeProcess, until
from tests.ports import free_port

# In the parallel part: admission here is by count (server.max_sessions), and what the phases
# wait for they read (each replica's /metrics, HAProxy's runtime API), so load slows it, never
# decides it (three runs beside two busy loops: 118-127 s, against 65 s alone).
pytestmark = [pytest.mark.models, pytest.mark.fleet]

ROOT = Path(__file__).resolve().parents[2]
HAPROXY_CFG = ROOT / "docker" / "haproxy.cfg"
CAP = 2
"""Sessions each replica admits."""
DRAIN_S = 90.0
"""A guard, not a measurement: beside two busy loops a five-sentence story, played at the pace
of speech, once took more than 30 s and was cut by the drain."""


class Replica(ServeProcess):
    """One ``voiceagent serve`` on its own WebSocket and agent ports, on the shared LLM server."""

    def __init__(self, name: str, llm_url: str) -> None:
        self.name = name
        self.port, self.agent_port = free_port(), free_port()
        sets = {
            "server.agent_port": self.agent_port,
            "server.max_sessions": CAP,
            "server.drain_s": DRAIN_S,
            "llm.backend": "openai",
            "llm.base_url": llm_url,
            "llm.model": "qwen",
            "llm.first_token_budget_ms": 30000,  # a cold prompt beside the other workers' models
        }
        super().__init__(self.port, sets)

    def sessions(self) -> int:
        """Its open sessions, from its own /metrics (not through the proxy)."""
        return int(self._metric("voiceagent_sessions_active", "voiceagent_sessions_active "))

    def refusals(self) -> int:
        """Handshakes it refused for being full (``server.max_sessions``), from its /metrics."""
        return int(self._metric("voiceagent_sessions_refused_total", 'voiceagent_sessions_refused_total{reason="capacity"} '))

    def _metric(self, name: str, prefix: str) -> float:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics?name[]={name}", timeout=10) as resp:
            for line in resp.read().decode().splitlines():
                if line.startswith(prefix):
                    return float(line.split()[1])
        return 0.0


def haproxy_config(port: int, replicas: list[Replica], stats: Path) -> str:
    """docker/haproxy.cfg with the hosts substituted: loopback ports instead of the compose
    service's DNS name (the template line's own options kept).  One line is added: a runtime API
    socket at ``stats``, through which the test reads the weights the proxy applied."""
    text = HAPROXY_CFG.read_text()
    text, globals_ = re.subn(r"(?m)^global\n", f"global\n    stats socket {stats} level user\n", text)
    assert globals_ == 1, "docker/haproxy.cfg has no global section"
    text, binds = re.subn(r"(?m)^(\s+)bind :8765$", rf"\1bind 127.0.0.1:{port}", text)
    text, resolvers = re.subn(r"(?m)^resolvers docker\n(?:[ \t]+\S.*\n)+", "", text)
    template = re.search(
        r"(?m)^(\s+)server-template va \d+ voiceagent:8765 (.*) agent-port 8766 (.*?) resolvers docker init-addr none$", text
    )
    assert binds == 1 and resolvers == 1 and template, "docker/haproxy.cfg changed shape: update this substitution"
    indent, before, after = template.groups()
    servers = "\n".join(f"{indent}server {r.name} 127.0.0.1:{r.port} {before} agent-port {r.agent_port} {after}" for r in replicas)
    return text[: template.start()] + servers + text[template.end() :]


@contextlib.contextmanager
def fleet() -> Iterator[tuple[int, list[Replica], Proxy]]:
    """The LLM server, three replicas and HAProxy in front; yields the proxy's port."""
    if shutil.which("haproxy") is None:
        pytest.fail("haproxy is not installed: scripts/setup.sh installs it")
    with contextlib.ExitStack() as stack:
        llm = LlamaCppServer().start()
        stack.callback(llm.stop)
        replicas = [Replica(f"va{i}", llm.base_url) for i in range(3)]
        for replica in replicas:
            stack.callback(replica.stop)
        for replica in replicas:
            assert replica.ready.wait(600 * SCALE) and replica.started, replica.output()
        port = free_port()
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        cfg = tmp / "haproxy.cfg"
        cfg.write_text(haproxy_config(port, replicas, tmp / "stats.sock"))
        proxy = Proxy(cfg, tmp / "stats.sock")
        stack.callback(proxy.stop)
        deadline = time.monotonic() + 30 * SCALE
        while not _listening(port):
            assert proxy.proc.poll() is None, proxy.output()
            assert time.monotonic() < deadline, "haproxy is not listening"
            time.sleep(0.05)  # polling another process's start, with a deadline
        try:
            yield port, replicas, proxy
        except BaseException as exc:
            # What each part thought at the failure: the proxy's server state changes (it logs
            # each DOWN, DRAIN and UP on its output), each replica's readiness and log.
            raise AssertionError(f"{exc!r}\n{report(proxy, replicas)}") from exc


class Proxy:
    """``haproxy -db -f CFG``; its output (server state changes, alerts) read on by a thread."""

    def __init__(self, cfg: Path, stats: Path) -> None:
        self.stats = stats
        self.proc = subprocess.Popen(["haproxy", "-db", "-f", str(cfg)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(f"{time.strftime('%H:%M:%S')} {line}")

    def output(self) -> str:
        return "".join(self.lines[-60:])

    def weights(self) -> dict[str, int]:
        """Each server's weight as the proxy applies it now, 0 while drained (``show servers
        state``; the agent's "NN%" and "drain" set them), by name."""
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(5)
            sock.connect(str(self.stats))
            sock.sendall(b"show servers state voiceagent\n")
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
        lines = data.decode().splitlines()
        header = next(line for line in lines if line.startswith("# be_id")).split()[1:]
        rows = [dict(zip(header, line.split(), strict=False)) for line in lines if line and line[0].isdigit() and " " in line]
        # An agent's "drain" is an administrative state (the drain flags, 0x08 forced and 0x10
        # inherited), not a weight: a drained server keeps its weight and takes no new session.
        return {row["srv_name"]: 0 if int(row["srv_admin_state"]) & 0x18 else int(row["srv_uweight"]) for row in rows}

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


def report(proxy: Proxy, replicas: list[Replica]) -> str:
    """The proxy's output and each live replica's /readyz, sessions and last log lines."""
    parts = [f"--- haproxy (at {time.strftime('%H:%M:%S')}):\n{proxy.output()}"]
    for r in replicas:
        state = "exited" if r.proc.poll() is not None else _readyz(r.port)
        parts.append(f"--- {r.name}: {state}\n{r.output(25)}")
    return "\n".join(parts)


def _readyz(port: int) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as resp:
            return f"{resp.status} {resp.read().decode().strip()}"
    except urllib.error.HTTPError as exc:
        return f"{exc.code} {exc.read().decode().strip()}"
    except OSError as exc:
        return repr(exc)


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


async def call(port: int) -> ClientConnection:
    """A session through the proxy, once it is created (a refusal raises InvalidStatus)."""
    ws = await connect(f"ws://127.0.0.1:{port}/v1/realtime", max_size=None, open_timeout=30)
    first = json.loads(await asyncio.wait_for(ws.recv(), 30))
    assert first["type"] == "session.created", first
    return ws


async def call_when_room(port: int, timeout: float) -> ClientConnection:
    """A caller who, refused with 503, comes back after a moment, as Retry-After asks."""
    deadline = time.monotonic() + timeout * SCALE
    while True:
        try:
            return await call(port)
        except InvalidStatus as exc:
            if exc.response.status_code != 503 or time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)  # a refused caller's pause before trying again


async def ask(ws: ClientConnection, text: str, on_start: Any = None) -> tuple[str, list[str]]:
    """A text turn: the response's final status and every event type seen; ``on_start()`` runs
    when the reply's first audio arrives (the middle of a reply)."""
    item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
    await ws.send(json.dumps({"type": "conversation.item.create", "item": item}))
    await ws.send(json.dumps({"type": "response.create"}))
    kinds: list[str] = []
    async with asyncio.timeout(120 * SCALE):
        async for raw in ws:
            event = json.loads(raw)
            kinds.append(event["type"])
            if event["type"] == "response.output_audio.delta" and on_start is not None:
                on_start()
                on_start = None
            if event["type"] == "response.done":
                return str(event["response"]["status"]), kinds
    raise AssertionError(f"the connection closed before response.done: {kinds}")


async def speak(ws: ClientConnection, wav: Path) -> str:
    """A spoken turn: ``wav`` sent at the pace of speech, then silence, until the reply's
    response.done; its final status.  A spoken turn, unlike a text one, has an end of speech, so
    its latency is measured and counted in the replica's load."""
    sender = asyncio.create_task(send_paced(ws, wire_audio(wav, tail_s=3.0)))
    try:
        async with asyncio.timeout(120 * SCALE):
            async for raw in ws:
                event = json.loads(raw)
                if event["type"] == "response.done":
                    return str(event["response"]["status"])
        raise AssertionError("the connection closed before response.done")
    finally:
        sender.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sender


def where(replicas: list[Replica]) -> list[int]:
    """Each replica's open sessions."""
    return [r.sessions() for r in replicas]


async def call_placed(port: int, replicas: list[Replica]) -> tuple[ClientConnection, Replica]:
    """A new call through the proxy and the replica it landed on (whose count rose)."""
    before = await asyncio.to_thread(where, replicas)
    ws = await call_when_room(port, 10)
    after = await asyncio.to_thread(where, replicas)
    risen = [r for r, b, a in zip(replicas, before, after, strict=True) if a > b]
    assert len(risen) == 1, (before, after)
    return ws, risen[0]


def test_a_fleet_behind_haproxy_fills_spreads_by_load_drains_and_fails_over(run: Any, speech: dict[str, Path]) -> None:
    with fleet() as (port, replicas, proxy):
        run(_full(port, replicas, proxy), 300)
        run(_webrtc(port, replicas), 300)
        run(_spread_drain_and_failover(port, replicas, proxy, speech["capital"]), 400)


async def _spread_drain_and_failover(port: int, replicas: list[Replica], proxy: Proxy, speech: Path) -> None:
    """The last three phases on one event loop: they share the calls placed one on each replica."""
    on = await _one_on_each(port, replicas)
    await _spread_by_load(port, replicas, proxy, on, speech)
    await _retry_past_a_full_one(port, replicas, proxy, on)
    await _drain_and_failover(port, replicas, on)


async def _full(port: int, replicas: list[Replica], proxy: Proxy) -> None:
    placed = [await call_placed(port, replicas) for _ in range(CAP * len(replicas))]
    assert where(replicas) == [CAP] * len(replicas)
    # Every replica full: each tells HAProxy "drain" or refuses the upgrade itself.
    with pytest.raises(InvalidStatus) as refused:
        await call(port)
    assert refused.value.response.status_code == 503
    assert refused.value.response.headers.get("Retry-After"), refused.value.response.headers
    # A place freed on one replica is where the next caller lands.
    ws, freed = placed.pop(0)
    await ws.close()
    await until(lambda: freed.sessions() == CAP - 1, 10, "the closed call's place freed")
    newcomer, landed = await call_placed(port, replicas)
    assert landed is freed
    for ws in [newcomer, *(ws for ws, _ in placed)]:
        await ws.close()
    await until(lambda: where(replicas) == [0] * len(replicas), 30, "every call closed")
    # The replicas take sessions again at once; the proxy hears so at each one's next agent check
    # (2 s). Until then only the replicas it has heard from get the next calls: a fresh clone's
    # WebRTC phase once sent its three offers to the one replica out of drain, and the third was
    # refused after the proxy's retries, as a full replica's is.
    names = [r.name for r in replicas]
    await until(lambda: all(proxy.weights().get(n, 0) > 0 for n in names), 30, "the proxy taking calls on every replica again")


async def _webrtc(port: int, replicas: list[Replica]) -> None:
    """WebRTC through the proxy as a browser would: the offer's POST lands on some replica (the
    media then flows to it directly), and each call's hangup reaches the replica holding it (the
    proxy remembers the call id from the answer's Location)."""
    from voiceagent.client.webrtc import RtcClient, post_offer

    base = f"http://127.0.0.1:{port}"
    calls = []
    for _ in replicas:
        client = RtcClient(base)
        await client.connect()
        await client.wait_for("session.created", 30 * SCALE)
        calls.append(client)
    counts = where(replicas)
    # On at least two replicas (a replica holds CAP): a hangup sent to the wrong one would show.
    assert sum(counts) == len(calls) and sum(1 for c in counts if c) >= 2, counts
    # In the reverse order: with every replica idle the proxy rotates, and hangups in the offers'
    # order would reach the right replicas by that rotation alone.
    for client in reversed(calls):
        status, body = await asyncio.to_thread(post_offer, f"{base}{client.location}/hangup", b"")
        assert status == 200, (client.location, status, body)
        await client.close()
    await until(lambda: where(replicas) == [0] * len(replicas), 30, "every WebRTC call hung up")


async def _one_on_each(port: int, replicas: list[Replica]) -> dict[str, ClientConnection]:
    """One call on each replica, by name.  The proxy weighs each by the load its agent reports,
    so a replica still busy from the last phase may get a second caller before an idle-looking
    one gets its first: callers keep coming until each has one (a full replica refuses, and the
    proxy tries another), and the extra ones hang up."""
    on: dict[str, ClientConnection] = {}
    extra: list[ClientConnection] = []
    while len(on) < len(replicas):
        assert len(on) + len(extra) < CAP * len(replicas), "the fleet is full before every replica has a call"
        ws, home = await call_placed(port, replicas)
        if home.name in on:
            extra.append(ws)
        else:
            on[home.name] = ws
    for ws in extra:
        await ws.close()
    await until(lambda: where(replicas) == [1] * len(replicas), 10, "one call left on each replica")
    return on


async def _spread_by_load(port: int, replicas: list[Replica], proxy: Proxy, on: dict[str, ClientConnection], speech: Path) -> None:
    """A replica made busy gets fewer new sessions.  Each holds one call; the first answers a
    spoken turn, so its measured load (that turn's latency against the budget) rises
    and its agent's weight falls.  Once the proxy applies the weights (read from its runtime API,
    not waited for by the clock), two new callers land on the two idle replicas: at one call
    each, HAProxy's leastconn ranks a server by (its calls + 1) / its weight."""
    busy, *idle = replicas
    assert await speak(on[busy.name], speech) == "completed"

    def lighter() -> bool:
        weights = proxy.weights()
        return all(0 < weights[busy.name] < weights[r.name] for r in idle)

    await until(lighter, 15, f"the proxy weighs {busy.name} below the idle replicas")
    weights = proxy.weights()
    print(f"the proxy's weights before the two callers: {weights}")  # shown with -s, and on a failure
    placed = [await call_placed(port, replicas) for _ in idle]
    assert sorted(r.name for _, r in placed) == sorted(r.name for r in idle), (weights, [r.name for _, r in placed])
    for ws, _ in placed:
        await ws.close()
    await until(lambda: where(replicas) == [1] * len(replicas), 10, "the new callers' places freed")


async def _retry_past_a_full_one(port: int, replicas: list[Replica], proxy: Proxy, on: dict[str, ClientConnection]) -> None:
    """A replica that filled up since its agent last answered refuses the upgrade itself (503),
    and HAProxy's retry (``retry-on 503``, ``redispatch``) puts the caller on one with room: the
    client sees only its session.  The first replica is filled with two sessions opened on it
    directly, which the proxy does not count, so it holds the fewest of the proxy's connections
    and is where the proxy sends the next caller until its agent's next check says ``drain``
    (every 2 s).  That window is raced: an attempt that lost it (the agent answered first, and
    the proxy sent the caller elsewhere without asking the full one) is tried again."""
    full, *others = replicas
    await on.pop(full.name).close()
    await until(lambda: full.sessions() == 0, 10, f"{full.name}'s call closed")
    retried = False
    for attempt in range(1, 6):
        await until(lambda: proxy.weights()[full.name] > 0, 15, f"{full.name} open in the proxy again")
        direct = [await connect(f"ws://127.0.0.1:{full.port}/v1/realtime", max_size=None) for _ in range(CAP)]
        refused = await asyncio.to_thread(full.refusals)
        before = await asyncio.to_thread(where, others)
        caller = await call(port)  # no retry of its own: a refusal would raise here
        after = await asyncio.to_thread(where, others)
        retried = await asyncio.to_thread(full.refusals) > refused
        assert sum(after) == sum(before) + 1, (before, after)  # on a replica with room
        for ws in (caller, *direct):
            await ws.close()
        await until(lambda b=before: full.sessions() == 0 and where(others) == b, 10, "the attempt's sessions closed")
        if retried:
            print(f"HAProxy retried past the full replica on attempt {attempt}")  # shown with -s
            break
    assert retried, f"in five attempts the proxy never sent a caller to {full.name} while it was full and open in the proxy"
    # The drain phase wants one call on each replica again: the emptied one, open in the proxy
    # again, holds the fewest of its connections.
    await until(lambda: proxy.weights()[full.name] > 0, 15, f"{full.name} open in the proxy again")
    ws, home = await call_placed(port, [full])
    assert home is full
    on[full.name] = ws


async def _drain_and_failover(port: int, replicas: list[Replica], on: dict[str, ClientConnection]) -> None:
    draining, killed, survivor = replicas

    # Drain: SIGTERM in the middle of a reply; the reply finishes, then the replica exits.
    story = "Tell me a story about a lighthouse keeper in three sentences."
    status, kinds = await ask(on[draining.name], story, lambda: draining.proc.send_signal(signal.SIGTERM))
    assert status == "completed", kinds
    await until(lambda: draining.proc.poll() is not None, DRAIN_S + 15, f"{draining.name} exits after its drain")
    assert draining.proc.returncode == 0, "".join(draining.lines[-30:])
    newcomer, _ = await call_placed(port, [killed, survivor])  # never on the draining one
    await newcomer.close()  # its place is the one the failover below needs
    await until(lambda: sum(where([killed, survivor])) == 2, 10, "the newcomer's place freed")

    # Failover: SIGKILL a replica holding a call; its caller is closed at the proxy and its next
    # connection lands on a live replica.
    victim = on[killed.name]
    killed.proc.send_signal(signal.SIGKILL)
    t0 = time.monotonic()
    with pytest.raises(ConnectionClosed):
        async with asyncio.timeout(10 * SCALE):
            async for _ in victim:
                pass
    # Back on a live replica: the proxy's upgrade accepted (HAProxy retries a refused connection
    # on another server at once; the session's own start is the replica's, not the failover's).
    back = await connect(f"ws://127.0.0.1:{port}/v1/realtime", max_size=None, open_timeout=30)
    elapsed = time.monotonic() - t0
    assert json.loads(await asyncio.wait_for(back.recv(), 30))["type"] == "session.created"
    assert elapsed <= 2.0 * SCALE, f"back on a live replica {elapsed:.1f} s after the kill"
    assert survivor.sessions() == 2  # its own call and the one that came back
    # No other call noticed: the survivor's first call still answers.
    status, kinds = await ask(on[survivor.name], "What is two plus two?")
    assert status == "completed", kinds
    for ws in (back, on[survivor.name]):
        await ws.close()
