"""Answering-machine detection on the calls the server places (#70 item 4), with real phones
(baresip) and the real models: an answering machine's greeting (read by the Piper voice, as a
recorded greeting is read by a person) and its beep, against a person's "Hello?" (espeak-ng).
The record says who answered and why; the machine gets its message after the beep, never over
the greeting, and is hung up on; the person is answered."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.integration.llm_server import free_port
from tests.integration.sip_caller import Baresip, gateway_for, placed_record, sip_api, until_state
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


@contextlib.asynccontextmanager
async def placed_call(
    config: Config, engines: Any, folder: Path, wav: Path
) -> AsyncIterator[tuple[VoiceAgentServer, Baresip, str, Session]]:
    """A server with its SIP gateway, and a call it placed (with a voicemail plan) to a phone that
    answers and plays ``wav``: once answered, the server, the phone, the call's id and session."""
    async with VoiceAgentServer(config, engines) as server:
        gateway = gateway_for(server, free_port())
        await gateway.start()
        phone = Baresip(folder, wav, "PCMU", user="callee", answer="auto")
        try:
            call_id = await asyncio.to_thread(_place, server, phone, {"voicemail": MESSAGE})
            await until_state(lambda: server.phone_calls.get(call_id) is not None, 30, "the call answered", phone.output)
            call = server.phone_calls.get(call_id)
            assert call is not None
            yield server, phone, call_id, call.session
        finally:
            phone.close()
            await gateway.stop()


def test_an_answering_machine_is_told_apart_and_gets_its_message_after_the_beep(engines: Any, run: Any, tmp_path: Path) -> None:
    beep_end_s = _machine_wav(engines, tmp_path / "machine.wav")
    config = profile_config({"server.port": "0"})

    async def scenario() -> tuple[dict[str, Any], list[Any], np.ndarray[Any, Any], int]:
        async with placed_call(config, engines, tmp_path / "machine", tmp_path / "machine.wav") as (server, phone, call_id, session):
            await until_state(lambda: placed_record(server, call_id)["answered_by"] is not None, 30, "a verdict", phone.output)
            # The message is left and heard, then the server hangs up.
            await until_state(phone.call_ended, 120, "the server's hang-up after the message", phone.output)
            await until_state(lambda: placed_record(server, call_id)["status"] == "ended", 20, "the call's end on its record")
            return placed_record(server, call_id), list(session.history.items), phone.heard(), phone.rate

    record, items, heard, rate = run(scenario(), 300)
    assert record["answered_by"] == "machine", record
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
        async with placed_call(config, engines, tmp_path / "person", tmp_path / "hello.wav") as (server, phone, call_id, session):

            def answered() -> bool:
                return any(isinstance(i, AssistantItem) and i.status == "completed" for i in session.history.items)

            await until_state(answered, 60, "the agent's answer to the person", phone.output)
            record = placed_record(server, call_id)
            assert record["status"] == "answered" and not phone.call_ended(), (record, phone.output())  # still talking
            return record, list(session.history.items)

    record, items = run(scenario(), 200)
    assert record["answered_by"] == "human", record
    assert "short greeting" in record["answered_by_reasons"][0], record
    users = [i for i in items if isinstance(i, UserItem)]
    assert users and "hello" in users[0].text.lower(), items
    assert items.index(users[0]) < next(n for n, i in enumerate(items) if isinstance(i, AssistantItem))
