"""Call control on phone calls (issue #68, item 4), through the real server and the Twilio
transport with a scripted LLM (the tool calls are the model's choice; the seam is the engine):

* ``end_call``: the goodbye after the call is heard to its end (every mark echoed), then the
  server ends the stream, and the ``<Connect>`` action answers ``<Hangup/>``;
* ``transfer_call``: offered only with configured targets, by name; the action answers the
  ``<Dial>`` of the named target;
* ``send_dtmf``: the keys reach the far end as keypad tones in the call's audio;
* the caller's keys: collected until ``#`` or the gap, then one user message and a response;
* no call-control tools where they make no sense (a Realtime session) or are turned off.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import urllib.request
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import numpy as np
import pytest
from websockets.asyncio.client import connect

from clients.twilio_call import FakeTwilioCall
from tests.unit.fakes import FakeEngines, FakeLlm, FakeStt, tone
from voiceagent.audio import Int16Array
from voiceagent.config import Config, PhoneConfig, ServerConfig, load_config
from voiceagent.conversation.history import AssistantItem, UserItem
from voiceagent.errors import ConfigError
from voiceagent.tools.phone import HangUp, PhoneTools, SendDigits, Transfer
from voiceagent.tools.spec import ToolCall
from voiceagent.transports.dtmf import FREQUENCIES, GAP_MS, TONE_MS, dtmf_tones
from voiceagent.transports.server import VoiceAgentServer
from voiceagent.transports.twilio_codec import after_stream_twiml, twiml

SCALE = float(os.environ.get("VOICEAGENT_TEST_TIMEOUT_SCALE", "1"))
T = TypeVar("T")
Run = Callable[..., Any]


def _config(**phone: Any) -> Config:
    return dataclasses.replace(Config(), server=ServerConfig(port=0), phone=PhoneConfig(**phone))


def _get(port: int, path: str) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
        return str(resp.read().decode())


def detect_keys(pcm: Int16Array, rate: int) -> str:
    """The keys in ``pcm`` by the Goertzel power of the eight DTMF frequencies over each
    tone-long window (the receiver's method), one key per run of tone."""
    size = rate * TONE_MS // 1000 // 2
    keys: list[str] = []
    previous = ""
    freqs = sorted({f for pair in FREQUENCIES.values() for f in pair})
    for start in range(0, len(pcm) - size + 1, size):
        x = pcm[start : start + size].astype(np.float64)
        n = np.arange(size)
        power = {f: abs(np.sum(x * np.exp(-2j * np.pi * f * n / rate))) ** 2 for f in freqs}
        total = float(np.sum(x * x)) * size
        low = max((f for f in freqs if f < 1000), key=lambda f: power[f])
        high = max((f for f in freqs if f > 1000), key=lambda f: power[f])
        key = ""
        # Two pure tones hold half of N * energy in their two bins; speech or one tone far less.
        if total > 0 and (power[low] + power[high]) / total > 0.25 and min(power[low], power[high]) > 0.2 * max(power[low], power[high]):
            key = next(k for k, pair in FREQUENCIES.items() if pair == (low, high))
        if key and key != previous:
            keys.append(key)
        previous = key
    return "".join(keys)


# ---------------------------------------------------------------------- pure parts


def test_tones_carry_each_key_and_a_gap_between_repeats() -> None:
    pcm = dtmf_tones("1#9*00D", 8000)
    assert len(pcm) == 7 * 8 * (TONE_MS + GAP_MS)
    assert detect_keys(pcm, 8000) == "1#9*00D"
    assert np.abs(pcm).max() < 32767  # no clipping
    with pytest.raises(ValueError, match="not keypad keys"):
        dtmf_tones("12x", 8000)


def test_the_tools_check_their_arguments_and_say_what_the_call_will_do() -> None:
    tools = PhoneTools({"sales": "+15551234567"})
    assert [t.name for t in tools.tools] == ["end_call", "send_dtmf", "transfer_call"]
    assert tools.tools[2].parameters["properties"]["target"]["enum"] == ["sales"]
    assert tools.call("end_call", "{}")[1] == HangUp()
    assert tools.call("send_dtmf", '{"digits": "1 2#"}')[1] == SendDigits("12#")
    assert tools.call("transfer_call", '{"target": "sales"}')[1] == Transfer("sales", "+15551234567")
    for name, args in [("send_dtmf", '{"digits": "12x"}'), ("send_dtmf", "{}"), ("transfer_call", '{"target": "+15550000000"}')]:
        output, action = tools.call(name, args)
        assert action is None and "error" in json.loads(output), (name, args, output)
    # With no targets configured, there is nothing to transfer to: the tool is not offered.
    assert [t.name for t in PhoneTools().tools] == ["end_call", "send_dtmf"]
    assert PhoneTools().call("transfer_call", '{"target": "sales"}')[1] is None


def test_transfer_targets_are_names_for_numbers_or_sip_uris_and_anything_else_stops_start_up() -> None:
    cfg = load_config(env={}, overrides={"phone.transfer_targets": "sales=+15551234567, desk=sip:desk@pbx.example,ops=tel:+4420"})
    assert cfg.phone.targets == {"sales": "+15551234567", "desk": "sip:desk@pbx.example", "ops": "tel:+4420"}
    for bad in ["sales", "sales=evil", "a b=+15551234567", "x=sip:nohost"]:
        with pytest.raises(ConfigError, match=r"phone\.transfer_targets"):
            load_config(env={}, overrides={"phone.transfer_targets": bad})


def test_twiml_asks_back_after_the_stream_and_dials_or_hangs_up() -> None:
    doc = twiml("wss://h/twilio", "/twilio/twiml/next?token=t")
    assert '<Connect action="/twilio/twiml/next?token=t" method="GET"><Stream url="wss://h/twilio"/></Connect>' in doc
    assert "<Response><Hangup/></Response>" in after_stream_twiml(None)
    assert "<Response><Dial>+15551234567</Dial></Response>" in after_stream_twiml("tel:+15551234567")
    assert "<Dial><Sip>sip:a&amp;b@pbx</Sip></Dial>" in after_stream_twiml("sip:a&b@pbx")


# ---------------------------------------------------------------------- through the server


def _scripted(*replies: list[str | ToolCall], heard: str = "hello") -> FakeEngines:
    """Engines whose LLM plays ``replies`` and whose transcriber hears ``heard``."""
    return FakeEngines(stt=FakeStt(default=heard), llm=FakeLlm(list(replies), default=("Yes.",)))


async def _phone_call(fakes: FakeEngines, config: Config, body: Callable[[VoiceAgentServer, Any], Awaitable[T]]) -> T:
    async with VoiceAgentServer(config, fakes.engines) as server:
        call = FakeTwilioCall(f"ws://127.0.0.1:{server.port}/twilio")
        async with call:
            return await body(server, call)


def _history(server: VoiceAgentServer) -> list[Any]:
    return [item for s in server.sessions for item in s.history.items]


def test_end_call_hangs_up_once_the_goodbye_is_heard(run: Run) -> None:
    fakes = _scripted([ToolCall("c1", "end_call", "{}")], ["Goodbye, and thank you for calling."], heard="thank you, goodbye")

    async def body(server: VoiceAgentServer, call: Any) -> tuple[Any, list[Any], str]:
        await call.say(tone(600), 16000)
        await call.wait_until(lambda: call.ended_by_server, 20 * SCALE)
        items = _history(server) or []
        after = await asyncio.to_thread(_get, server.port, f"/twilio/twiml/next?CallSid={call.call_sid}")
        return call, items, after

    try:
        call, _, after = run(_phone_call(fakes, _config(tools=True), body))
    finally:
        fakes.close()
    assert call.close_code == 1000
    # The goodbye reached the phone and played to its end before the stream ended.
    assert call.marks_sent > 0 and call.marks_echoed == call.marks_sent
    assert call.heard_ms == pytest.approx(call.received_ms)
    assert "<Hangup/>" in after
    offered = [t.name for t in fakes.llm.calls.items[0].tools]
    assert "end_call" in offered and "send_dtmf" in offered and "transfer_call" not in offered


def test_end_call_when_the_caller_said_no_goodbye_is_not_a_hang_up(run: Run) -> None:
    # What the default 0.5B did with a real caller (docs/reports/phone-tools-2026-12-02.md).
    fakes = _scripted([ToolCall("c1", "end_call", "{}")], ["Let me see who can help you."], heard="can you put me through to sales please")

    async def body(server: VoiceAgentServer, call: Any) -> list[Any]:
        await call.say(tone(600), 16000)

        def done() -> bool:
            replies = [i for i in _history(server) if isinstance(i, AssistantItem)]
            return bool(replies) and replies[-1].status != "in_progress" and call.quiet_for(0.3)

        await call.wait_until(done, 20 * SCALE)
        assert not call.ended_by_server
        return _history(server)

    try:
        items = run(_phone_call(fakes, _config(tools=True), body))
    finally:
        fakes.close()
    assert [i.text for i in items if isinstance(i, AssistantItem)] == ["Let me see who can help you."]
    assert not any(getattr(i, "name", "") == "end_call" for i in items)
    assert fakes.llm.calls.items[-1].tool_choice == "none"  # asked again without tools, as for any call nobody asked for


def test_transfer_call_goes_to_the_named_target_after_its_announcement(run: Run) -> None:
    # The caller names the department: a call's arguments must come from the conversation
    # (voiceagent/tools/grounding.py), and a transfer nobody asked for is the worst kind.
    fakes = _scripted(
        [ToolCall("c1", "transfer_call", '{"target": "sales"}')], ["I am putting you through to sales."], heard="can I talk to sales"
    )

    async def body(server: VoiceAgentServer, call: Any) -> tuple[list[Any], str, str]:
        await call.say(tone(600), 16000)
        await call.wait_until(lambda: call.ended_by_server, 20 * SCALE)
        after = await asyncio.to_thread(_get, server.port, f"/twilio/twiml/next?CallSid={call.call_sid}")
        again = await asyncio.to_thread(_get, server.port, f"/twilio/twiml/next?CallSid={call.call_sid}")
        return fakes.llm.calls.items, after, again

    try:
        calls, after, again = run(_phone_call(fakes, _config(tools=True, transfer_targets="sales=+15551234567"), body))
    finally:
        fakes.close()
    transfer = next(t for t in calls[0].tools if t.name == "transfer_call")
    assert transfer.parameters["properties"]["target"]["enum"] == ["sales"]
    assert "<Dial>+15551234567</Dial>" in after
    assert "<Hangup/>" in again  # a transfer is used once


def test_send_dtmf_plays_the_keys_as_tones_the_far_end_can_read(run: Run) -> None:
    fakes = _scripted([ToolCall("c1", "send_dtmf", '{"digits": "4#"}')], ["Done."])

    async def body(server: VoiceAgentServer, call: Any) -> Int16Array:
        await call.say(tone(600), 16000)

        def done() -> bool:
            replies = [i for i in _history(server) if isinstance(i, AssistantItem)]
            return len(replies) >= 2 and all(r.status != "in_progress" for r in replies) and call.quiet_for(0.3)

        await call.wait_until(done, 20 * SCALE)
        assert not call.ended_by_server  # keys do not end the call
        return call.heard_audio()

    try:
        heard = run(_phone_call(fakes, _config(tools=True), body))
    finally:
        fakes.close()
    assert "4#" in detect_keys(heard, 8000)


def test_the_callers_keys_become_one_message_at_hash_or_after_the_gap(run: Run) -> None:
    fakes = _scripted()

    async def body(server: VoiceAgentServer, call: Any) -> list[str]:
        for digit in "42#":
            await call.press(digit)
        await call.wait_until(lambda: len(fakes.llm.calls.items) >= 1, 10 * SCALE)
        await call.press("7")  # no "#": the gap (dtmf_gap_ms) ends it
        await call.wait_until(lambda: len(fakes.llm.calls.items) >= 2, 10 * SCALE)
        return [i.text for i in _history(server) if isinstance(i, UserItem)]

    try:
        users = run(_phone_call(fakes, _config(dtmf_gap_ms=300), body))
    finally:
        fakes.close()
    assert users == ["(The caller pressed 4 2 on the phone keypad.)", "(The caller pressed 7 on the phone keypad.)"]
    assert fakes.llm.calls.items[0].user_text == users[0]


@pytest.mark.parametrize("where", ["realtime", "phone tools off"])
def test_no_call_control_tools_off_the_phone_or_when_turned_off(where: str, run: Run) -> None:
    fakes = _scripted()
    config = _config(tools=where == "realtime")  # on for the Realtime session: still not offered there

    async def realtime(server: VoiceAgentServer) -> None:
        async with connect(f"ws://127.0.0.1:{server.port}/v1/realtime") as ws:
            item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}
            await ws.send(json.dumps({"type": "conversation.item.create", "item": item}))
            await ws.send(json.dumps({"type": "response.create"}))
            async for raw in ws:
                if json.loads(raw)["type"] == "response.done":
                    return

    async def scenario() -> None:
        if where == "realtime":
            async with VoiceAgentServer(config, fakes.engines) as server:
                await realtime(server)
        else:

            async def body(server: VoiceAgentServer, call: Any) -> None:
                await call.press("1")
                await call.press("#")
                await call.wait_until(lambda: len(fakes.llm.calls.items) >= 1, 10 * SCALE)

            await _phone_call(fakes, config, body)

    try:
        run(scenario())
    finally:
        fakes.close()
    assert fakes.llm.calls.items
    assert not {"end_call", "send_dtmf", "transfer_call"} & {t.name for t in fakes.llm.calls.items[0].tools}


def test_a_clients_own_function_named_end_call_wins_over_the_built_in() -> None:
    from voiceagent.conversation.catalog import ToolBox
    from voiceagent.tools.spec import Tool

    box = ToolBox(mcp=_NoMcp(), builtin=None, phone=PhoneTools())  # type: ignore[arg-type]
    mine = (Tool("end_call", "the client's own"),)
    assert [t.description for t in box.offered(mine) if t.name == "end_call"] == ["the client's own"]
    assert not box.runs_here("end_call", mine) and box.runs_here("end_call", ())


class _NoMcp:
    def tools(self) -> list[Any]:
        return []
