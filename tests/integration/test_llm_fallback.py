"""The LLM circuit breaker against a real OpenAI-compatible server (llama.cpp's, on loopback) with
the embedded model as the fallback: a server stopped mid-conversation, and a slow one; and with
the in-process engine as the primary and a second in-process pool as the fallback."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
from typing import Any

import pytest
from websockets.asyncio.client import connect

from tests.faults import Faults, FaultyLlm
from tests.integration.llm_server import LlamaCppServer, SlowProxy
from tests.integration.rt_client import recording, scrape
from tests.llm_stream import text_and_routes
from tests.profile import profile_config
from voiceagent.backends.batch_engine import BatchedEngine
from voiceagent.backends.fallback import BreakerState, FallbackLlm
from voiceagent.backends.llm_pool import LlmPool
from voiceagent.backends.openai_llm import OpenAiLlm
from voiceagent.backends.protocols import LlmRequest, is_piece
from voiceagent.backends.registry import load_llm
from voiceagent.tools.spec import Message
from voiceagent.transports.server import VoiceAgentServer

pytestmark = pytest.mark.models


class Clock:
    """The breaker's clock, moved by the test (its reset period is not waited out)."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_a_server_stopped_mid_conversation_hands_its_turns_to_the_fallback_until_a_probe_succeeds(engines: Any, run: Any) -> None:
    llm_server = LlamaCppServer().start()
    clock = Clock()
    # 30 s for a first token: this test is about a server that is gone, which fails at once.  The
    # restarted server evaluates the whole conversation cold, and under a loaded suite that once
    # took more than 10 s, so the probe was judged slow and the fallback answered it.
    primary = OpenAiLlm(llm_server.base_url, "qwen", first_token_timeout_s=30.0)
    llm = FallbackLlm(primary, engines.llm, first_token_budget_s=30.0, failures=2, reset_s=30.0, clock=clock)
    config = profile_config({"server.port": "0", "llm.backend": "openai"})
    mixed = dataclasses.replace(engines, llm=llm)
    # (question, a word the reply must contain, the engine that must answer, why)
    script = [
        ("What is the capital of France?", "paris", "openai", "primary"),
        ("STOP", "", "", ""),
        ("What is the capital of Italy?", "rome", "llama_cpp", "primary_failed"),
        ("What is the capital of Spain?", "madrid", "llama_cpp", "primary_failed"),
        ("What is the capital of Germany?", "berlin", "llama_cpp", "breaker_open"),
        ("RESTART", "", "", ""),
        ("What is the capital of Japan?", "tokyo", "openai", "probe"),
        ("What is the capital of England?", "london", "openai", "primary"),
    ]

    async def main() -> str:
        async with VoiceAgentServer(config, mixed) as server:
            ws = await connect(server.url + "?voiceagent_metrics=1", max_size=None)
            rec, task = await recording(ws)
            for question, word, engine, why in script:
                if question == "STOP":
                    await asyncio.to_thread(llm_server.kill)  # the LLM server goes away mid-conversation
                    continue
                if question == "RESTART":
                    await asyncio.to_thread(llm_server.start)
                    clock.t += 30.0  # the breaker's reset period has passed
                    continue
                mark = len(rec.events)
                item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": question}]}
                await ws.send(json.dumps({"type": "conversation.item.create", "item": item}))
                await ws.send(json.dumps({"type": "response.create"}))
                done = await rec.wait_for("response.done", 60, start=mark)
                metrics = await rec.wait_for("voiceagent.turn_metrics", 10, start=mark)
                reply = rec.done(done).text.lower()
                assert done["response"]["status"] == "completed", (question, done)
                assert (metrics["llm_engine"], metrics["llm_route"]) == (engine, why), (question, metrics)
                assert word in reply, (question, engine, reply)
            assert rec.of("error") == []  # every turn was answered: no failed response reached the client
            body = await asyncio.to_thread(scrape, server.port)
            await ws.close()
            await task
        await llm.aclose()
        return body

    try:
        exposition = run(main(), 300)
    finally:
        llm_server.stop()
    assert exposition['voiceagent_llm_answers_total{engine="llama_cpp",reason="primary_failed"}'] == 2
    assert exposition['voiceagent_llm_answers_total{engine="llama_cpp",reason="breaker_open"}'] == 1
    assert exposition['voiceagent_llm_answers_total{engine="openai",reason="probe"}'] == 1
    assert exposition['voiceagent_llm_answers_total{engine="openai",reason="primary"}'] == 2
    assert exposition['voiceagent_llm_breaker_open{engine="openai",state="closed"}'] == 0


def test_a_server_slower_than_the_first_token_budget_is_aborted_and_the_fallback_answers(engines: Any, run: Any) -> None:
    llm_server = LlamaCppServer().start()
    clock = Clock()
    system = Message("system", "You are a helpful assistant. Answer briefly.")

    async def main() -> list[tuple[str, str]]:
        routes: list[tuple[str, str]] = []

        async def ask(llm: FallbackLlm, question: str, max_tokens: int, keep: int) -> str:
            request = LlmRequest("slow", [system, Message("user", question)], max_tokens, 0.0)
            text, told = await text_and_routes(llm, request, keep)
            routes.extend(told)
            return text.lower()

        # The proxy holds the server's answer back far beyond the budget.
        async with SlowProxy(llm_server.port, delay_s=60.0) as proxy:
            primary = OpenAiLlm(proxy.base_url, "qwen", first_token_timeout_s=120.0)
            llm = FallbackLlm(primary, engines.llm, first_token_budget_s=0.5, failures=1, reset_s=30.0, clock=clock)
            counting = await ask(llm, "Count from one to three hundred in words, separated by commas.", 600, keep=6)
            assert "one" in counting, counting
            # The primary's request was given up on the wire: its connection was closed by our side
            # while the server was still answering (how an HTTP server learns to abort).
            await asyncio.wait_for(proxy.closed_event.wait(), 10)
            assert proxy.client_closed == 1
            assert llm.breaker.state is BreakerState.OPEN  # one late turn opens it (failures=1)
            assert "paris" in await ask(llm, "What is the capital of France?", 30, keep=100)
            # The server is quick again; after the reset period the probe goes to it and succeeds.
            # The budget was short so that the held-back answer was given up at once; the probe's
            # first token only has to come (a loaded machine took the real server past 0.5 s).
            proxy.delay_s = 0.0
            llm.first_token_budget_s = 30.0
            clock.t += 30.0
            assert "rome" in await ask(llm, "What is the capital of Italy?", 30, keep=100)
            assert llm.breaker.state is BreakerState.CLOSED
            await llm.aclose()
        return routes

    try:
        routes = run(main(), 240)
    finally:
        llm_server.stop()
    assert routes == [("llama_cpp", "first_token_budget"), ("llama_cpp", "breaker_open"), ("openai", "probe")]


def test_an_in_process_primary_hands_failed_and_late_turns_to_a_second_pool_and_a_barge_in_aborts_it(engines: Any, run: Any) -> None:
    """``llm.backend = "llama_cpp"`` with ``llm.fallback = "llama_cpp"``: the real in-process pool
    (one context) behind the breaker, a second real pool as the fallback.  A model failure (the
    fault injector) and a turn that waits past its budget because the primary's only context is
    busy both go to the fallback; a barge-in closes the primary's generation inside the engine."""
    one = {"llm.contexts": "1", "llm.sequences": "1", "llm.fallback_contexts": "1"}  # one conversation at a time in each
    config = profile_config({"server.port": "0", "llm.fallback": "llama_cpp", **one})
    llm, pools = load_llm(config)
    assert isinstance(llm, FallbackLlm) and len(pools) == 2 and {type(p) for p in pools} <= {LlmPool, BatchedEngine}
    primary_pool, fallback_pool = pools
    assert (llm.primary.name, llm.fallback.name) == ("llama_cpp", "llama_cpp_fallback")
    clock = Clock()
    faults = Faults()
    # The budget is a guard sized for a loaded machine: the late turn waits on a held context for
    # as long as it takes, while a cold prompt's first token took over 3 s beside a busy suite (the
    # probe then went to the fallback and the test failed).
    llm = FallbackLlm(FaultyLlm(primary_pool, faults), fallback_pool, first_token_budget_s=12.0, failures=2, reset_s=30.0, clock=clock)
    llm.prime([Message("system", config.llm.instructions), Message("user", "Hello.")])
    mixed = dataclasses.replace(engines, llm=llm)
    hold = asyncio.Event()
    holding = asyncio.Event()

    async def hold_the_only_primary_context() -> None:
        request = LlmRequest("someone-else", [Message("user", "Count from one to one hundred.")], 200, 0.0)
        async with contextlib.aclosing(primary_pool.generate(request)) as pieces:
            async for piece in pieces:
                if not is_piece(piece):
                    continue
                holding.set()
                await hold.wait()
                return

    async def main() -> None:
        async with VoiceAgentServer(config, mixed) as server:
            ws = await connect(server.url + "?voiceagent_metrics=1", max_size=None)
            rec, task = await recording(ws)

            async def ask(question: str) -> tuple[dict[str, Any], dict[str, Any]]:
                mark = len(rec.events)
                item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": question}]}
                await ws.send(json.dumps({"type": "conversation.item.create", "item": item}))
                await ws.send(json.dumps({"type": "response.create"}))
                done = await rec.wait_for("response.done", 60, start=mark)
                return done, await rec.wait_for("voiceagent.turn_metrics", 10, start=mark)

            async def answered(question: str, word: str, engine: str, why: str) -> None:
                done, metrics = await ask(question)
                reply = rec.done(done).text.lower()
                assert done["response"]["status"] == "completed", (question, done)
                assert (metrics["llm_engine"], metrics["llm_route"]) == (engine, why), (question, metrics)
                assert word in reply, (question, engine, reply)

            await answered("What is the capital of France?", "paris", "llama_cpp", "primary")
            faults.arm("llm")  # the in-process model raises before its first token
            await answered("What is the capital of Italy?", "rome", "llama_cpp_fallback", "primary_failed")
            holder = asyncio.create_task(hold_the_only_primary_context())
            await holding.wait()
            await answered("What is the capital of Spain?", "madrid", "llama_cpp_fallback", "first_token_budget")
            hold.set()
            await holder
            assert llm.breaker.state is BreakerState.OPEN  # two failed or late turns in a row
            await answered("What is the capital of Germany?", "berlin", "llama_cpp_fallback", "breaker_open")
            clock.t += 30.0
            await answered("What is the capital of Japan?", "tokyo", "llama_cpp", "probe")
            assert llm.breaker.state is BreakerState.CLOSED

            # Barge-in on a reply of the in-process primary: its generation is closed in the engine.
            await primary_pool.drained()
            aborted = primary_pool.finished["abort"]
            mark = len(rec.events)
            item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Count slowly from one to one hundred."}]}
            await ws.send(json.dumps({"type": "conversation.item.create", "item": item}))
            await ws.send(json.dumps({"type": "response.create"}))
            await rec.wait_for("response.output_audio.delta", 60, start=mark)
            await ws.send(json.dumps({"type": "response.cancel"}))
            done = await rec.wait_for("response.done", 30, start=mark)
            assert done["response"]["status"] == "cancelled"
            await primary_pool.drained()
            assert primary_pool.finished["abort"] == aborted + 1
            assert rec.of("error") == []
            await ws.close()
            await task
        await llm.aclose()

    try:
        run(main(), 300)
    finally:
        llm.close()
    assert faults.fired["llm"] == 1
