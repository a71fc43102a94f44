"""Many conversations at once, on the real packaged models over real loopback sockets.

The sessions ask *different* questions and their turns end at the same instant: each clip is
padded in front so that every user stops speaking at the same moment, then all are streamed at
real-time pace together.  With one shared llama.cpp context this aborted the process
(``GGML_ASSERT(logits != nullptr)``); each reply must now be about its own question.
"""

from __future__ import annotations

import asyncio
import contextlib
import http
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from tests.integration.rt_client import WIRE_RATE, Recorder, recording, send_paced, wire_audio
from tests.integration.test_network import http_get
from tests.ports import free_port
from tests.profile import profile_config
from voiceagent.admission import LoadMeter
from voiceagent.config import Config
from voiceagent.replay import speech_turns
from voiceagent.transports.server import VoiceAgentServer

pytestmark = pytest.mark.models

# fixture -> (words its transcript must contain, words of which its reply must contain one).
# Fixtures whose transcripts Whisper tiny gets right ("capital of France" is often heard as
# "capital and friends", which has nothing to do with concurrency).
QUESTIONS = {
    "long_question": (("london", "paris"), ("london", "paris", "train", "hour", "journey")),
    "colour": (("sky",), ("blue", "sky")),
    "weather": (("moon",), ("moon",)),
    "count": (("count",), ("one", "two", "three", "1", "2", "3")),
}


def _config(**overrides: str) -> Config:
    return profile_config({"server.port": "0", "server.max_sessions": "8", **overrides})


def _aligned(paths: list[Path], lead_s: float = 0.3) -> list[np.ndarray[Any, Any]]:
    """The clips at 24 kHz, padded in front so that their speech ends at the same sample."""
    clips = [wire_audio(p, tail_s=1.5) for p in paths]
    ends = [speech_turns(c, WIRE_RATE)[-1][1] for c in clips]
    latest = max(ends) + lead_s
    return [np.concatenate([np.zeros(int((latest - end) * WIRE_RATE), dtype=np.int16), c]) for c, end in zip(clips, ends, strict=True)]


async def _ask_together(server: VoiceAgentServer, speech: dict[str, Path], names: list[str]) -> list[dict[str, Any]]:
    conns = []
    for _ in names:
        ws = await connect(server.url + "?voiceagent_metrics=1", max_size=None)
        rec = Recorder(ws)
        conns.append((ws, rec, asyncio.create_task(rec.pump())))
    for _ws, rec, _task in conns:
        await rec.wait_for("session.created", 10)
    clips = _aligned([speech[n] for n in names])
    await asyncio.gather(*(send_paced(ws, clip, speed=1.0) for (ws, _r, _t), clip in zip(conns, clips, strict=True)))
    results = []
    for name, (_ws, rec, _task) in zip(names, conns, strict=True):
        done = await rec.wait_for("response.done", 60)
        transcript = (await rec.wait_for("conversation.item.input_audio_transcription.completed", 10))["transcript"]
        metrics = await rec.wait_for("voiceagent.turn_metrics", 10)
        reply = rec.done(done).text
        errors = rec.of("error")
        results.append({"name": name, "done": done, "reply": reply, "transcript": transcript, "metrics": metrics, "errors": errors})
    for ws, _rec, task in conns:
        await ws.close()
        await task
    return results


def _check(results: list[dict[str, Any]]) -> None:
    for r in results:
        heard_words, reply_words = QUESTIONS[r["name"]]
        transcript = r["transcript"].lower()
        assert all(w in transcript for w in heard_words), (r["name"], transcript)
        response = r["done"]["response"]
        assert response["status"] == "completed", (r["name"], response)
        reply = r["reply"].lower()
        assert any(w in reply for w in reply_words), (r["name"], transcript, reply)
        assert r["errors"] == [], r["errors"]
        assert r["metrics"]["sessions_active"] == len(results)
        assert r["metrics"]["llm_queue_ms"] is not None and r["metrics"]["llm_queue_ms"] >= 0


async def _still_serves(server: VoiceAgentServer) -> None:
    body = await asyncio.to_thread(lambda: urllib.request.urlopen(f"http://127.0.0.1:{server.port}/healthz", timeout=10).read())
    assert body == b"ok\n"
    async with connect(server.url) as ws:
        _rec, task = await recording(ws)
        await ws.close()
        await task


@pytest.mark.parametrize(
    "names", [["long_question", "weather"], ["long_question", "colour", "weather", "count"]], ids=["2-sessions", "4-sessions"]
)
def test_sessions_asking_different_questions_at_the_same_instant_each_get_their_own_answer(
    engines: Any, speech: dict[str, Path], run: Any, names: list[str]
) -> None:
    async def scenario() -> None:
        async with VoiceAgentServer(_config(), engines) as server:
            results = await _ask_together(server, speech, names)
            _check(results)
            await _still_serves(server)
            # Every LLM lease came back once the sessions closed.
            await server.wait_idle()
            await engines.llm.aclose()
            assert engines.llm.stats().busy == 0

    run(scenario(), 180)


def test_past_capacity_a_connection_is_refused_and_the_session_in_progress_goes_on(engines: Any, speech: dict[str, Path], run: Any) -> None:
    async def scenario() -> None:
        async with VoiceAgentServer(_config(**{"server.max_sessions": "1"}), engines) as server:
            ws = await connect(server.url, max_size=None)
            rec, task = await recording(ws)
            with pytest.raises(InvalidStatus) as refused:
                await connect(server.url)
            response = refused.value.response
            assert response.status_code == http.HTTPStatus.SERVICE_UNAVAILABLE
            assert response.headers["Retry-After"] == "5"
            assert b"server.max_sessions" in response.body
            # The admitted session is unaffected: it still gets its spoken turn answered.
            await send_paced(ws, wire_audio(speech["capital"], tail_s=1.0), speed=1.0)
            done = await rec.wait_for("response.done", 60)
            assert done["response"]["status"] == "completed"
            await ws.close()
            await task
            await server.wait_idle()
            async with connect(server.url) as again:  # the place is free again
                await again.recv()
        assert server.metrics.sessions_refused == 1

    run(scenario(), 120)


def test_a_burst_of_handshakes_cannot_pass_the_limit(engines: Any, run: Any) -> None:
    """Places are reserved at the handshake: six clients connecting at once to a server with room
    for two get two sessions and four refusals, and the places come back when they close."""

    async def scenario() -> None:
        async with VoiceAgentServer(_config(**{"server.max_sessions": "2"}), engines) as server:
            attempts = await asyncio.gather(*(connect(server.url) for _ in range(6)), return_exceptions=True)
            admitted = [a for a in attempts if not isinstance(a, BaseException)]
            refused = [a for a in attempts if isinstance(a, InvalidStatus)]
            assert len(admitted) == 2 and len(refused) == 4, attempts
            assert all(r.response.status_code == http.HTTPStatus.SERVICE_UNAVAILABLE for r in refused)
            for ws in admitted:
                await ws.close()
            await server.wait_idle()
            async with connect(server.url) as again:
                assert '"session.created"' in str(await again.recv())

    run(scenario(), 60)


async def _agent_says(port: int) -> str:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    line = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    return line.decode()


def test_the_measured_load_refuses_new_sessions_and_tells_the_balancer(engines: Any, run: Any) -> None:
    """With no ``server.max_sessions`` the load decides: busy cores refuse a new connection (503,
    ``Retry-After``), ``/readyz`` answers 503 ``full`` and HAProxy's agent ``drain``, the open
    session goes on; when the load falls all three take sessions again.  The meter's CPU clock is
    the seam: the cores cannot be made exactly 90 % busy on demand."""
    clock = {"wall": 100.0, "cpu": 10.0}
    meter = LoadMeter(cores=2, budget_ms=2500, first_turn_s=0.0, wall=lambda: clock["wall"], cpu=lambda: clock["cpu"])

    def busy(seconds: float, share: float) -> None:
        clock["wall"] += seconds
        clock["cpu"] += seconds * share * 2
        meter.sample()

    async def scenario() -> None:
        config = _config(**{"server.max_sessions": "0", "server.agent_port": str(free_port())})
        async with VoiceAgentServer(config, engines, load=meter) as server:
            base = f"http://127.0.0.1:{server.port}"
            meter.sample()
            first = await connect(server.url)
            assert '"session.created"' in str(await first.recv())
            busy(10, 0.9)
            with pytest.raises(InvalidStatus) as refused:
                await connect(server.url)
            response = refused.value.response
            assert response.status_code == http.HTTPStatus.SERVICE_UNAVAILABLE
            assert response.headers["Retry-After"] == "5"
            assert b"server busy: load 0.90" in response.body
            assert await asyncio.to_thread(http_get, base + "/readyz") == (503, "full load=0.90\n")
            assert await _agent_says(server.agent_port) == "drain\n"
            metrics = (await asyncio.to_thread(http_get, base + "/metrics"))[1]
            assert 'voiceagent_sessions_refused_total{reason="load"} 1.0' in metrics
            assert 'voiceagent_load{measure="cpu"} 0.9' in metrics
            assert "voiceagent_accepting_sessions 0.0" in metrics
            load_only = (await asyncio.to_thread(http_get, base + "/metrics?name[]=voiceagent_load"))[1]
            assert 'voiceagent_load{measure="cpu"} 0.9' in load_only and "voiceagent_sessions_refused_total" not in load_only
            await first.send('{"type": "session.update", "session": {"instructions": "Be brief."}}')
            assert '"session.updated"' in str(await asyncio.wait_for(first.recv(), 10))  # the open one goes on
            busy(20, 0.0)
            assert await asyncio.to_thread(http_get, base + "/readyz") == (200, "ready load=0.00\n")
            assert await _agent_says(server.agent_port) == "ready up 100%\n"
            async with connect(server.url) as second:
                assert '"session.created"' in str(await second.recv())
            await first.close()

    run(scenario(), 60)


def test_sessions_not_heard_yet_count_at_their_expected_cost_and_heard_ones_by_the_measured_load(engines: Any, run: Any) -> None:
    """Two open sessions that have not talked fill the load (each expected at 0.3 of the cores),
    so a third is refused; once both have had a turn answered, their cost is what the CPU shows
    (idle here) and the third is admitted.  The turns are reported where a session's reporter
    reports their first audio (``Metrics.first_audio`` with its id): a spoken turn would only add time."""
    clock = {"wall": 100.0, "cpu": 10.0}
    # 12 CPU-s a turn, one turn per 20 s on 2 cores: 0.3 a session.
    meter = LoadMeter(cores=2, budget_ms=2500, first_turn_s=12.0, wall=lambda: clock["wall"], cpu=lambda: clock["cpu"])

    async def scenario() -> None:
        config = _config(**{"server.max_sessions": "0"})
        async with VoiceAgentServer(config, engines, load=meter) as server:
            meter.sample()
            first = await connect(server.url)
            second = await connect(server.url)  # 0 + 1 × 0.3 + 0.3 = 0.6
            for ws in (first, second):
                assert '"session.created"' in str(await ws.recv())
            with pytest.raises(InvalidStatus) as refused:  # 0 + 2 × 0.3 + 0.3 = 0.9
                await connect(server.url)
            assert b"(2 not heard yet)" in refused.value.response.body
            for session in list(server.sessions):
                server.metrics.first_audio(session.id, 700.0)
            clock["wall"] += 1.0
            meter.sample()
            async with connect(server.url) as third:  # 0 + 0 + 0.3
                assert '"session.created"' in str(await third.recv())
            await first.close()
            await second.close()

    run(scenario(), 60)


async def _story_under_way(talker: Recorder) -> None:
    """Ask ``talker``'s session for a long story in text; return once its first audio arrived."""
    await talker.ws.send(
        '{"type": "conversation.item.create", "item": {"type": "message", "role": "user", '
        '"content": [{"type": "input_text", "text": "Tell me a long story about a brave little dragon."}]}}'
    )
    await talker.ws.send('{"type": "response.create"}')
    await talker.wait_for("response.output_audio.delta", 60)


def test_a_session_whose_reply_is_being_heard_counts_by_the_measured_load(engines: Any, run: Any) -> None:
    """From its first reply audio a session's turn is in the measured CPU share, so it no longer
    counts at its expected cost while the rest of the reply plays: with two open sessions (each
    expected at 0.3 of the cores), one of them hearing its first reply, a third is admitted (0 + 1
    × 0.3 + 0.3 = 0.6); counted until the reply ended it would be refused (0.9)."""
    clock = {"wall": 100.0, "cpu": 10.0}
    meter = LoadMeter(cores=2, budget_ms=2500, first_turn_s=12.0, wall=lambda: clock["wall"], cpu=lambda: clock["cpu"])

    async def scenario() -> None:
        config = _config(**{"server.max_sessions": "0", "llm.max_tokens": "120"})
        async with VoiceAgentServer(config, engines, load=meter) as server:
            meter.sample()
            async with connect(server.url) as first, connect(server.url) as second:
                talker, pump = await recording(first, 60)
                assert '"session.created"' in str(await second.recv())
                await _story_under_way(talker)
                assert not talker.of("response.done")  # still playing: no turn has been answered
                async with connect(server.url) as third:
                    assert '"session.created"' in str(await third.recv())
                pump.cancel()

    run(scenario(), 90)


def test_a_caller_who_hangs_up_mid_reply_leaves_its_place_at_once(engines: Any, run: Any) -> None:
    """A session whose client has gone no longer counts, although the server may still be
    cancelling its reply: a caller who hangs up in the middle of a story and dials again at once
    is admitted by a meter that refuses any second session (40 CPU-s a turn: 1.0 of the cores a
    session).  Counted until its reply was cancelled, the first session refused the second call
    (the interruption bench's sequential cases met that 503)."""
    clock = {"wall": 100.0, "cpu": 10.0}
    meter = LoadMeter(cores=2, budget_ms=2500, first_turn_s=40.0, wall=lambda: clock["wall"], cpu=lambda: clock["cpu"])

    async def scenario() -> None:
        config = _config(**{"server.max_sessions": "0", "llm.max_tokens": "120"})
        async with VoiceAgentServer(config, engines, load=meter) as server:
            meter.sample()
            for _ in range(3):
                async with connect(server.url) as caller:
                    talker, pump = await recording(caller, 60)
                    with pytest.raises(InvalidStatus):  # the meter admits one session at a time
                        await connect(server.url)
                    await _story_under_way(talker)
                    pump.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await pump
                # Hung up mid-story; the next loop's call comes at once.

    run(scenario(), 120)


def test_no_llama_sampler_outlives_its_generation(engines: Any, run: Any) -> None:
    """llama-cpp-python's per-generation sampler sits in a reference cycle; the context frees it as
    the generation ends (finished or closed early), else each turn leaked ~1.8 MB (the soak's RSS)."""
    import gc

    from llama_cpp._internals import LlamaSampler

    from voiceagent.backends.protocols import LlmRequest, is_piece
    from voiceagent.tools.spec import Message

    def alive() -> int:
        return sum(isinstance(o, LlamaSampler) for o in gc.get_objects())

    async def scenario() -> None:
        gc.collect()
        before = alive()
        gc.disable()  # only what the context frees itself may count
        try:
            for stop_after in (None, 2, None, 1):
                request = LlmRequest(key="sampler", messages=[Message("user", "Say hello.")], max_tokens=8, temperature=0.0)
                pieces = engines.llm.generate(request)
                n = 0
                async for piece in pieces:
                    if not is_piece(piece):
                        continue
                    n += 1
                    if stop_after is not None and n >= stop_after:
                        break
                await pieces.aclose()
            await engines.llm.aclose()  # every lease back: each closed generator was closed in the engine
            assert engines.llm.stats().busy == 0
            assert alive() <= before, (alive(), before)
        finally:
            gc.enable()

    run(scenario(), 60)


def test_two_sessions_asking_at_once_each_get_the_sentence_end_verdict_on_their_own_words(engines: Any, run: Any) -> None:
    """turn.text_threshold on the real model: two conversations start answering at the same
    instant, each asking how likely its user's sentence ends where their words end; each verdict
    and each answer belongs to its own words (a context shared between them would mix both)."""
    import contextlib

    from voiceagent.backends.protocols import EndProbability, LlmRequest, is_piece
    from voiceagent.tools.spec import Message

    system = Message("system", profile_config().llm.instructions)

    async def answer(key: str, text: str) -> tuple[list[float], str, bool]:
        """(the verdicts told, the answer, whether the verdict came before the first piece)"""
        told: list[float] = []
        request = LlmRequest(key=key, messages=[system, Message("user", text)], max_tokens=16, temperature=0.0, end_probability=True)
        before = False
        pieces_seen: list[str] = []
        async with contextlib.aclosing(engines.llm.generate(request)) as pieces:
            async for piece in pieces:
                if isinstance(piece, EndProbability):
                    told.append(piece.p)
                if not is_piece(piece):
                    continue
                if not pieces_seen:
                    before = bool(told)
                pieces_seen.append(piece if isinstance(piece, str) else "")
        return told, "".join(pieces_seen), before

    async def scenario() -> list[tuple[list[float], str, bool]]:
        return list(await asyncio.gather(answer("end-a", "How many wheels?"), answer("end-b", "What color is the sky on a clear day?")))

    (half, _, half_before), (whole, sky, whole_before) = run(scenario(), 120)
    assert len(half) == 1 and len(whole) == 1 and half_before and whole_before
    # The final "?" is left out: as words, "How many wheels" goes on; the other question is whole.
    assert half[0] < 0.003 < whole[0], (half, whole)
    assert "blue" in sky.lower(), sky


def test_a_prefilled_turn_pays_only_for_its_last_words_while_another_session_answers(engines: Any, run: Any) -> None:
    """llm.prefill on the real model: one conversation's words so far are evaluated while another
    conversation is being answered at the same instant; its turn then reuses them, and each
    answer is about its own question."""
    import contextlib

    from voiceagent.backends.protocols import LlmRequest, Usage
    from voiceagent.tools.spec import Message

    system = Message("system", profile_config().llm.instructions)
    # Words no other test uses: the context holds nothing of them but what the prefill puts there.
    question = "How long does it take to walk from the old mill to the harbour of Lisbon?"

    async def answer(key: str, text: str, usage: list[Usage] | None = None) -> str:
        """The reply's text; its :class:`Usage` item is appended to ``usage``."""
        request = LlmRequest(key=key, messages=[system, Message("user", text)], max_tokens=24, temperature=0.0)
        out = ""
        async with contextlib.aclosing(engines.llm.generate(request)) as pieces:
            async for p in pieces:
                if isinstance(p, Usage) and usage is not None:
                    usage.append(p)
                elif isinstance(p, str):
                    out += p
        return out

    async def scenario() -> tuple[str, str, int, Usage]:
        heard = [system, Message("user", "How long does it take to walk from the old mill to the harbour of")]
        other, prefilled = await asyncio.gather(
            answer("prefill-b", "What color is the sky on a clear day?"), engines.llm.prefill("prefill-a", heard)
        )
        usages: list[Usage] = []
        mine = await answer("prefill-a", question, usages)
        await engines.llm.aclose()
        assert engines.llm.stats().busy == 0
        (usage,) = usages
        return mine, other, prefilled, usage

    mine, other, prefilled, usage = run(scenario(), 120)
    assert prefilled >= 10, prefilled  # the user's words so far (the system prompt was cached already)
    assert usage.prompt_tokens is not None and usage.reused_tokens is not None
    # Left for the turn: " Lisbon?" and the chat template's closing tokens.
    assert usage.prompt_tokens - usage.reused_tokens <= 12, usage
    assert "blue" in other.lower(), other
    assert {"walk", "minute", "minutes", "hour", "hours", "mill", "harbour", "harbor", "lisbon"} & set(
        mine.lower().replace(".", " ").replace(",", " ").split()
    ), mine
