"""Phone calls with the call-control tools on and off, on real models (issue #68, item 4).

A Twilio call (clients/twilio_call.py plays Twilio's part) to an in-process server asks two
questions, then says goodbye; a second call asks to be put through to sales.  For each it
records what the agent said, which call-control tools it called, whether the server ended the
call, and the first reply audio's arrival after the caller's audio was sent (a relative figure:
it includes the end-of-turn silence, the same with the tools on and off).

    .venv/bin/python -m benchmarks.eval_phone_tools --profile fast --tools off,on --out docs/bench/phone_tools

The spoken files are espeak-ng's (the fixtures, and three sentences made here).  About a minute
a setting on two cores (the quality profile: three).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common.report import emit_json
from clients.twilio_call import FakeTwilioCall
from scripts.make_fixtures import FIXTURES, make
from voiceagent.audio import read_wav
from voiceagent.backends.registry import Engines, load_engines, warm_up
from voiceagent.config import Config, PhoneConfig, ServerConfig, load_config
from voiceagent.conversation.history import AssistantItem, FunctionCallItem
from voiceagent.transports.server import VoiceAgentServer

ROOT = Path(__file__).resolve().parents[1]
SENTENCES = {"goodbye": "Thank you, that is all I needed. Goodbye.", "sales": "Can you put me through to sales, please?"}
CALLS = (("capital", "colour", "goodbye"), ("sales",))


def _speech(out: Path) -> dict[str, Path]:
    wavs = {name: make(FIXTURES[name], ROOT / ".cache" / "fixtures") for name in ("capital", "colour")}
    for name, text in SENTENCES.items():
        wavs[name] = out / f"{name}.wav"
        subprocess.run(["espeak-ng", "-s", "140", "-w", str(wavs[name]), text], check=True)
    return wavs


async def _turn(server: VoiceAgentServer, call: Any, wav: Path) -> dict[str, Any]:
    pcm, rate = read_wav(wav)
    before = sum(1 for s in server.sessions for i in s.history.items if isinstance(i, AssistantItem))
    await call.say(pcm, rate)
    sent = time.monotonic()

    def done() -> bool:
        replies = [i for s in server.sessions for i in s.history.items if isinstance(i, AssistantItem)]
        answered = len(replies) > before and all(r.status != "in_progress" for r in replies)
        return bool(call.ended_by_server or (answered and call.marks_echoed == call.marks_sent and call.quiet_for(0.6)))

    await call.wait_until(done, 90)
    first = next((t for t in call.media_times if t > sent), None)
    items = [i for s in server.sessions for i in s.history.items]
    return {
        "said": wav.stem,
        "first_audio_after_sent_s": None if first is None else round(first - sent, 3),
        "replies": [i.text for i in items if isinstance(i, AssistantItem)][before:],
        "tool_calls": [[i.name, i.arguments] for i in items if isinstance(i, FunctionCallItem)],
        "ended_by_server": bool(call.ended_by_server),
    }


async def _run(base: Config, engines: Engines, tools: bool, wavs: dict[str, Path]) -> list[list[dict[str, Any]]]:
    phone = PhoneConfig(tools=tools, transfer_targets="sales=+15551234567")
    config = dataclasses.replace(base, server=ServerConfig(port=0), phone=phone)
    calls = []
    for script in CALLS:
        async with VoiceAgentServer(config, engines) as server, FakeTwilioCall(f"ws://127.0.0.1:{server.port}/twilio") as call:
            turns = []
            for name in script:
                turns.append(await _turn(server, call, wavs[name]))
                if call.ended_by_server:
                    break
            calls.append(turns)
    return calls


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="fast")
    ap.add_argument("--tools", default="off,on", help="comma-separated: off, on")
    ap.add_argument("--out", type=Path, default=None, help="a folder: the JSON goes to PROFILE.json there too")
    args = ap.parse_args()
    base = load_config(env={}, overrides={"profile": args.profile})
    engines = load_engines(base)
    warm_up(engines, base)
    with tempfile.TemporaryDirectory() as tmp:
        wavs = _speech(Path(tmp))
        result = {"profile": args.profile, "llm": base.llm.model}
        for setting in args.tools.split(","):
            result[f"tools_{setting}"] = asyncio.run(_run(base, engines, setting == "on", wavs))
    engines.close()
    emit_json(result, args.out, f"{args.profile}.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
