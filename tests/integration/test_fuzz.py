"""The protocol fuzzer (python -m benchmarks.fuzz) in CI: a smaller run against a real server.

The server runs here, on the shared real models; the fuzzer runs as a child process with
``--url``, so its hostile clients do not share this interpreter with the server.  Afterwards the
server must still answer ``/healthz``, every session must have been torn down, nothing may have
been logged at ERROR (an unhandled exception in a connection handler is logged so, and is what
closes a connection with 1011), and the fuzzer's own invariants must hold.
"""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.profile import profile_config
from voiceagent.transports.server import VoiceAgentServer

pytestmark = [pytest.mark.models, pytest.mark.unpaced]

ROOT = Path(__file__).resolve().parents[2]
MESSAGES = 600


class _Errors(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(f"{record.name}: {record.getMessage()}")


def _healthz(port: int) -> tuple[int, str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as resp:
        return resp.status, resp.read().decode()


def test_fuzzer_run_no_crash_no_1011_errors_for_bad_messages_and_a_good_session_served(
    engines: Any, speech: dict[str, Path], run: Any, tmp_path: Path
) -> None:
    assert speech  # the good session's questions exist before the fuzzer looks for them
    config = profile_config({"server.port": "0", "server.max_sessions": "12"})
    errors = _Errors()
    logging.getLogger().addHandler(errors)

    async def scenario() -> tuple[int, str, tuple[int, str], int]:
        async with VoiceAgentServer(config, engines) as server:
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                *("-m", "benchmarks.fuzz"),
                *("--messages", str(MESSAGES), "--seed", "7", "--clients", "4"),
                *("--baseline-turns", "0", "--min-turns", "1"),
                # not the stalled readers (40-50 s each: tests/unit/test_keepalive.py covers them)
                *("--scenarios", "realtime_batch,twilio_call,raw_tcp,audio_burst,slow_reader"),
                *("--url", f"ws://127.0.0.1:{server.port}", "--out", str(tmp_path)),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                cwd=ROOT,
            )
            _, err = await proc.communicate()
            health = await asyncio.to_thread(_healthz, server.port)
            await asyncio.wait_for(server.wait_idle(), 30)  # every hostile session torn down, none hung
            left = len(server.sessions)
        assert proc.returncode is not None
        return proc.returncode, err.decode(), health, left

    try:
        code, stderr, health, left = run(scenario(), 150)
    finally:
        logging.getLogger().removeHandler(errors)
    report = json.loads((tmp_path / "fuzz.json").read_text())
    inv = report["invariants"]
    assert health == (200, "ok\n")
    assert left == 0
    assert errors.records == [], errors.records[:10]
    assert report["messages"]["hostile"] >= MESSAGES
    assert report["close_1011"] == 0, report["close_1011_samples"]
    rt = report["realtime"]
    assert rt["bad_messages"] > 0 and rt["missing_error"] == 0, rt["missing_samples"]
    assert report["twilio"]["bad_frames"] > 0 and report["twilio"]["not_refused"] == 0, report["twilio"]
    good = report["good_session"]["load"]
    assert good["turns"] >= 1 and good["ok"] == good["turns"], good
    assert inv == {k: True for k in inv}, (inv, stderr[-2000:])
    assert code == 0, stderr[-2000:]
