"""Long instructions and long conversations with the real LLM behind a real WebSocket server
(issue #31): the prompt always fits the context window.  A conversation that outgrows it
(the default 2,048 tokens, on a pool of one context) loses its oldest turns, announced, and every turn is answered with
the instructions kept; on the defaults, instructions that cannot fit are refused at
``session.update`` with the sizes, and the session goes on with its previous settings."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.rt_client import Recorder, scrape
from tests.integration.test_realtime import _connected
from tests.profile import profile_config
from voiceagent.backends import llama_cpp
from voiceagent.backends.registry import Engines
from voiceagent.transports.server import VoiceAgentServer

pytestmark = [pytest.mark.models, pytest.mark.unpaced]

ROOMS = ["Amber", "Birch", "Cedar", "Delta", "Ember", "Fjord", "Garnet", "Harbor", "Indigo", "Juniper"]
TOPICS = ["robotics", "weather models", "speech codecs", "solar panels", "compilers", "tea farming", "bridges", "sleep research"]


def knowledge_base() -> str:
    """Conference-assistant instructions with a schedule as knowledge: ~1,500 tokens for Qwen2.5."""
    lines = ["You are the voice assistant of the Northwind conference. Answer in one short sentence from this schedule."]
    for day in ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday"):
        for hour in range(8, 20):
            room = ROOMS[(hour + len(day)) % len(ROOMS)]
            topic = TOPICS[(hour * 3 + len(day)) % len(TOPICS)]
            lines.append(f"{day} at {hour}:00 in room {room}: a talk on {topic}, with questions afterwards.")
    lines.append("The keynote is on Monday at 9:00 in the Great Hall. Lunch is served at noon in the Atrium.")
    return "\n".join(lines)


@pytest.fixture(scope="module")
def long_context(engines: Any) -> Iterator[Engines]:
    """The profile's models with an LLM pool of one context of 2048 tokens (the default window)."""
    config = profile_config({"llm.context": "2048", "llm.contexts": "1"})
    if config.llm.backend != "llama_cpp":
        pytest.skip(f"the embedded engine's window is tested here; this profile's LLM is {config.llm.backend}")
    pool = llama_cpp.load(config.llm, config.cache_path)
    try:
        yield dataclasses.replace(engines, llm=pool)
    finally:
        pool.close()


async def _ask(ws: Any, rec: Recorder, text: str, timeout: float = 120.0) -> dict[str, Any]:
    start = len(rec.events)
    item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
    await ws.send(json.dumps({"type": "conversation.item.create", "item": item}))
    await ws.send(json.dumps({"type": "response.create", "response": {"output_modalities": ["text"]}}))
    done = await rec.wait_for("response.done", timeout, start=start)
    return done["response"]


def _text(response: dict[str, Any]) -> str:
    return " ".join(c.get("text") or c.get("transcript") or "" for o in response["output"] for c in o.get("content", []))


def test_a_conversation_that_outgrows_the_window_drops_its_oldest_turns_and_keeps_answering(long_context: Engines, run: Any) -> None:
    filler = " ".join(f"I also wondered about the {t} session and whether it is recorded for later viewing." for t in TOPICS * 2)

    async def scenario() -> None:
        config = profile_config({"server.port": "0", "llm.context": "2048", "llm.max_tokens": "40"})
        async with VoiceAgentServer(config, long_context) as server:
            ws, rec, task = await _connected(server)
            await ws.send(json.dumps({"type": "session.update", "session": {"type": "realtime", "instructions": knowledge_base()}}))
            await rec.wait_for("session.updated", 30)
            created: list[str] = []
            # Three turns: the second already outgrows the window, so two cuts are made (a cut
            # keeps the instructions and the newest turn; each turn is a prefill of ~350 tokens).
            for turn in range(3):
                question = "Where is the keynote held?" if turn == 2 else "Which room is the talk on Tuesday at 14:00 in?"
                response = await _ask(ws, rec, f"Question {turn}: {filler} {question}")
                assert response["status"] == "completed", response
                created += [e["item"]["id"] for e in rec.of("conversation.item.added") if e["item"]["role"] == "user"][len(created) :]
            deleted = [e["item_id"] for e in rec.of("conversation.item.deleted")]
            assert deleted, "three turns of ~350 tokens beside ~1,500 of instructions must outgrow 2,048 tokens"
            # Oldest first, whole turns: the first user items created are the ones deleted.
            users_deleted = [i for i in deleted if i in created]
            assert users_deleted == created[: len(users_deleted)]
            assert created[-1] not in deleted
            # The instructions were kept through the cuts: the last answer comes from them.
            assert "great hall" in _text(response).lower(), _text(response)
            metrics = await asyncio.to_thread(scrape, server.port)
            assert metrics["voiceagent_context_dropped_items_total"] == len(deleted)
            assert metrics["voiceagent_context_cuts_total"] >= 1
            assert metrics.get('voiceagent_turns_total{status="failed"}', 0.0) == 0.0
            await ws.close()
            await task

    run(scenario(), 600)


def test_instructions_too_long_for_the_default_window_are_refused_with_the_sizes(engines: Any, run: Any) -> None:
    async def scenario() -> None:
        config = profile_config({"server.port": "0"})
        async with VoiceAgentServer(config, engines) as server:
            ws, rec, task = await _connected(server)
            long = knowledge_base() + "\n" + knowledge_base().replace("Northwind", "Southwind")
            await ws.send(json.dumps({"type": "session.update", "event_id": "ev_long", "session": {"instructions": long}}))
            err = (await rec.wait_for("error", 30))["error"]
            assert err["code"] == "context_length_exceeded" and err["event_id"] == "ev_long"
            assert f"context window of {config.llm.context} tokens" in err["message"] and "llm.context" in err["message"]
            assert not rec.of("session.updated")
            # The session goes on with its previous instructions.
            response = await _ask(ws, rec, "Say hello.")
            assert response["status"] == "completed" and _text(response).strip()
            await ws.close()
            await task

    run(scenario(), 120)


async def _poll(port: int, name: str, above: float, timeout: float = 60.0) -> float:
    """The metric ``name`` once it exceeds ``above`` (scraped until then, within ``timeout``)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        value = (await asyncio.to_thread(scrape, port)).get(name, 0.0)
        if value > above:
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"{name} stayed at {value} (waited for > {above})")
        await asyncio.sleep(0.2)  # polling a remote effect, with a deadline


def test_long_instructions_are_evaluated_once_per_process_and_a_turn_meanwhile_is_answered(engines: Any, run: Any) -> None:
    """Caller A's instructions are evaluated at session.update; A's question sent right behind
    them waits for that and is answered.  Caller B with the same instructions starts from A's
    evaluated prefix (copied, not evaluated again), and both then ask at the same instant."""
    prefilled = 'voiceagent_llm_prompt_tokens_total{engine="llama_cpp",kind="prefilled"}'
    shared = 'voiceagent_llm_prompt_tokens_total{engine="llama_cpp",kind="shared"}'
    instructions = knowledge_base() + "\nCaller policy 7."  # not what any other test warmed

    async def scenario() -> None:
        config = profile_config({"server.port": "0", "server.max_sessions": "2"})
        if config.llm.backend != "llama_cpp" or config.llm.contexts < 2:
            pytest.skip("prefixes are shared between the embedded engine's contexts")
        async with VoiceAgentServer(config, engines) as server:
            before = await asyncio.to_thread(scrape, server.port)
            ws_a, rec_a, task_a = await _connected(server)
            await ws_a.send(json.dumps({"type": "session.update", "session": {"instructions": instructions}}))
            first = await _ask(ws_a, rec_a, "Where is the keynote held?")  # sent while the instructions are evaluated
            assert first["status"] == "completed" and "great hall" in _text(first).lower(), first
            after_a = await asyncio.to_thread(scrape, server.port)
            assert after_a.get(prefilled, 0.0) - before.get(prefilled, 0.0) > 1000  # evaluated at the update, not in the turn

            ws_b, rec_b, task_b = await _connected(server)
            await ws_b.send(json.dumps({"type": "session.update", "session": {"instructions": instructions}}))
            await rec_b.wait_for("session.updated", 10)
            await _poll(server.port, shared, after_a.get(shared, 0.0) + 1000)
            after_b = await asyncio.to_thread(scrape, server.port)
            assert after_b.get(prefilled, 0.0) - after_a.get(prefilled, 0.0) < 100  # copied, not evaluated again

            answers = await asyncio.gather(_ask(ws_a, rec_a, "And where is lunch served?"), _ask(ws_b, rec_b, "Where is lunch served?"))
            for answer in answers:
                assert answer["status"] == "completed" and "atrium" in _text(answer).lower(), answer
            for ws, task in ((ws_a, task_a), (ws_b, task_b)):
                await ws.close()
                await task

    run(scenario(), 300)


def test_the_byte_bound_is_never_below_the_models_count(engines: Any, run: Any) -> None:
    """The fitter skips counting a prompt whose byte bound fits; that bound must hold for the real
    tokenizer and template, tools and every kind of text included."""
    from voiceagent.conversation.prompt_fit import upper_bound
    from voiceagent.tools.spec import Message, Tool, ToolCall

    tool = Tool("get_time", "The time now.", {"type": "object", "properties": {"zone": {"type": "string"}}})
    texts = ["Hi.", "What's 7 × 8?", "Ünïcödé — 日本語のテキスト 🎉🎉", "a" * 300, " ".join(["the"] * 200), "\n\n\t  x"]
    for text in texts:
        for tools in ((), (tool,)):
            msgs = [Message("system", "Be brief."), Message("user", text)]
            msgs.append(Message("assistant", "", (ToolCall("c1", "get_time", '{"zone": "UTC"}'),)))
            msgs.append(Message("tool", '{"time": "12:00"}', tool_call_id="c1"))
            counted = run(engines.llm.count_tokens(msgs, tools))
            if counted is None:
                pytest.skip("this profile's engine does not count tokens")
            assert upper_bound(msgs, tools) >= counted, (text, tools, counted)
