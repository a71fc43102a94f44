"""Answering-machine detection on a labelled set of calls: the server places each call (``POST
/v1/sip/calls`` with ``machine_detection``) to a baresip phone that answers and plays a person's
first words or a machine's greeting; the call's record says who answered, why, and when.

The set (:data:`PEOPLE`, :data:`MACHINES`) is synthetic and says so: the people are espeak-ng
voices (six variants) and the Piper voice saying what people say when they pick up; the
machines are greetings of the kinds phones and offices record, read by the same voices, most
followed by a beep (pure tones of 850-1,400 Hz at -12 dBFS, after half a second), some not, one
that opens with a lone "Hello." as some people record theirs.  Every call goes over G.711
(PCMU), through the gateway, as a real one does.

Per call: the label, the verdict (``human``, ``machine``, ``unknown``; a person's verdict is
read again once its revision window has passed, and the first one is kept beside it), the
reasons, and the time to decide (``answered_by_ms``, from the call's first audio; for a person
also from the end of their words).  Summary: precision and recall of ``machine`` and of ``human``, and the time to
decide at p50 and p95 for each.  A person's verdict hands the call to the agent; the benchmark
hangs up there (``on_machine: hangup`` ends the machines' calls itself).

Usage::

    python -m benchmarks.machine_detection --out docs/bench/machine [--limit N]

Writes ``machine_detection.json`` (``--held-out``: ``machine_detection_held_out.json``, the
20 calls of :data:`PEOPLE_HELD_OUT` and :data:`MACHINES_HELD_OUT`) to ``--out``.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common.machine import machine
from benchmarks.common.report import emit_json
from benchmarks.common.stats import percentiles
from benchmarks.sip_latency import with_models
from tests.integration.llm_server import free_port
from tests.integration.sip_caller import Baresip, placed_record, sip_api
from voiceagent.audio import read_wav, resample, write_wav
from voiceagent.backends.registry import Engines
from voiceagent.config import Config
from voiceagent.replay import speech_turns
from voiceagent.sip.supervisor import SipGateway
from voiceagent.transports.machine_detection import MachineRules
from voiceagent.transports.server import VoiceAgentServer

RATE = 16000
VOICES = ("en-us", "en-gb", "en-us+f3", "en-gb-x-rp+m3", "en-us+f4", "en-gb-scotland", "piper")

PEOPLE: tuple[str, ...] = (
    "Hello?",
    "Hello.",
    "Hi.",
    "Yes?",
    "Hello, who's calling?",
    "Hi, this is Ann.",
    "Speaking.",
    "Yeah, hello?",
    "Good morning.",
    "Hey.",
    "Smith residence.",
    "Yes, hello.",
    "Hi there.",
    "Hello, Mark speaking.",
)

MACHINES: tuple[tuple[str, float], ...] = (
    # (greeting, its beep's frequency; 0: no beep)
    ("Hi, you've reached Sam Taylor. I can't take your call right now. Please leave a message after the tone.", 1000.0),
    ("Hello, this is Maria. Sorry I missed you. Leave your name and number and I'll call you back.", 1000.0),
    ("The person you are calling is not available. Please record your message after the tone.", 850.0),
    ("Thanks for calling Acme Plumbing. Our office is closed. Please leave a message.", 0.0),
    ("Hey, it's Jake. Do your thing.", 1000.0),
    ("You have reached the voicemail of five five five, zero one four two.", 1000.0),
    ("Hi! We can't come to the phone right now.", 1400.0),
    ("Hello. ... This is Tom. Leave a message.", 1000.0),
    ("Welcome to the mailbox of Doctor Chen. Press one to leave a message.", 0.0),
    ("Hi, this is Dana. I'm away from my desk until Monday. Please leave a message.", 1400.0),
    ("Hi, you've reached the Garcias! We're not home. Leave a message!", 1000.0),
    ("This is Paul. Talk to me.", 850.0),
    ("Good afternoon, you have reached Northside Dental. Our hours are nine to five.", 0.0),
    ("Hello, you've reached Lisa. Beep.", 1000.0),
)


# Written after the rules were last changed, and scored once: the rules were shaped on the set above.
PEOPLE_HELD_OUT: tuple[str, ...] = (
    "Hello, this is David.",
    "Yep?",
    "Hi, who is this?",
    "Johnson's.",
    "Hello, good evening.",
    "Uh, hello?",
    "This is Karen.",
    "Morning!",
    "Hello, yes?",
    "Hi, it's me.",
)

MACHINES_HELD_OUT: tuple[tuple[str, float], ...] = (
    ("Hi, you have reached Emily and Josh. Leave us a message and we'll call you back.", 1000.0),
    ("Sorry, I can't answer right now.", 1000.0),
    ("Hello? ... Hello? ... Ha, just kidding, leave a message.", 1000.0),
    ("You've reached the office of Brown and Partners. Please hold.", 0.0),
    ("Hi, it's Mike.", 1000.0),
    ("The number you have dialed is not in service.", 0.0),
    ("Hey! ... Leave your message.", 1000.0),
    ("Thank you for calling. All our agents are busy.", 0.0),
    ("Hi, this is Carlos, I'm on vacation until the fifteenth.", 850.0),
    ("Beep me back later.", 1400.0),
)


def _espeak(text: str, voice: str, out: Path) -> np.ndarray[Any, Any]:
    raw = out.with_suffix(".espeak.wav")
    subprocess.run(["espeak-ng", "-v", voice, "-s", "160", "-w", str(raw), text], check=True)
    pcm, rate = read_wav(raw)
    raw.unlink()
    return resample(pcm, rate, RATE)


def _voice(engines: Engines, text: str, voice: str, out: Path) -> np.ndarray[Any, Any]:
    """``text`` read by ``voice`` (an espeak-ng voice, or ``piper``), at 16 kHz; " ... " is a
    1.5 s pause."""
    parts = []
    for i, piece in enumerate(text.split(" ... ")):
        if i:
            parts.append(np.zeros(int(1.5 * RATE), dtype=np.int16))
        if voice == "piper":
            pcm = np.concatenate(list(engines.tts.synthesize(piece, 1.0)))
            parts.append(resample(pcm, engines.tts.sample_rate, RATE))
        else:
            parts.append(_espeak(piece, voice, out))
    return np.concatenate(parts)


def _clip(engines: Engines, text: str, voice: str, beep_hz: float, out: Path) -> float:
    """Write the answer's audio to ``out``; returns where its words end (s)."""
    pcm = _voice(engines, text, voice, out)
    voiced = speech_turns(pcm, RATE)
    words_end = voiced[-1][1] if voiced else len(pcm) / RATE
    if beep_hz:
        t = np.arange(RATE // 2) / RATE
        beep = (np.sin(2 * np.pi * beep_hz * t) * 0.25 * 32767).astype(np.int16)
        pcm = np.concatenate([pcm, np.zeros(RATE // 2, dtype=np.int16), beep])
    write_wav(out, pcm, RATE)
    return float(words_end)


async def _until(done: Callable[[], bool], within_s: float) -> None:
    """Poll ``done`` (another process's state: the call's record) for up to ``within_s``."""
    deadline = time.monotonic() + within_s
    while not done():
        if time.monotonic() > deadline:
            return
        await asyncio.sleep(0.1)


async def _one(server: VoiceAgentServer, folder: Path, wav: Path) -> dict[str, Any]:
    phone = await asyncio.to_thread(Baresip, folder, wav, "PCMU", tail_s=15.0, user="callee", answer="auto")
    try:
        body = {"to": f"sip:callee@127.0.0.1:{phone.sip_port}", "machine_detection": {"on_machine": "hangup"}}
        status, record = await asyncio.to_thread(sip_api, server, "/v1/sip/calls", body)
        if status != 201:
            return {"error": record}
        call_id = record["id"]

        def told() -> bool:
            record = placed_record(server, call_id)
            return record["answered_by"] is not None or record["status"] == "ended"

        await _until(told, 60)
        first = placed_record(server, call_id).get("answered_by")
        if first == "human":  # it may still turn into a machine (a beep or a machine's words soon after)
            window_s = MachineRules().revise_ms / 1000.0 + 1.0
            await _until(lambda: placed_record(server, call_id)["answered_by"] != "human", window_s)
        record = {**placed_record(server, call_id), "first_answered_by": first}
        if record["status"] != "ended":
            await asyncio.to_thread(sip_api, server, f"/v1/realtime/calls/{call_id}/hangup", {})
        await _until(lambda: placed_record(server, call_id)["status"] == "ended", 20)
        return record
    finally:
        phone.close()


async def _measure(config: Config, engines: Engines, limit: int, work: Path, held_out: bool) -> dict[str, Any]:
    people, machines = (PEOPLE_HELD_OUT, MACHINES_HELD_OUT) if held_out else (PEOPLE, MACHINES)
    shift = 2 if held_out else 0  # other voices for the same places
    cases: list[tuple[str, str, str, float]] = []
    for i, text in enumerate(people):
        cases.append(("human", text, VOICES[(i + shift) % len(VOICES)], 0.0))
    for i, (text, beep) in enumerate(machines):
        cases.append(("machine", text, VOICES[(i + 3 + shift) % len(VOICES)], beep))
    if limit:
        cases = cases[: limit // 2] + cases[len(people) : len(people) + limit - limit // 2]
    sip_port = free_port()
    calls: list[dict[str, Any]] = []
    async with VoiceAgentServer(config, engines) as server:
        gateway = SipGateway("127.0.0.1", sip_port, f"ws://127.0.0.1:{server.port}", "127.0.0.1", 4)
        gateway.place_calls_for(server.phone_calls)
        await gateway.start()
        try:
            for n, (label, text, voice, beep) in enumerate(cases):
                wav = work / f"call{n}.wav"
                words_end = await asyncio.to_thread(_clip, engines, text, voice, beep, wav)
                record = await _one(server, work / f"phone{n}", wav)
                by = record.get("answered_by")
                after = record.get("answered_by_ms")
                call = {
                    "label": label,
                    "text": text,
                    "voice": voice,
                    "beep_hz": beep or None,
                    "answered_by": by,
                    "first_answered_by": record.get("first_answered_by"),
                    "reasons": record.get("answered_by_reasons"),
                    "decided_ms": after,
                    "words_end_ms": round(1000 * words_end),
                    "right": by == label,
                }
                calls.append(call)
                print(f"{label:7} -> {by!s:7} {after!s:>6} ms  {voice:14} {text[:60]!r}  {'; '.join(call['reasons'] or [])}", flush=True)
        finally:
            await gateway.stop()
    return {"calls": calls, "summary": _summary(calls)}


def _summary(calls: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"calls": len(calls), "right": sum(c["right"] for c in calls)}
    for kind in ("machine", "human"):
        said = [c for c in calls if c["answered_by"] == kind]
        are = [c for c in calls if c["label"] == kind]
        hits = [c for c in said if c["label"] == kind]
        decided = [float(c["decided_ms"]) for c in are if c["decided_ms"] is not None]
        out[kind] = {
            "precision": round(len(hits) / len(said), 3) if said else None,
            "recall": round(len(hits) / len(are), 3) if are else None,
            "unknown": sum(c["answered_by"] == "unknown" for c in are),
            "decided_ms": percentiles(decided) if decided else None,
        }
    people = [float(c["decided_ms"]) - c["words_end_ms"] for c in calls if c["label"] == "human" and c["decided_ms"] is not None]
    out["human"]["after_their_words_ms"] = percentiles(people) if people else None
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--limit", type=int, default=0, help="this many calls, half people and half machines (default: all 28)")
    ap.add_argument("--held-out", action="store_true", help="the held-out set (20 calls) instead of the main one (28)")
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE", help="a server setting (default profile fast)")
    ap.add_argument("--out", type=Path, help="write machine_detection.json into this folder")
    args = ap.parse_args()
    if shutil.which("baresip") is None or shutil.which("espeak-ng") is None:
        raise SystemExit("needs baresip-core and espeak-ng (bash scripts/setup.sh installs them)")
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:

        async def bench(config: Config, engines: Engines) -> dict[str, Any]:
            return await _measure(config, engines, args.limit, Path(tmp), args.held_out)

        result = with_models(args.set, bench)
    result = {
        "benchmark": "machine_detection",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "set": "held-out" if args.held_out else "main",
        "settings": args.set,
        "wall_s": round(time.monotonic() - started, 1),
        **result,
    }
    emit_json(result, args.out, "machine_detection_held_out.json" if args.held_out else "machine_detection.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
