"""Per-turn routing with the real models: ``llm.route = "rules"`` builds a small engine beside the
large one, and two conversations talking at the same instant through the real server are each
answered by the engine their words call for, with the decision in the turn metrics, the
Prometheus counters and the reply."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from typing import Any

import pytest
from websockets.asyncio.client import connect

from tests.integration.rt_client import recording, scrape
from tests.profile import profile_config
from voiceagent.backends.fallback import FallbackLlm
from voiceagent.backends.registry import load_llm
from voiceagent.backends.router import RoutedLlm
from voiceagent.tools.spec import Message
from voiceagent.transports.server import VoiceAgentServer

pytestmark = [pytest.mark.models, pytest.mark.unpaced]


def test_two_conversations_at_once_are_answered_by_the_engine_their_words_call_for(engines: Any, run: Any) -> None:
    # The test profile's model is the large route here too: what is tested is the routing, with
    # a second real engine (its own weights and contexts) as the small route.
    # A first-token budget no turn reaches: a busy 2-core machine must not hand a turn to the
    # other route's breaker (that is tests/unit/test_router.py's business).
    settings = {"llm.route": "rules", "llm.fallback": "none", "llm.route_contexts": "2", "llm.first_token_budget_ms": "120000"}
    config = profile_config({"server.port": "0", "server.max_sessions": "2", **settings})
    llm, pools = load_llm(config)
    assert isinstance(llm, RoutedLlm) and isinstance(llm.large, FallbackLlm) and isinstance(llm.small, FallbackLlm)
    assert llm.large.fallback is llm.small.primary  # one small engine, the large route's fallback too
    assert llm.prime_also == ()  # so the large route primes it
    large, small = llm.large.primary.name, llm.small.primary.name
    assert small == "llama_cpp_small" if large == "llama_cpp" else small == "llama_cpp"  # vllm: the embedded model beside it
    assert llm.small.primary in pools
    llm.prime([Message("system", config.llm.instructions), Message("user", "Hello.")])
    routed = dataclasses.replace(engines, llm=llm)

    async def converse(url: str, question: str, start: asyncio.Event) -> tuple[dict[str, Any], dict[str, Any], str]:
        async with connect(url + "?voiceagent_metrics=1", max_size=None) as ws:
            rec, task = await recording(ws)
            await start.wait()  # both questions leave together
            item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": question}]}
            await ws.send(json.dumps({"type": "conversation.item.create", "item": item}))
            await ws.send(json.dumps({"type": "response.create"}))
            done = await rec.wait_for("response.done", 90)
            metrics = await rec.wait_for("voiceagent.turn_metrics", 10)
            reply = rec.done(done).text.lower()
            await ws.close()
            await task
            return done, metrics, reply

    async def main() -> tuple[list[tuple[dict[str, Any], dict[str, Any], str]], dict[str, float]]:
        async with VoiceAgentServer(config, routed) as server:
            start = asyncio.Event()
            questions = ("Thank you very much.", "What is the capital of France?")
            asking = [asyncio.create_task(converse(server.url, q, start)) for q in questions]
            await asyncio.sleep(0)
            start.set()
            results = await asyncio.gather(*asking)
            body = await asyncio.to_thread(scrape, server.port)
        await llm.aclose()
        return results, body

    try:
        (thanks, france), exposition = run(main(), 240)
    finally:
        llm.close()
    assert thanks[0]["response"]["status"] == france[0]["response"]["status"] == "completed"
    assert (thanks[1]["llm_engine"], thanks[1]["llm_route"]) == (small, "small:thanks.primary"), thanks[1]
    assert (france[1]["llm_engine"], france[1]["llm_route"]) == (large, "large.primary"), france[1]
    assert "welcome" in thanks[2] or "pleasure" in thanks[2], thanks[2]
    assert "paris" in france[2], france[2]
    assert exposition[f'voiceagent_llm_answers_total{{engine="{small}",reason="small:thanks.primary"}}'] == 1
    assert exposition[f'voiceagent_llm_answers_total{{engine="{large}",reason="large.primary"}}'] == 1
