"""Answering-machine detection on the calls the server places (#70 item 4), with real phones
(baresip) and the real models: an answering machine's greeting (read by the Piper voice, as a
recorded greeting is read by a person) and its beep, against a person's "Hello?" (espeak-ng).
The record says who answered and why; the machine gets its message after the beep, never over
the greeting, and is hung up on; the person is answered."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.integration.sip_caller import Baresip, gateway_for, placed_record, sip_api, until_state
from tests.ports import free_port
from tests.profile import profile_config
from voiceagent.audio import read_wav, resample, write_wav
from voiceagent.config import Config
from voiceagent.conversation.history import AssistantItem, UserItem
from voiceagent.replay import speech_turns
from voiceagent.session import Session
from voiceagent.transports.server import VoiceAgentServer

pytestmark = [
    pytest.mark.models,
    pytest.mark.skipif(shutil.which("baresip") is None, reason="baresip-core is not installed (scripts/setup.sh installs it)"),
]
pytest.importorskip("pjsua2", reason="the sip extra is not installed (scripts/setup.sh installs it)")

RATE = 16000
GREETING = "Hi, you've reached Sam Taylor. I can't take your call right now. Please leave a message after the tone."
MESSAGE = "This is the Acme dental clinic. Your appointment is on Tuesday at three."


def _machine_wav(engines: Any, path: Path) -> float:
    """The greeting, half a second, a 1 kHz beep of half a second: written to ``path``; returns
    where the beep ends (seconds)."""
    voice = np.concatenate(list(engines.tts.synthesize(GREETING, 1.0)))
    greeting = resample(voice, engines.tts.sample_rate, RATE)
    t = np.arange(RATE // 2) / RATE
    beep = (np.sin(2 * np.pi * 1000 * t) * 0.25 * 32767).astype(np.int16)
    gap = np.zeros(RATE // 2, dtype=np.int16)
    write_wav(path, np.concatenate([greeting, gap, beep]), RATE)
    return (len(greeting) + len(gap) + len(beep)) / RATE


def _hello_wav(path: Path) -> None:
    raw = path.with_suffix(".raw.wav")
    subprocess.run(["espeak-ng", "-v", "en-us", "-s", "150", "-w", str(raw), "Hello?"], check=True)
    pcm, rate = read_wav(raw)
    write_wav(path, resample(pcm, rate, RATE), RATE)


def _place(server: VoiceAgentServer, phone: Baresip, machine: dict[str, Any]) -> str:
    body = {"to": f"sip:callee@127.0.0.1:{phone.sip_port}", "machine_detection": machine}
    status, record = sip_api(server, "/v1/sip/calls", body)
    assert status == 201 and record["answered_by"] is None, record
    return str(record["id"])


@dataclasses.dataclass
class Placed:
    server: VoiceAgentServer
    phone: Baresip
    call_id: str
    session: Session
    cli: subprocess.Popen[str] | None
    """``voiceagent call`` following the call, when it placed it."""


@contextlib.asynccontextmanager
async def placed_call(config: Config, engines: Any, folder: Path, wav: Path, *, by_cli: bool = False) -> AsyncIterator[Placed]:
    """A server with its SIP gateway, and a call it placed (with a voicemail plan; ``by_cli``:
    by ``voiceagent call --voicemail``, else by the HTTP API) to a phone that answers and plays
    ``wav``; yielded once answered."""
    async with VoiceAgentServer(config, engines) as server:
        gateway = gateway_for(server, free_port())
        await gateway.start()
        phone = Baresip(folder, wav, "PCMU", user="callee", answer="auto")
        cli = None
        try:
            if by_cli:
                to = f"sip:callee@127.0.0.1:{phone.sip_port}"
                at = f"http://127.0.0.1:{server.port}"
                cmd = [sys.executable, "-m", "voiceagent.cli", "call", to, "--server", at, "--voicemail", MESSAGE]
                cli = await asyncio.to_thread(subprocess.Popen, cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                await until_state(lambda: bool(server.phone_calls.placed), 30, "the call placed by voiceagent call", phone.output)
                call_id = next(iter(server.phone_calls.placed))
            else:
                call_id = await asyncio.to_thread(_place, server, phone, {"voicemail": MESSAGE})
            await until_state(lambda: server.phone_calls.get(call_id) is not None, 30, "the call answered", phone.output)
            call = server.phone_calls.get(call_id)
            assert call is not None
            yield Placed(server, phone, call_id, call.session, cli)
        finally:
            if cli is not None and cli.poll() is None:
                cli.kill()
                cli.wait()
            phone.close()
            await gateway.stop()


def test_an_answering_machine_is_told_apart_and_gets_its_message_after_the_beep(engines: Any, run: Any, tmp_path: Path) -> None:
    beep_end_s = _machine_wav(engines, tmp_path / "machine.wav")
    config = profile_config({"server.port": "0"})

    async def scenario() -> tuple[dict[str, Any], list[Any], np.ndarray[Any, Any], int, str]:
        async with placed_call(config, engines, tmp_path / "machine", tmp_path / "machine.wav", by_cli=True) as c:
            await until_state(lambda: placed_record(c.server, c.call_id)["answered_by"] is not None, 30, "a verdict", c.phone.output)
            # The message is left and heard, then the server hangs up.
            await until_state(c.phone.call_ended, 120, "the server's hang-up after the message", c.phone.output)
            await until_state(lambda: placed_record(c.server, c.call_id)["status"] == "ended", 20, "the call's end on its record")
            assert c.cli is not None
            said, _ = await asyncio.to_thread(c.cli.communicate, timeout=30)  # it follows the call to its end
            assert c.cli.returncode == 0, said  # answered
            return placed_record(c.server, c.call_id), list(c.session.history.items), c.phone.heard(), c.phone.rate, said

    record, items, heard, rate, said = run(scenario(), 300)
    assert record["answered_by"] == "machine", record
    lines = said.strip().splitlines()
    assert f"{record['id']}: answered by machine after " in said and lines[-1].startswith(f"{record['id']}: ended"), said
    assert record["answered_by_reasons"] and record["answered_by_ms"] < 1000 * beep_end_s, record
    replies = [i for i in items if isinstance(i, AssistantItem)]
    assert len(replies) == 1 and replies[0].status == "completed", items  # the message, and nothing said to the greeting
    assert replies[0].text == MESSAGE  # word for word
    voiced = speech_turns(heard, rate, turn_gap_s=0.3)
    assert voiced, "the machine heard nothing"
    assert voiced[0][0] >= beep_end_s - 0.1, (voiced, beep_end_s)  # not a word over the greeting or the beep


def test_a_person_who_says_hello_is_told_apart_and_answered(engines: Any, run: Any, tmp_path: Path) -> None:
    _hello_wav(tmp_path / "hello.wav")
    instructions = "You are calling from the Acme dental clinic. Answer in one short sentence."
    config = profile_config({"server.port": "0", "llm.instructions": instructions})

    async def scenario() -> tuple[dict[str, Any], list[Any]]:
        async with placed_call(config, engines, tmp_path / "person", tmp_path / "hello.wav") as c:

            def answered() -> bool:
                return any(isinstance(i, AssistantItem) and i.status == "completed" for i in c.session.history.items)

            await until_state(answered, 60, "the agent's answer to the person", c.phone.output)
            record = placed_record(c.server, c.call_id)
            assert record["status"] == "answered" and not c.phone.call_ended(), (record, c.phone.output())  # still talking
            return record, list(c.session.history.items)

    record, items = run(scenario(), 200)
    assert record["answered_by"] == "human", record
    assert "short greeting" in record["answered_by_reasons"][0], record
    users = [i for i in items if isinstance(i, UserItem)]
    assert users and "hello" in users[0].text.lower(), items
    assert items.index(users[0]) < next(n for n, i in enumerate(items) if isinstance(i, AssistantItem))
