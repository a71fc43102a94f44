"""The LLM circuit breaker against a real OpenAI-compatible server (llama.cpp's, on loopback) with
the embedded model as the fallback: a server stopped mid-conversation, and a slow one."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import urllib.request
from typing import Any

import pytest
from websockets.asyncio.client import connect

from tests.integration.llm_server import LlamaCppServer, SlowProxy
from tests.integration.rt_client import Recorder
from voiceagent.backends.fallback import BreakerState, FallbackLlm
from voiceagent.backends.openai_llm import OpenAiLlm
from voiceagent.backends.protocols import LlmRequest, Message
from voiceagent.config import load_config
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
    primary = OpenAiLlm(llm_server.base_url, "qwen", first_token_timeout_s=10.0)
    llm = FallbackLlm(primary, engines.llm, first_token_budget_s=10.0, failures=2, reset_s=30.0, clock=clock)
    config = load_config(env={}, overrides={"server.port": "0", "llm.backend": "openai"})
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
            rec = Recorder(ws)
            task = asyncio.create_task(rec.pump())
            await rec.wait_for("session.created", 10)
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
                reply = done["response"]["output"][0]["content"][0]["transcript"].lower()
                assert done["response"]["status"] == "completed", (question, done)
                assert (metrics["llm_engine"], metrics["llm_route"]) == (engine, why), (question, metrics)
                assert word in reply, (question, engine, reply)
            assert rec.of("error") == []  # every turn was answered: no failed response reached the client
            body = await asyncio.to_thread(lambda: urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=10).read())
            await ws.close()
            await task
        await llm.aclose()
        return body.decode()

    try:
        exposition = run(main(), 300)
    finally:
        llm_server.stop()
    assert 'voiceagent_llm_answers_total{engine="llama_cpp",reason="primary_failed"} 2' in exposition
    assert 'voiceagent_llm_answers_total{engine="llama_cpp",reason="breaker_open"} 1' in exposition
    assert 'voiceagent_llm_answers_total{engine="openai",reason="probe"} 1' in exposition
    assert 'voiceagent_llm_answers_total{engine="openai",reason="primary"} 2' in exposition
    assert 'voiceagent_llm_breaker_open{engine="openai",state="closed"} 0' in exposition


def test_a_server_slower_than_the_first_token_budget_is_aborted_and_the_fallback_answers(engines: Any, run: Any) -> None:
    llm_server = LlamaCppServer().start()
    clock = Clock()
    system = Message("system", "You are a helpful assistant. Answer briefly.")

    async def main() -> list[tuple[str, str]]:
        routes: list[tuple[str, str]] = []

        async def ask(llm: FallbackLlm, question: str, max_tokens: int, keep: int) -> str:
            request = LlmRequest("slow", [system, Message("user", question)], max_tokens, 0.0, on_route=lambda e, r: routes.append((e, r)))
            pieces: list[str] = []
            async with contextlib.aclosing(llm.generate(request)) as gen:
                async for piece in gen:
                    pieces.append(piece)
                    if len(pieces) >= keep:
                        break
            return "".join(pieces).lower()

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
            proxy.delay_s = 0.0
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
