"""The OpenAI Agents SDK (``openai-agents``), unchanged and with its defaults, against the real server.

The SDK runs in its own environment (``.venv-agents``, made by scripts/setup.sh: it pins
websockets below 17, which the server needs), as tests/integration/agents_client.py, one scenario
a process, against a server on loopback here.  Its default handshake sends the voice ``ash``,
``semantic_vad`` turn detection, ``gpt-4o-mini-transcribe`` and, on ``session.created``,
``tracing: "auto"``: none of it may draw an ``error``, and every server event the SDK received
must validate against the ``openai`` package's types (:mod:`tests.strict`).

* a spoken turn (audio in, a transcript and a spoken answer out);
* a text turn (``send_message``);
* a function tool round trip: the SDK runs the agent's tool and the answer uses its output;
* an interrupt (``session.interrupt()`` while the answer plays): the server stops it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from tests.integration.rt_client import WIRE_RATE, wire_audio
from tests.profile import profile_config
from tests.strict import check_server_event
from voiceagent.config import Config, ServerConfig
from voiceagent.transports.server import VoiceAgentServer

pytestmark = pytest.mark.models

ROOT = Path(__file__).resolve().parents[2]
AGENTS_PYTHON = ROOT / ".venv-agents" / "bin" / "python"
CLIENT = Path(__file__).with_name("agents_client.py")
PARIS_WEATHER = "It is 18 degrees and sunny in Paris."  # the client's tool answers this


def _config() -> Config:
    return dataclasses.replace(profile_config(), server=ServerConfig(port=0))


@dataclasses.dataclass
class Run:
    """What the SDK's session yielded, one dict a line (agents_client.py's format)."""

    lines: list[dict[str, Any]]
    stderr: str

    def raw(self, kind: str | None = None) -> list[dict[str, Any]]:
        return [ln["event"] for ln in self.lines if ln["sdk"] == "raw" and (kind is None or ln["event"].get("type") == kind)]

    def of(self, sdk: str) -> list[dict[str, Any]]:
        return [ln for ln in self.lines if ln["sdk"] == sdk]

    def check_clean(self) -> None:
        """Ran to its end, no ``error`` at any level, every server event valid by the ``openai`` types."""
        assert self.lines and self.lines[-1]["sdk"] == "finished", (self.lines[-3:], self.stderr[-2000:])
        errors = self.of("error") + self.raw("error")
        assert not errors, errors
        invalid = [why for why in map(check_server_event, self.raw()) if why is not None]
        assert not invalid, invalid

    def audio_bytes(self, response_id: str) -> int:
        return sum(ln["bytes"] for ln in self.of("audio") if ln["response_id"] == response_id)


async def _sdk(server: VoiceAgentServer, scenario: str, pcm: Path | None = None) -> Run:
    if not AGENTS_PYTHON.exists():
        pytest.fail(f"{AGENTS_PYTHON} is missing: run bash scripts/setup.sh (it installs the Agents SDK there)")
    args = [str(CLIENT), "--url", server.url, "--scenario", scenario] + (["--pcm", str(pcm)] if pcm else [])
    proc = await asyncio.create_subprocess_exec(str(AGENTS_PYTHON), *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate()
    lines = [json.loads(line) for line in out.decode().splitlines() if line.startswith("{")]
    run = Run(lines, err.decode())
    assert proc.returncode == 0, (proc.returncode, lines[-3:], run.stderr[-2000:])
    return run


def test_agents_sdk_default_handshake_has_no_error_and_a_spoken_turn_is_answered(
    engines: Any, speech: dict[str, Path], run: Any, tmp_path: Path
) -> None:
    pcm = tmp_path / "capital.pcm"
    pcm.write_bytes(wire_audio(speech["capital"], tail_s=1.0).astype("<i2").tobytes())

    async def scenario() -> Run:
        async with VoiceAgentServer(_config(), engines) as server:
            return await _sdk(server, "spoken", pcm)

    sdk = run(scenario(), 120)
    sdk.check_clean()
    updated = sdk.raw("session.updated")[-1]["session"]
    # The SDK's own voice name is accepted and shown as the voice the server speaks with.
    assert updated["audio"]["output"]["voice"] == profile_config().tts.model
    assert updated["tracing"] == "auto"
    done = sdk.raw("response.done")[-1]["response"]
    assert done["status"] == "completed", done
    transcripts = sdk.raw("conversation.item.input_audio_transcription.completed")
    assert transcripts and "capital" in transcripts[0]["transcript"].lower(), transcripts
    assert sdk.audio_bytes(done["id"]) > WIRE_RATE  # over half a second of 16-bit speech


def test_agents_sdk_text_turn_gets_a_spoken_answer(engines: Any, run: Any) -> None:
    async def scenario() -> Run:
        async with VoiceAgentServer(_config(), engines) as server:
            return await _sdk(server, "text")

    sdk = run(scenario(), 120)
    sdk.check_clean()
    done = sdk.raw("response.done")[-1]["response"]
    assert done["status"] == "completed", done
    spoken = done["output"][0]["content"][0]["transcript"]
    assert "paris" in spoken.lower(), spoken
    assert sdk.audio_bytes(done["id"]) > WIRE_RATE


def test_agents_sdk_function_tool_is_called_and_the_answer_uses_its_output(engines: Any, run: Any) -> None:
    async def scenario() -> Run:
        async with VoiceAgentServer(_config(), engines) as server:
            return await _sdk(server, "tool")

    sdk = run(scenario(), 180)
    sdk.check_clean()
    tools = sdk.raw("session.updated")[-1]["session"]["tools"]
    assert [t["name"] for t in tools] == ["get_weather"], tools
    assert [c["city"].strip().lower() for c in sdk.of("tool_called")] == ["paris"]
    assert [e["output"] for e in sdk.of("tool_end")] == [PARIS_WEATHER]
    first, answer = (e["response"] for e in sdk.raw("response.done")[:2])
    assert "function_call" in [item["type"] for item in first["output"]], first
    assert answer["status"] == "completed", answer
    spoken = answer["output"][0]["content"][0]["transcript"]
    assert "18" in spoken or "sunny" in spoken.lower(), spoken  # the answer uses the tool's output


def test_agents_sdk_interrupt_stops_the_answer_and_keeps_what_was_heard(engines: Any, run: Any) -> None:
    async def scenario() -> Run:
        async with VoiceAgentServer(_config(), engines) as server:
            return await _sdk(server, "interrupt")

    sdk = run(scenario(), 120)
    sdk.check_clean()
    first = sdk.of("audio")[0]
    truncated = sdk.raw("conversation.item.truncated")[0]
    done = sdk.raw("response.done")[-1]["response"]
    assert done["id"] == first["response_id"] and done["status"] == "cancelled", done
    assert truncated["item_id"] == first["item_id"]
    # The history holds what was heard: cut where the SDK said, within the audio sent.
    sent_ms = sdk.audio_bytes(done["id"]) / 2 / WIRE_RATE * 1000
    assert 0 <= truncated["audio_end_ms"] <= sent_ms + 1, (truncated, sent_ms)
