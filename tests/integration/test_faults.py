"""Every backend failing mid-turn, through the real server with the real models (the fault
injector of tests/faults.py wraps them): the client hears of it, and the next turn works."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import connect

from tests.faults import Faults, inject
from tests.integration.rt_client import recording, send_paced, wire_audio
from tests.profile import profile_config
from tests.strict import check_server_event
from voiceagent.transports.server import VoiceAgentServer

pytestmark = pytest.mark.models


@pytest.mark.parametrize(("kind", "after"), [("vad", 0), ("stt", 0), ("turn", 0), ("llm", 0), ("llm", 2), ("tts", 0), ("tts", 1)])
def test_a_backend_failing_mid_turn_is_reported_and_the_next_turn_works(
    kind: str, after: int, engines: Any, speech: dict[str, Path], run: Any
) -> None:
    faults = Faults()
    faulty = inject(engines, faults)
    # The turn model runs only when its answer could come before the silence fallback's: with
    # the default 500 ms fallback this machine skips it, so its case waits longer for silence
    # (4 s: under a parallel test run the measured time to a first audio is longer, and 2 s once
    # left the model skipped and the fault never reached).
    silence = {"turn.silence_ms": "4000"} if kind == "turn" else {}
    config = profile_config({"server.port": "0", **silence})

    async def main() -> list[dict[str, Any]]:
        async with VoiceAgentServer(config, faulty) as server:
            ws = await connect(server.url, max_size=None)
            rec, pump = await recording(ws)
            faults.arm(kind, after=after)
            await send_paced(ws, wire_audio(speech["weather"], tail_s=1.5))
            error = await rec.wait_for("error", 60)
            assert error["error"]["code"] == f"{kind}_failed", error
            assert faults.fired[kind] == 1
            if kind == "stt":
                # The item whose transcription failed is named (before the error), and validates
                # as the openai package's type.
                failed_stt = rec.of("conversation.item.input_audio_transcription.failed")
                assert len(failed_stt) == 1, [e["type"] for e in rec.events]
                assert failed_stt[0]["item_id"] in {e["item_id"] for e in rec.of("input_audio_buffer.speech_started")}
                assert failed_stt[0]["error"]["code"] == "stt_failed"
                assert check_server_event(failed_stt[0]) is None
            # A fault in one VAD window or one decode may leave the turn itself answered: let any
            # reply of the first turn end, so the second question does not barge in on it.
            while len(rec.of("response.done")) < len(rec.of("response.created")):
                last = max((i for i, e in enumerate(rec.events) if e["type"] == "response.done"), default=-1)
                await rec.wait_for("response.done", 60, start=last + 1)
            failed = [e for e in rec.of("response.done") if e["response"]["status"] == "failed"]
            mark = len(rec.events)
            # Silence is audio time: enough of it must follow for the fallback to end the turn.
            await send_paced(ws, wire_audio(speech["weather"], tail_s=4.5 if silence else 0.5))
            done = await rec.wait_for("response.done", 60, start=mark)
            assert done["response"]["status"] == "completed", done
            assert (
                "moon"
                in (await rec.wait_for("conversation.item.input_audio_transcription.completed", 10, start=mark))["transcript"].lower()
            )
            await ws.close()
            await pump
            await server.wait_idle()
            return failed

    failed = run(main(), 180)
    if kind in ("llm", "tts"):  # the failure hit a response: it ends failed, not silently
        assert len(failed) == 1, failed
