"""What the server shows of itself, and what a vanished client leaves behind, with the real models
over real sockets: ``/metrics`` (parsed by prometheus-client's own parser), the per-turn JSON log
line, OpenTelemetry spans, and the task, thread and session counts after a client drops mid-reply."""

from __future__ import annotations

import asyncio
import collections
import gc
import json
import logging
import threading
import weakref
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from tests.faults import Faults, inject
from tests.integration.rt_client import recording, scrape, send_paced, wire_audio
from tests.profile import profile_config
from voiceagent.backends.batch_engine import BatchedEngine
from voiceagent.backends.llm_pool import LlmPool
from voiceagent.session import QUEUES
from voiceagent.transports.server import VoiceAgentServer

pytestmark = pytest.mark.models

TOKEN = "observability-token"
TRACING = {"workflow_name": "support line", "group_id": "call-42", "metadata": {"caller": "+15550100"}}


@pytest.fixture(scope="module")
def spans() -> InMemorySpanExporter:
    """The process's tracer provider, with an in-memory exporter (set once: the API allows one)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    return exporter


def test_metrics_turn_log_and_spans_describe_a_good_turn_a_failed_one_and_a_refusal(
    engines: Any, speech: dict[str, Path], run: Any, caplog: pytest.LogCaptureFixture, spans: InMemorySpanExporter
) -> None:
    faults = Faults()
    config = profile_config({"server.port": "0", "server.auth_tokens": TOKEN})
    caplog.set_level(logging.INFO, logger="voiceagent.session")

    async def main() -> tuple[dict[str, float], dict[str, float]]:
        async with VoiceAgentServer(config, inject(engines, faults)) as server:
            with pytest.raises(InvalidStatus):
                await connect(server.url)  # no token: 401
            ws = await connect(server.url, additional_headers={"Authorization": f"Bearer {TOKEN}"}, max_size=None)
            rec, pump = await recording(ws)
            # session.tracing labels the turns' log lines and spans (and goes nowhere else).
            await ws.send(json.dumps({"type": "session.update", "session": {"type": "realtime", "tracing": TRACING}}))
            updated = await rec.wait_for("session.updated", 10)
            assert updated["session"]["tracing"] == TRACING
            await send_paced(ws, wire_audio(speech["weather"], tail_s=1.0))
            done = await rec.wait_for("response.done", 60)
            assert done["response"]["status"] == "completed", done
            faults.arm("llm")
            mark = len(rec.events)
            await ws.send(json.dumps({"type": "response.create"}))
            failed = await rec.wait_for("response.done", 60, start=mark)
            assert failed["response"]["status"] == "failed", failed
            mark = len(rec.events)
            await ws.send("{not json")  # a protocol error, answered by the transport itself
            await rec.wait_for("error", 10, start=mark)
            during = await asyncio.to_thread(scrape, server.port)
            await ws.close()
            await pump
            await server.wait_idle()
            after = await asyncio.to_thread(scrape, server.port)
            return during, after

    during, after = run(main(), 180)
    # Sessions: one open while it talked, none after; the token-less handshake refused as such.
    assert during["voiceagent_sessions_active"] == 1 and after["voiceagent_sessions_active"] == 0
    assert during["voiceagent_sessions_total"] == 1
    assert during['voiceagent_sessions_refused_total{reason="unauthorized"}'] == 1
    assert during['voiceagent_sessions_refused_total{reason="capacity"}'] == 0
    # Turns by status, errors by code.
    assert during['voiceagent_turns_total{status="completed"}'] == 1
    assert during['voiceagent_turns_total{status="failed"}'] == 1
    assert during['voiceagent_errors_total{code="llm_failed"}'] == 1
    assert during['voiceagent_errors_total{code="invalid_json"}'] == 1
    # Every span of the turn timeline is a histogram; the spoken turn is in each of them.
    for mark in ("vad_stop", "transcript_final", "llm_first_token", "first_clause", "tts_first_audio", "first_audio_sent"):
        assert during[f'voiceagent_span_seconds_count{{mark="{mark}"}}'] == 1, mark
    # In seconds (the turn log below has the same span in milliseconds); no bound on it: a loaded
    # CI machine has taken 15 s over this turn.
    first_audio_s = during['voiceagent_span_seconds_sum{mark="first_audio_sent"}']
    assert first_audio_s > 0
    # Queue depths (every queue, summed over sessions) and waits; the LLM's tokens and speed.
    for queue in QUEUES:
        assert f'voiceagent_queue_depth{{queue="{queue}"}}' in during, queue
    assert during['voiceagent_queue_wait_seconds_count{queue="vad"}'] > 10  # one per audio frame
    engine = engines.llm.name
    assert during[f'voiceagent_llm_turn_tokens_total{{engine="{engine}",kind="generated"}}'] > 1
    assert during[f'voiceagent_llm_tokens_per_second_count{{engine="{engine}"}}'] == 1
    assert during[f'voiceagent_llm_slots{{engine="{engine}",state="busy"}}'] == 0
    assert 0 <= during[f'voiceagent_llm_prompt_tokens_total{{engine="{engine}",kind="prefilled"}}'] <= engines.llm.stats().prefilled_tokens

    # One JSON line per turn: the timeline, tokens, models, the engine and the generation.
    turns = [json.loads(r.getMessage()) for r in caplog.records if r.getMessage().startswith('{"event": "turn"')]
    assert [t["status"] for t in turns] == ["completed", "failed"]
    good = turns[0]
    assert good["spans_ms"]["first_audio_sent"] == pytest.approx(first_audio_s * 1000, abs=1)
    assert good["tokens"]["generated"] > 1 and good["tokens"]["prompt"] > good["tokens"]["generated"]
    assert good["tokens_per_s"] > 0
    assert good["models"]["llm"] == engines_model(engines) and good["models"]["stt"]
    assert good["llm_engine"] == engine and good["llm_route"] == "primary"
    assert isinstance(good["generation"], int) and turns[1]["generation"] > good["generation"]
    assert "text" not in good  # transcripts stay out of logs by default
    assert [t["tracing"] for t in turns] == [{"auto": False, **TRACING}] * 2

    # OpenTelemetry: a span per turn, marks as events, a child span per stage.
    finished = spans.get_finished_spans()
    turn_spans = [s for s in finished if s.name == "voiceagent.turn"]
    assert [s.attributes["voiceagent.status"] for s in turn_spans] == ["completed", "failed"]  # type: ignore[index]
    spoken = turn_spans[0]
    assert spoken.attributes is not None
    assert spoken.attributes["voiceagent.tracing.workflow_name"] == "support line"
    assert spoken.attributes["voiceagent.tracing.group_id"] == "call-42"
    assert spoken.attributes["voiceagent.tracing.metadata.caller"] == "+15550100"
    assert "first_audio_sent" in [e.name for e in spoken.events]
    children = {s.name for s in finished if s.parent is not None and s.parent.span_id == spoken.context.span_id}
    assert {"voiceagent.stt", "voiceagent.llm", "voiceagent.tts"} <= children


def model_threads() -> list[str]:
    """The threads but asyncio's default executor's (it grows on demand, up to its bound, with any
    ``to_thread`` call in the process)."""
    return sorted(t.name for t in threading.enumerate() if not t.name.startswith("asyncio_"))


def engines_model(engines: Any) -> str:
    return str(engines.llm.model) if isinstance(engines.llm, LlmPool | BatchedEngine) else ""


def test_a_client_that_vanishes_mid_reply_leaves_no_task_thread_session_or_context_behind(
    engines: Any, speech: dict[str, Path], run: Any
) -> None:
    config = profile_config({"server.port": "0"})
    pool = engines.llm
    assert isinstance(pool, LlmPool | BatchedEngine)

    async def turn(server: VoiceAgentServer, vanish: bool, stop_reading: bool = False) -> weakref.ref[Any]:
        ws = await connect(server.url, max_size=None, max_queue=1 if stop_reading else 16)
        rec, pump = await recording(ws)
        session = weakref.ref(next(iter(server.sessions)))
        await send_paced(ws, wire_audio(speech["weather"], tail_s=1.0))
        if not vanish:
            await rec.wait_for("response.done", 60)
            await ws.close()
            await pump
            return session
        await rec.wait_for("response.output_audio.delta", 60)
        if stop_reading:
            pump.cancel()  # a slow reader: nothing reads the socket any more ...
            await asyncio.gather(pump, return_exceptions=True)
        ws.transport.abort()  # ... then the client is gone: no close frame, the TCP connection reset
        await asyncio.gather(pump, return_exceptions=True)
        return session

    async def main() -> None:
        async with VoiceAgentServer(config, engines) as server:
            await turn(server, vanish=False)  # every executor thread exists from here on
            await server.wait_idle()
            tasks, threads = len(asyncio.all_tasks()), model_threads()
            ended = sum(pool.finished.values())
            refs: list[Any] = []
            for stop_reading in (False, True, False):
                session = await turn(server, vanish=True, stop_reading=stop_reading)
                # The server notices at once (not at a ping timeout) and closes the session.
                await asyncio.wait_for(server.wait_idle(), 10)
                await asyncio.wait_for(pool.drained(), 10)
                assert server.metrics.sessions_active == 0 and not server.sessions
                assert len(asyncio.all_tasks()) == tasks
                # No thread added (one left by an earlier test of this worker may end meanwhile).
                assert not collections.Counter(model_threads()) - collections.Counter(threads)
                assert pool.stats().busy == 0 and pool.stats().waiting == 0
                refs.append(session)
            # The sessions, their queues and audio buffers are freed.  The one closed last may still
            # be reachable from a thread's last work until other work replaces it; never two.
            gc.collect()
            assert [r() is None for r in refs[:-1]] == [True, True]
            # Each generation ended once in the engine (stopped there if it was still running).
            assert sum(pool.finished.values()) == ended + 3

    run(main(), 240)
