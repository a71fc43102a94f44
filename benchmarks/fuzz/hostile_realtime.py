"""Hostile ``/v1/realtime`` scenarios: batches of bad messages and their endings, audio bursts,
slow readers."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import socket
import time
from collections.abc import Callable
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from benchmarks.fuzz.categories import REALTIME_CATEGORIES
from benchmarks.fuzz.frames import close_code, pcm_b64, server_json, ws_frame
from benchmarks.fuzz.hostile_base import HostileBase
from benchmarks.fuzz.pacing import pace
from benchmarks.fuzz.realtime_gen import Msg, RealtimeGen
from voiceagent.transports.realtime_wire import WIRE_RATE

SLOW_INSTRUCTIONS = "You are a storyteller. Always answer with a long story of at least six sentences."


class RealtimeScenarios(HostileBase):
    """The hostile scenarios on ``/v1/realtime``."""

    async def _open_realtime(self, rng: random.Random) -> tuple[ClientConnection, list[dict[str, Any]], asyncio.Task[None], asyncio.Event]:
        compression = rng.choice(("deflate", None))  # frames compressed or not (permessage-deflate)
        ws = await connect(f"{self.base}/v1/realtime", max_size=None, open_timeout=self.timeout, compression=compression)
        events: list[dict[str, Any]] = []
        arrived = asyncio.Event()

        async def pump() -> None:
            with contextlib.suppress(ConnectionClosed):
                async for raw in ws:
                    msg = server_json(raw)
                    if msg.get("type") == "error":
                        self.stats.error_size(raw, msg)
                    events.append(msg)
                    arrived.set()
            arrived.set()

        task = asyncio.create_task(pump())
        return ws, events, task, arrived

    async def _wait_event(
        self, events: list[dict[str, Any]], arrived: asyncio.Event, task: asyncio.Task[None], pred: Callable[[dict[str, Any]], bool]
    ) -> bool:
        async def until() -> bool:
            while True:
                if any(pred(e) for e in events):
                    return True
                if task.done():
                    return False
                arrived.clear()
                await arrived.wait()

        try:
            return await asyncio.wait_for(until(), self.timeout)
        except TimeoutError:
            return False

    async def realtime_batch(self, rng: random.Random, tag: str) -> None:
        ws, events, pump, arrived = await self._open_realtime(rng)
        gen = RealtimeGen(rng, tag)
        if not await self._wait_event(events, arrived, pump, lambda e: e.get("type") == "session.created"):
            self.stats.exception("realtime_batch", TimeoutError(f"{tag}: no session.created"))
        ending = rng.choices(
            (
                "close",
                "abort",
                "abort_mid_frame",
                "abort_unanswered",
                "oversized",
                "invalid_utf8",
                "protocol_violation",
                "fin_without_close",
            ),
            (40, 12, 6, 4, 10, 10, 10, 8),
        )[0]
        size = rng.randint(5, 80)
        sent: list[Msg] = []
        for _ in range(size):
            for _ in range(rng.choice((0, 0, 0, 1))):  # a few valid messages in between
                msg = gen.valid()
                await pace()
                await ws.send(msg.frame)
                self.stats.valid_frames["realtime"] += 1
                sent.append(msg)
            msg = gen.bad(rng.choice(REALTIME_CATEGORIES))
            await pace()
            await self._send(ws, msg.frame, rng)
            self.stats.sent[f"realtime.{msg.category}"] += 1
            sent.append(msg)
        if ending == "abort_unanswered":
            # Gone before the server could answer: these cannot be checked (counted as such).
            ws.transport.abort()
            await pump
            self.stats.rt_unverifiable += sum(m.bad for m in sent)
            self.stats.sent["realtime.abrupt_disconnect"] += 1
            return
        sync = gen.eid()
        await pace()
        await ws.send(json.dumps({"type": "conversation.item.retrieve", "item_id": "item_fuzz_sync", "event_id": sync}))
        self.stats.valid_frames["realtime"] += 1
        synced = await self._wait_event(
            events, arrived, pump, lambda e: e.get("type") == "error" and (e.get("error") or {}).get("event_id") == sync
        )
        if not synced:
            self.stats.exception("realtime_batch", TimeoutError(f"{tag}: the sync message was not answered"))
        self._check_answers(sent, events, synced, tag)
        await self._end_realtime(ws, pump, ending, rng)

    async def _send(self, ws: ClientConnection, frame: str | bytes, rng: random.Random) -> None:
        """Send one message, now and then in fragments (the server reassembles them)."""
        if isinstance(frame, str) and len(frame) > 8 and rng.random() < 0.08:
            data = frame.encode()
            cuts = sorted(rng.sample(range(1, len(data)), min(len(data) - 1, rng.randint(1, 4))))
            parts = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
            self.stats.fragmented += 1
            await ws.send(parts, text=True)  # may split a UTF-8 sequence: only the whole message must be valid
        else:
            await ws.send(frame)

    def _check_answers(self, sent: list[Msg], events: list[dict[str, Any]], synced: bool, tag: str) -> None:
        errors = [e.get("error") or {} for e in events if e.get("type") == "error"]
        self.stats.rt_errors += len(errors)
        by_id: dict[str, dict[str, Any]] = {}
        unnamed = 0
        for err in errors:
            self.stats.rt_error_codes[str(err.get("code"))] += 1
            if err.get("code") == "input_audio_rate_exceeded":
                self.stats.rt_rate_errors += 1
            eid = err.get("event_id")
            if isinstance(eid, str):
                by_id.setdefault(eid, err)
            else:
                unnamed += 1
        expected_unnamed = 0
        for msg in sent:
            if not msg.bad:
                if msg.event_id in by_id:
                    self.stats.rt_valid_errored[str(by_id[msg.event_id].get("code"))] += 1
                continue
            self.stats.rt_bad += 1
            if msg.event_id is None:
                expected_unnamed += 1
                continue
            if msg.event_id in by_id:
                self.stats.rt_bad_answered += 1
            else:
                self._missing(tag, msg, synced)
        answered = min(unnamed, expected_unnamed)
        self.stats.rt_bad_answered += answered
        if answered < expected_unnamed:
            lacking = [m for m in sent if m.bad and m.event_id is None]
            for m in lacking[: expected_unnamed - answered]:
                self._missing(tag, m, synced, counted_only=True)

    def _missing(self, tag: str, msg: Msg, synced: bool, counted_only: bool = False) -> None:
        self.stats.rt_missing += 1
        if len(self.stats.rt_missing_samples) < 25:
            frame = msg.frame if isinstance(msg.frame, str) else repr(msg.frame)
            how = "(by count)" if counted_only else ""
            self.stats.rt_missing_samples.append(f"{tag} {msg.category}{how} synced={synced}: {frame[:300]}")

    async def _end_realtime(self, ws: ClientConnection, pump: asyncio.Task[None], ending: str, rng: random.Random) -> None:
        await pace()
        expected: set[int] | None
        if ending == "close":
            await ws.close()
            expected = {1000}
        elif ending == "abort":
            ws.transport.abort()
            self.stats.sent["realtime.abrupt_disconnect"] += 1
            expected = None
        elif ending == "fin_without_close":
            ws.transport.write_eof() if ws.transport.can_write_eof() else ws.transport.close()  # TCP FIN, no close frame
            self.stats.sent["realtime.abrupt_disconnect"] += 1
            expected = None
        elif ending == "abort_mid_frame":
            payload = json.dumps({"type": "input_audio_buffer.append", "audio": pcm_b64(4800, rng)}).encode()
            frame = ws_frame(0x1, payload)
            ws.transport.write(frame[: rng.randint(1, len(frame) - 1)])
            ws.transport.abort()
            self.stats.sent["realtime.partial_frame"] += 1
            expected = None
        elif ending == "oversized":
            self.stats.sent["realtime.oversized"] += 1
            await self._oversized(ws, rng, {"type": "input_audio_buffer.append", "audio": ""}, "audio")
            expected = {1009}
        elif ending == "invalid_utf8":
            self.stats.sent["realtime.invalid_utf8"] += 1
            await self._invalid_utf8(ws, rng, '{"type": "session.update", "session": {"instructions": "')
            expected = {1007}
        else:
            self.stats.sent["realtime.protocol_violation"] += 1
            self._protocol_violation(ws, rng)
            expected = {1002, 1007}  # 1007: RSV1 set where permessage-deflate was agreed, and the data does not inflate
        await self._await_close(pump)
        if expected is not None:
            self.stats.close("realtime", close_code(ws), expected, ending)

    async def audio_burst(self, rng: random.Random, tag: str) -> None:
        """Audio far faster than real time: past ``audio_burst_s`` the server refuses chunks."""
        ws, events, pump, arrived = await self._open_realtime(rng)
        await self._wait_event(events, arrived, pump, lambda e: e.get("type") == "session.created")
        t0 = time.monotonic()
        chunk_s = 0.5
        chunks = int((self.burst_s + 2.0) / chunk_s) + 1
        n = chunks
        prefix = f"{tag}-burst"
        for i in range(n):
            await pace()
            await ws.send(
                json.dumps(
                    {"type": "input_audio_buffer.append", "event_id": f"{prefix}-{i}", "audio": pcm_b64(int(chunk_s * WIRE_RATE), rng)}
                )
            )
        self.stats.sent["realtime.audio_burst"] += n
        sync = f"{tag}-sync"
        await ws.send(json.dumps({"type": "conversation.item.retrieve", "item_id": "item_fuzz_sync", "event_id": sync}))
        await self._wait_event(events, arrived, pump, lambda e: (e.get("error") or {}).get("event_id") == sync)
        elapsed = time.monotonic() - t0
        refused = sum(1 for e in events if (e.get("error") or {}).get("code") == "input_audio_rate_exceeded")
        self.stats.rt_rate_errors += refused
        self.stats.rt_errors += sum(1 for e in events if e.get("type") == "error")
        if n * chunk_s > self.burst_s + elapsed + 1.0 and refused == 0:
            self.stats.burst_without_rate_error += 1
        await ws.close()
        await self._await_close(pump)
        self.stats.close("realtime", close_code(ws), {1000}, "audio_burst")

    async def slow_reader(self, rng: random.Random, tag: str) -> None:
        """Asks for a long spoken reply, floods bad messages, never reads a byte, then vanishes."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, (self.host, self.port))
        ws = await connect(f"{self.base}/v1/realtime", sock=sock, max_size=None, max_queue=1, open_timeout=self.timeout)
        gen = RealtimeGen(rng, tag)
        item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Tell me a long story about a lighthouse."}]}
        for msg in (
            {"type": "session.update", "session": {"instructions": SLOW_INSTRUCTIONS, "max_output_tokens": 200}},
            {"type": "conversation.item.create", "item": item},
            {"type": "response.create"},
        ):
            await ws.send(json.dumps(msg))
            self.stats.valid_frames["realtime"] += 1
        flood = rng.randint(20, 200)
        for _ in range(flood):
            msg = gen.bad(rng.choice(REALTIME_CATEGORIES))
            await pace()
            try:
                await asyncio.wait_for(ws.send(msg.frame), 5)
            except (TimeoutError, ConnectionClosed):
                break  # the server stopped reading too: its answers have nowhere to go
            self.stats.sent["realtime.slow_reader"] += 1
        hold = rng.uniform(0.5, 4.0)
        await asyncio.sleep(hold)  # the client's behaviour (it hangs), not synchronisation
        ws.transport.abort()
        self.stats.sent["realtime.abrupt_disconnect"] += 1
