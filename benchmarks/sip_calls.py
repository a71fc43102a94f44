"""How many phone calls at once: N SIP calls arriving together against N WebSocket conversations,
under the server's own admission rule (by load), in one run.

For each N (``--calls``, 1 2 4 8 by default) N baresip callers (Debian's ``baresip-core``) dial
the server's SIP gateway at the same instant, each asking one of the spoken questions over G.711
(``--codec``), and record what they hear; then N WebSocket clients
(:func:`voiceagent.replay.replay_file`) send the same questions at the same instant.  Per N and
path: calls answered (SIP: the call was established; WebSocket: the session opened), refused
(SIP: a busy or unavailable final status; WebSocket: HTTP 503), questions answered with audio,
and end of the caller's speech -> first agent audio (p50, p95, max; SIP from baresip's own sent
and heard audio, as in ``benchmarks.sip_latency``).  The gateway takes ``server.sip_max_calls``
calls (4, the packaged PJSIP's most: the next get 486); within that, what refuses beyond the
machine's means is the server's admission by load, the same rule as on the WebSocket.  Each
phase has a fresh server on the same models: the load and the turns' latency the rule reads are
the phase's own.  ``fast`` unless ``--set`` says otherwise; one untimed call first.

Usage::

    python -m benchmarks.sip_calls --out docs/bench/sip [--calls 1 2 4 8] [--codec PCMU]

Writes ``sip_calls.json`` to ``--out``.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shutil
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from websockets.exceptions import InvalidStatus

from benchmarks.common.machine import machine
from benchmarks.common.report import emit_json
from benchmarks.common.stats import percentiles
from benchmarks.sip_latency import FILES, sip_turn, with_models
from scripts import make_fixtures
from tests.integration.llm_server import free_port
from voiceagent.backends.registry import Engines
from voiceagent.config import Config
from voiceagent.replay import replay_file
from voiceagent.sip.supervisor import SipGateway
from voiceagent.transports.server import VoiceAgentServer

ROOT = Path(__file__).resolve().parents[1]
REFUSED = re.compile(r"session closed: (\d{3})")  # baresip's line for a final answer other than 200


async def _ws_call(url: str, wav: Path) -> dict[str, Any]:
    try:
        turns = await replay_file(url, wav, timeout_s=60.0)
    except InvalidStatus as exc:
        return {"file": wav.stem, "established": False, "refused": exc.response.status_code, "latency_ms": None}
    latency = turns[0].latency_ms if turns else None
    return {"file": wav.stem, "established": True, "refused": None, "latency_ms": latency}


async def _sip_phase(config: Config, engines: Engines, wavs: list[Path], codec: str, folder: Path) -> list[dict[str, Any]]:
    """One SIP call per file in ``wavs``, all dialled at once, on a fresh server and gateway."""
    sip_port = free_port()
    async with VoiceAgentServer(config, engines) as server:
        gateway = SipGateway("127.0.0.1", sip_port, f"ws://127.0.0.1:{server.port}", "127.0.0.1", config.server.sip_max_calls)
        await gateway.start()
        try:
            rows = await asyncio.gather(*(sip_turn(sip_port, wav, codec, folder / str(k), within_s=60.0) for k, wav in enumerate(wavs)))
        finally:
            await gateway.stop()
    for row in rows:
        log = row.pop("log")
        status = REFUSED.search(log) if not row["established"] else None
        row["refused"] = int(status.group(1)) if status else None
        if not row["established"]:
            row["log_tail"] = log[-1500:]  # why it was not answered, as baresip saw it
    return list(rows)


async def _ws_phase(config: Config, engines: Engines, wavs: list[Path]) -> list[dict[str, Any]]:
    """One WebSocket conversation per file in ``wavs``, all opened at once, on a fresh server."""
    async with VoiceAgentServer(config, engines) as server:
        return list(await asyncio.gather(*(_ws_call(server.url, wav) for wav in wavs)))


def _summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    values = [r["latency_ms"] for r in rows if r["latency_ms"] is not None]
    return {
        "calls": len(rows),
        "answered_calls": sum(bool(r["established"]) for r in rows),
        "refused": sum(r["refused"] is not None for r in rows),
        "answered_questions": len(values),
        "latency_ms": {**percentiles(values), "max": max(values)} if values else None,
    }


async def run(counts: list[int], codec: str, config: Config, engines: Engines) -> dict[str, Any]:
    paths = make_fixtures.make_all(ROOT / ".cache" / "fixtures")
    files = [paths[name] for name in FILES]
    rounds: list[dict[str, Any]] = []
    work = Path(tempfile.mkdtemp(prefix="sip-calls-"))
    try:
        await _sip_phase(config, engines, files[:1], codec, work / "warm")  # untimed
        for n in counts:
            wavs = [files[k % len(files)] for k in range(n)]
            t0 = time.monotonic()
            sip = await _sip_phase(config, engines, wavs, codec, work / str(n))
            sip_s = time.monotonic() - t0
            ws = await _ws_phase(config, engines, wavs)
            summary = {"n": n, "sip": _summary(sip), "websocket": _summary(ws), "sip_wall_s": round(sip_s, 1)}
            rounds.append({**summary, "rows": {"sip": sip, "websocket": ws}})
            print(f"[sip_calls] {n} at once: SIP {rounds[-1]['sip']}  WebSocket {rounds[-1]['websocket']}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "command": "python -m benchmarks.sip_calls",
        "profile": config.profile,
        "codec": codec,
        "measure": "N calls arriving at once: answered, refused (admission by load), end of speech -> first agent audio",
        "rounds": rounds,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    ap.add_argument("--out", help="folder for sip_calls.json")
    ap.add_argument("--calls", nargs="+", type=int, default=[1, 2, 4, 8], metavar="N")
    ap.add_argument("--codec", default="PCMU")
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    args = ap.parse_args()
    report = with_models(args.set, lambda config, engines: run(list(args.calls), args.codec, config, engines))
    emit_json(report, args.out, "sip_calls.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
