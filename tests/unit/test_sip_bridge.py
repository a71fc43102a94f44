"""The SIP gateway's parts that need no SIP stack: who may call, the agent's audio queued for the
call with its marks, what the server's after-stream answer means, and one call's bridge to the
real server (its Twilio endpoint) with scripted engines: audio both ways, marks echoed as played,
the caller's keys, the agent's transfer and hang-up, the caller's hang-up, and a refusal.

The gateway itself (PJSIP, real callers) is tested in tests/integration/test_sip.py."""

from __future__ import annotations

import asyncio
import dataclasses
import os
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from tests.unit.fakes import FakeEngines, FakeLlm, FakeStt, tone
from voiceagent.audio import resample
from voiceagent.config import Config, PhoneConfig, ServerConfig
from voiceagent.conversation.history import UserItem
from voiceagent.sip.allow import AllowList, source_host
from voiceagent.sip.bridge import RATE, CallBridge, Next, next_step
from voiceagent.sip.playout import Playout
from voiceagent.tools.spec import ToolCall
from voiceagent.transports.server import VoiceAgentServer
from voiceagent.transports.twilio_codec import after_stream_twiml

SCALE = float(os.environ.get("VOICEAGENT_TEST_TIMEOUT_SCALE", "1"))
Run = Callable[..., Any]
FRAME = RATE // 50


# ---------------------------------------------------------------------- pure parts


def test_the_allow_list_admits_its_networks_only() -> None:
    allow = AllowList(["127.0.0.1", "10.1.0.0/16", " ::1 ", ""])
    assert allow.admits("127.0.0.1") and allow.admits("10.1.200.3") and allow.admits("::1")
    assert allow.admits("::ffff:10.1.0.9")  # an IPv4 caller on a dual-stack socket
    assert not allow.admits("10.2.0.1") and not allow.admits("192.168.1.5") and not allow.admits("not-an-address")
    assert AllowList(["*"]).admits("203.0.113.7")
    assert not AllowList([]).admits("127.0.0.1")
    with pytest.raises(ValueError, match=r"not an address or network: 'pbx\.example'"):
        AllowList(["pbx.example"])
    assert [source_host(s) for s in ("127.0.0.1:5060", "[::1]:5070", "10.0.0.1")] == ["127.0.0.1", "::1", "10.0.0.1"]


def test_playout_passes_a_mark_once_every_sample_before_it_was_pulled() -> None:
    out = Playout()
    out.write(np.arange(1, 201, dtype=np.int16))
    out.mark("m1")
    out.write(np.full(100, 7, dtype=np.int16))
    out.mark("m2")
    pcm, passed = out.pull(160)
    assert list(pcm[:3]) == [1, 2, 3] and passed == []
    assert out.queued == 140
    pcm, passed = out.pull(160)  # samples 160-320: both marks (200, 300) passed, then silence
    assert passed == ["m1", "m2"] and list(pcm[40:43]) == [7, 7, 7] and list(pcm[140:]) == [0] * 20
    assert out.queued == 0 and out.pull(160)[1] == []


def test_playout_clear_drops_what_was_not_pulled_and_returns_its_marks() -> None:
    out = Playout()
    out.write(np.ones(480, dtype=np.int16))
    out.mark("a")
    out.write(np.ones(480, dtype=np.int16))
    out.mark("b")
    out.pull(160)
    assert out.clear() == ["a", "b"]
    pcm, passed = out.pull(160)
    assert not pcm.any() and passed == [] and out.queued == 0
    out.write(np.ones(10, dtype=np.int16))  # positions go on counting from what was pulled
    out.mark("c")
    assert out.pull(160)[1] == ["c"]


def test_the_after_stream_answer_is_a_transfer_or_a_hang_up() -> None:
    assert next_step(after_stream_twiml("sip:desk@pbx.example")) == Next("sip:desk@pbx.example")
    assert next_step(after_stream_twiml("+15551234567")) == Next("tel:+15551234567")
    assert next_step(after_stream_twiml(None)) == Next(None)
    assert next_step("<Response><Dial><Sip>sip:a&amp;b@x</Sip></Dial></Response>") == Next("sip:a&b@x")


# ---------------------------------------------------------------------- one call through the server


def _config(max_sessions: int = 0, **phone: Any) -> Config:
    return dataclasses.replace(Config(), server=ServerConfig(port=0, max_sessions=max_sessions), phone=PhoneConfig(**phone))


class _Phone:
    """Plays PJSIP's part for one bridge: caller frames in at 20 ms, the agent's pulled at 20 ms."""

    def __init__(self, bridge: CallBridge) -> None:
        self.bridge = bridge
        self.heard: list[np.ndarray[Any, Any]] = []
        self.opened = asyncio.Event()
        self.ended: asyncio.Future[Next | None] = asyncio.get_running_loop().create_future()
        self._clock: asyncio.Task[None] | None = None

    def on_open(self) -> None:
        self.opened.set()
        self._clock = asyncio.create_task(self._pull())

    def on_end(self, step: Next | None) -> None:
        if self._clock is not None:
            self._clock.cancel()
        self.ended.set_result(step)

    async def _pull(self) -> None:
        while True:
            await asyncio.sleep(0.02)
            pcm, passed = self.bridge.playout.pull(FRAME)
            self.heard.append(pcm)
            if passed:
                self.bridge.marks_passed(passed)

    async def say(self, ms: float) -> None:
        pcm = resample(tone(ms, rate=16000), 16000, RATE)
        silence = np.zeros(FRAME * 40, dtype=np.int16)  # 800 ms: the turn ends
        for start in range(0, len(pcm) + len(silence), FRAME):
            self.bridge.inbound(np.concatenate([pcm, silence])[start : start + FRAME])
            await asyncio.sleep(0.02)


async def _call(server: VoiceAgentServer, body: Callable[[_Phone], Any]) -> tuple[_Phone, Any]:
    holder: list[_Phone] = []
    bridge = CallBridge(
        f"ws://127.0.0.1:{server.port}/twilio",
        f"http://127.0.0.1:{server.port}/twilio/twiml/next",
        "sip7",
        "sip:caller@127.0.0.1",
        lambda: holder[0].on_open(),
        lambda step: holder[0].on_end(step),
    )
    phone = _Phone(bridge)
    holder.append(phone)
    task = asyncio.create_task(bridge.run())
    try:
        return phone, await body(phone)
    finally:
        bridge.hung_up()
        await task


def test_a_call_is_heard_answered_and_transferred_by_the_agent(run: Run) -> None:
    fakes = FakeEngines(
        stt=FakeStt(default="can I talk to sales"),
        llm=FakeLlm([[ToolCall("c1", "transfer_call", '{"target": "sales"}')], ["I am putting you through to sales."]]),
    )

    async def main() -> tuple[_Phone, Any]:
        async with VoiceAgentServer(_config(tools=True, transfer_targets="sales=sip:sales@pbx.example"), fakes.engines) as server:

            async def body(phone: _Phone) -> Next | None:
                await asyncio.wait_for(phone.opened.wait(), 10 * SCALE)
                await phone.say(600)
                return await asyncio.wait_for(phone.ended, 20 * SCALE)

            return await _call(server, body)

    try:
        phone, step = run(main())
    finally:
        fakes.close()
    assert step == Next("sip:sales@pbx.example")
    heard = np.concatenate(phone.heard)
    assert np.abs(heard).max() > 1000  # the announcement reached the phone before the transfer


def test_the_callers_keys_reach_the_conversation_and_a_hang_up_ends_the_session(run: Run) -> None:
    fakes = FakeEngines(stt=FakeStt(default="hello"), llm=FakeLlm([], default=("Thank you.",)))

    async def main() -> tuple[list[Any], Next | None, int]:
        async with VoiceAgentServer(_config(dtmf_gap_ms=300), fakes.engines) as server:

            async def body(phone: _Phone) -> tuple[list[Any], Next | None]:
                await asyncio.wait_for(phone.opened.wait(), 10 * SCALE)
                for key in "42#":
                    phone.bridge.dtmf(key)

                async def keys_in_history() -> list[Any]:
                    while True:
                        items = [i for s in server.sessions for i in s.history.items if isinstance(i, UserItem)]
                        if items:
                            return items
                        await asyncio.sleep(0.05)

                items = await asyncio.wait_for(keys_in_history(), 10 * SCALE)
                phone.bridge.hung_up()
                return items, await asyncio.wait_for(phone.ended, 10 * SCALE)

            _, (items, step) = await _call(server, body)
            await asyncio.wait_for(server.wait_idle(), 10 * SCALE)
            return items, step, len(server.sessions)

    try:
        items, step, left = run(main())
    finally:
        fakes.close()
    assert "pressed 4 2" in items[0].text
    assert step is None and left == 0


def test_a_call_the_server_cannot_take_is_refused_not_answered(run: Run) -> None:
    fakes = FakeEngines()

    async def main() -> tuple[bool, Next | None]:
        async with VoiceAgentServer(_config(max_sessions=1), fakes.engines) as server:
            taken = asyncio.Event()
            first = CallBridge(f"ws://127.0.0.1:{server.port}/twilio", "", "sip1", "", taken.set, lambda step: None)
            held = asyncio.create_task(first.run())
            await asyncio.wait_for(taken.wait(), 10 * SCALE)

            async def body(phone: _Phone) -> Next | None:
                return await asyncio.wait_for(phone.ended, 10 * SCALE)

            phone, step = await _call(server, body)
            first.hung_up()
            await held
            return phone.opened.is_set(), step

    try:
        opened, step = run(main())
    finally:
        fakes.close()
    assert not opened and step == Next(refuse=503)


# ---------------------------------------------------------------------- wideband streams (G.722 calls)


def _started(codec: Any, encoding: str, rate: int) -> None:
    import json

    codec.decode(json.dumps({"event": "connected", "protocol": "Call", "version": "1.0.0"}))
    start = {"streamSid": "MZ1", "callSid": "c1", "mediaFormat": {"encoding": encoding, "sampleRate": rate, "channels": 1}}
    codec.decode(json.dumps({"event": "start", "streamSid": "MZ1", "start": start}))


def test_a_wideband_stream_carries_16_bit_pcm_at_16_khz_both_ways() -> None:
    import base64
    import json

    from voiceagent.errors import ProtocolError
    from voiceagent.events import AudioDelta, ResponseCreated, ResponseDone, ResponseStatus
    from voiceagent.transports.twilio_codec import TwilioCodec

    codec = TwilioCodec(16000)
    _started(codec, "audio/x-l16", 16000)
    assert codec.rate == 16000
    caller = tone(400, rate=16000)
    got = []
    for start in range(0, len(caller), 320):
        payload = base64.b64encode(caller[start : start + 320].astype("<i2").tobytes()).decode()
        got.append(codec.decode(json.dumps({"event": "media", "streamSid": "MZ1", "media": {"payload": payload}})))
    heard = np.concatenate([g.pcm for g in got])  # type: ignore[attr-defined]
    assert abs(len(heard) - len(caller)) <= 320 and np.abs(heard).max() > 5000  # 16 kHz in, 16 kHz to the pipeline
    with pytest.raises(ProtocolError, match="even number of bytes"):
        codec.decode(json.dumps({"event": "media", "streamSid": "MZ1", "media": {"payload": base64.b64encode(b"abc").decode()}}))
    base = {"t": 0.0, "gen": 1, "session": "s1"}
    codec.encode(ResponseCreated(**base, response_id="r1", item_id="i1"))  # type: ignore[arg-type]
    out = codec.encode(AudioDelta(**base, response_id="r1", item_id="i1", pcm=tone(1000, rate=16000), rate=16000, offset_ms=0.0))  # type: ignore[arg-type]
    out += codec.encode(ResponseDone(**base, response_id="r1", item_id="i1", status=ResponseStatus.COMPLETED, text=""))  # type: ignore[arg-type]
    sent = b"".join(base64.b64decode(m["media"]["payload"]) for m in out if m["event"] == "media")
    assert abs(len(sent) // 2 - 16000) <= 160  # one second of 16-bit samples at 16 kHz
    marks = [m["mark"]["name"] for m in out if m["event"] == "mark"]
    echo = [codec.decode(json.dumps({"event": "mark", "streamSid": "MZ1", "mark": {"name": n}})) for n in marks]
    assert echo[-1].played_ms == pytest.approx(len(sent) / 2 / 16, abs=1.0)  # type: ignore[attr-defined]


def test_any_other_format_is_refused_with_the_two_that_are_accepted() -> None:
    from voiceagent.errors import ProtocolError
    from voiceagent.transports.twilio_codec import TwilioCodec

    with pytest.raises(ProtocolError, match="audio/x-mulaw at 8000 Hz or audio/x-l16 at 16000 Hz"):
        _started(TwilioCodec(16000), "audio/x-l16", 8000)


def test_unreadable_messages_from_the_server_are_skipped_and_the_call_goes_on(run: Run) -> None:
    import base64
    import json

    from websockets.asyncio.server import ServerConnection, serve

    pcm = tone(100, rate=RATE)

    async def server(ws: ServerConnection) -> None:
        await ws.recv()  # connected
        await ws.recv()  # start
        for bad in ("not json", json.dumps({"event": "media"}), json.dumps({"event": "media", "media": {"payload": "***"}}), b"\x00"):
            await ws.send(bad)
        await ws.send(json.dumps({"event": "media", "media": {"payload": base64.b64encode(pcm.astype("<i2").tobytes()).decode()}}))
        await ws.send(json.dumps({"event": "mark", "mark": {"name": "m1"}}))
        await ws.close()

    async def main() -> tuple[Next | None, int]:
        ended: asyncio.Future[Next | None] = asyncio.get_running_loop().create_future()
        async with serve(server, "127.0.0.1", 0) as srv:
            port = srv.sockets[0].getsockname()[1]
            bridge = CallBridge(f"ws://127.0.0.1:{port}", "http://127.0.0.1:9/next", "sip9", "", lambda: None, ended.set_result)
            await bridge.run()
            return await ended, bridge.playout.queued

    step, queued = run(main(), 30)
    assert queued == len(pcm)  # the good message after four bad ones was played
    assert step == Next(None)  # the server ended the stream; no next step known: hang up
