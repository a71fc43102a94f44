"""SIP against the WebSocket: end of the caller's speech -> first agent audio, the same spoken
questions through one server, in one run.

* **SIP**: baresip (Debian's ``baresip-core``) calls the server's SIP gateway (PJSIP, its own
  process, as ``serve`` starts it) once per question and codec, plays the question from a WAV and
  records what it hears.  The end of speech is taken from what baresip *sent* (its ``-enc`` dump,
  :func:`voiceagent.replay.speech_turns`), the first agent audio from what it *heard* (its
  ``-dec`` dump): both dumps start with the call's audio, on the caller's clock, so the figure
  includes the gateway, both RTP legs, PJSIP's jitter buffer and the codec.
* **WebSocket**: :func:`voiceagent.replay.replay_file` on the same server and questions (first
  reply audio byte at the client).

Single-turn fixtures only (a question, then silence), ``fast`` unless ``--set`` says otherwise;
one untimed call first.  Usage::

    python -m benchmarks.sip_latency --out docs/bench/sip [--files capital weather] [--codecs PCMU,G722]

Writes ``sip_latency.json`` (every turn and the p50/p95 per path) to ``--out``.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.common.machine import machine
from benchmarks.common.report import emit_json
from benchmarks.common.stats import percentiles
from scripts import make_fixtures
from tests.integration.llm_server import free_port
from tests.integration.sip_caller import Baresip
from voiceagent.backends.registry import Engines, load_engines, warm_up
from voiceagent.config import Config, load_config
from voiceagent.replay import replay_file, speech_turns
from voiceagent.sip.supervisor import SipGateway
from voiceagent.transports.server import VoiceAgentServer

ROOT = Path(__file__).resolve().parents[1]
FILES = ("capital", "weather", "colour", "count", "short")


def _answered(caller: Baresip) -> bool:
    """Whether the caller has heard an answer after its question, and quiet again after it."""
    sent, heard = caller.sent(), caller.heard()
    said = speech_turns(sent, caller.rate)
    if not said or not len(heard):
        return False
    after = [s for s, e in speech_turns(heard, caller.rate, turn_gap_s=0.05) if s > said[-1][1]]
    return bool(after) and len(heard) / caller.rate - after[-1] > 1.5


def _latency(caller: Baresip) -> tuple[float | None, float | None]:
    """(end of the question in what the caller sent, first voice it heard after that), in s."""
    said = speech_turns(caller.sent(), caller.rate)
    end = said[-1][1] if said else None
    first = next((s for s, _ in speech_turns(caller.heard(), caller.rate, turn_gap_s=0.05) if end is not None and s > end), None)
    return end, first


async def sip_turn(sip_port: int, wav: Path, codec: str, folder: Path, within_s: float = 30.0) -> dict[str, Any]:
    """One call asking ``wav``'s question: its latency (None: no answer heard), whether it was
    answered (``established``) and the caller's log.  The caller's set-up and the reading of its
    dumps run in threads: the server under test may share this event loop."""
    caller = await asyncio.to_thread(Baresip, folder, wav, codec, tail_s=12.0)
    try:
        caller.dial(f"sip:agent@127.0.0.1:{sip_port}")
        t0 = time.monotonic()
        while not await asyncio.to_thread(_answered, caller):  # until the answer has played and gone quiet
            if time.monotonic() - t0 > within_s or caller.call_ended():  # refused, or hung up by the server
                break
            await asyncio.sleep(0.5)
        caller.hangup()
        output = caller.whole_output()
    finally:
        caller.close()
    end, first = await asyncio.to_thread(_latency, caller)
    latency = round((first - end) * 1000.0, 1) if first is not None and end is not None else None
    row = {"file": wav.stem, "codec": codec, "speech_end_s": end, "first_audio_s": first, "latency_ms": latency}
    return {**row, "established": "Call established" in output, "log": output}


async def run(files: list[str], codecs: list[str], config: Config, engines: Engines) -> dict[str, Any]:
    paths = make_fixtures.make_all(ROOT / ".cache" / "fixtures")
    sip_port = free_port()
    rows: list[dict[str, Any]] = []
    work = Path(tempfile.mkdtemp(prefix="sip-latency-"))
    try:
        async with VoiceAgentServer(config, engines) as server:
            gateway = SipGateway("127.0.0.1", sip_port, f"ws://127.0.0.1:{server.port}", "127.0.0.1", 4)
            await gateway.start()
            try:
                await sip_turn(sip_port, paths[files[0]], codecs[0], work / "warm")  # untimed
                for n, name in enumerate(files):
                    for codec in codecs:
                        row = await sip_turn(sip_port, paths[name], codec, work / f"{n}-{codec}")
                        rows.append({k: v for k, v in row.items() if k not in ("established", "log")})
                    turns = await replay_file(server.url, paths[name])
                    for t in turns:
                        rows.append({"file": name, "codec": "websocket", "latency_ms": t.latency_ms})
            finally:
                await gateway.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    summary = {}
    for path in [*codecs, "websocket"]:
        values = [r["latency_ms"] for r in rows if r["codec"] == path and r["latency_ms"] is not None]
        summary[path] = {"n": len(values), **percentiles(values)} if values else {"n": 0}
    pairs = [
        (s["latency_ms"], w["latency_ms"])
        for s in rows
        for w in rows
        if s["codec"] == codecs[0] and w["codec"] == "websocket" and s["file"] == w["file"] and s["latency_ms"] and w["latency_ms"]
    ]
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "command": "python -m benchmarks.sip_latency",
        "profile": config.profile,
        "measure": "end of the caller's speech -> first agent audio: SIP from baresip's own sent and heard audio, WebSocket at the client",
        "summary": summary,
        "median_extra_ms_sip_over_websocket": round(statistics.median(a - b for a, b in pairs), 1) if pairs else None,
        "turns": rows,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    ap.add_argument("--out", help="folder for sip_latency.json")
    ap.add_argument("--files", nargs="+", default=list(FILES), metavar="NAME")
    ap.add_argument("--codecs", default="PCMU,G722")
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    args = ap.parse_args()
    report = with_models(args.set, lambda config, engines: run(list(args.files), args.codecs.split(","), config, engines))
    emit_json(report, args.out, "sip_latency.json")
    return 0


def with_models(settings: list[str], bench: Callable[[Config, Engines], Coroutine[Any, Any, dict[str, Any]]]) -> dict[str, Any]:
    """Load the models once (``fast`` and one-sentence answers unless ``settings``, ``SECTION.KEY=VALUE``
    each, say otherwise), warm them, and run ``bench`` on them in an event loop of its own."""
    overrides = dict(s.split("=", 1) for s in settings)
    overrides.setdefault("profile", "fast")
    config = load_config(env={}, overrides={"server.port": "0", "llm.instructions": "Answer in one short sentence.", **overrides})
    engines = load_engines(config)
    try:
        warm_up(engines, config)  # outside the event loop: it runs its own
        return asyncio.run(bench(config, engines))
    finally:
        engines.close()


if __name__ == "__main__":
    raise SystemExit(main())
