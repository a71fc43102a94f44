"""The batched engine with the real model (issue #30): conversations decoding in the same steps
each get their own answer, a barge-in mid-batch ends only its own sequence, and a conversation's
prefix survives other conversations' turns.  A stateless fake cannot show these: a mix-up of
sequences in llama.cpp's KV cache shows only as a wrong answer from the real model."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

import pytest

from tests.profile import profile_config
from voiceagent.backends import llama_cpp
from voiceagent.backends.batch_engine import BatchedEngine
from voiceagent.backends.protocols import LlmRequest, Usage, is_piece
from voiceagent.tools.spec import Message

pytestmark = [pytest.mark.models, pytest.mark.unpaced]

SYSTEM = "You are a helpful voice assistant. Answer in one short sentence."
CAPITALS = {
    "France": "Paris",
    "Japan": "Tokyo",
    "Italy": "Rome",
    "Germany": "Berlin",
    "Spain": "Madrid",
    "Russia": "Moscow",
    "Egypt": "Cairo",
    "China": "Beijing",
}


@pytest.fixture(scope="module")
def engine() -> Iterator[BatchedEngine]:
    config = profile_config({"llm.batching": "true", "llm.sequences": "12"})
    if config.llm.backend != "llama_cpp":
        pytest.skip(f"the embedded engine is tested here; this profile's LLM is {config.llm.backend}")
    eng = llama_cpp.load(config.llm, config.cache_path)
    assert isinstance(eng, BatchedEngine)
    eng.prime([Message("system", SYSTEM), Message("user", "Hello.")])
    try:
        yield eng
    finally:
        eng.close()


def question(country: str) -> list[Message]:
    return [Message("system", SYSTEM), Message("user", f"What is the capital of {country}?")]


async def answer(engine: BatchedEngine, key: str, messages: list[Message], usage: list[Usage] | None = None) -> str:
    """The reply's text; its :class:`Usage` item is appended to ``usage``."""
    out = ""
    async with contextlib.aclosing(engine.generate(LlmRequest(key, messages, 40, 0.0))) as pieces:
        async for piece in pieces:
            if isinstance(piece, Usage):
                if usage is not None:
                    usage.append(piece)
            elif is_piece(piece):
                out += str(piece)
    return out


def test_eight_conversations_at_the_same_instant_each_get_their_own_answer(engine: BatchedEngine) -> None:
    steps, tokens = engine.steps, engine.batched_tokens

    async def main() -> list[str]:
        return await asyncio.gather(*(answer(engine, f"same-{c}", question(c)) for c in CAPITALS))

    replies = asyncio.run(main())
    for (country, city), reply in zip(CAPITALS.items(), replies, strict=True):
        others = [c for c in CAPITALS.values() if c != city]
        assert city in reply, (country, reply)
        assert not any(o in reply for o in others), (country, reply)
    # They were decoded together: far fewer steps than tokens.
    assert (engine.batched_tokens - tokens) / (engine.steps - steps) >= 3


def test_a_barge_in_mid_batch_ends_only_its_own_sequence(engine: BatchedEngine) -> None:
    before = engine.finished.copy()
    story = [Message("system", SYSTEM), Message("user", "Tell me a long story about a lighthouse keeper.")]

    async def main() -> tuple[str, list[str]]:
        others = [asyncio.ensure_future(answer(engine, f"barge-{c}", question(c))) for c in ("France", "Japan", "Italy")]
        heard = ""
        async with contextlib.aclosing(engine.generate(LlmRequest("barge-story", story, 200, 0.0))) as pieces:
            async for piece in pieces:
                if not is_piece(piece):
                    continue
                heard += str(piece)
                if len(heard.split()) >= 3:
                    break  # the user talks over it
        return heard, await asyncio.gather(*others)

    heard, replies = asyncio.run(main())
    assert heard
    for city, reply in zip(("Paris", "Tokyo", "Rome"), replies, strict=True):
        assert city in reply, reply
    assert engine.finished["abort"] - before["abort"] == 1
    assert engine.finished["stop"] - before["stop"] == 3
    asyncio.run(engine.drained())
    assert engine.stats().busy == 0


def test_a_conversations_prefix_survives_seven_others_turns(engine: BatchedEngine) -> None:
    mine = [Message("system", SYSTEM + " You speak for the Harbor Museum, open nine to five."), Message("user", "When do you open?")]
    usage: list[Usage] = []

    async def main() -> str:
        reply = await answer(engine, "survivor", mine, usage)
        # Seven others, each with instructions of their own (nothing to share with ours).
        await asyncio.gather(
            *(
                answer(engine, f"other-{i}", [Message("system", f"You are assistant number {i} of a bakery."), Message("user", "Hi?")])
                for i in range(7)
            )
        )
        return await answer(engine, "survivor", [*mine, Message("assistant", reply), Message("user", "And on Sunday?")], usage)

    assert asyncio.run(main())
    first, second = usage
    assert first.prompt_tokens is not None and second.prompt_tokens is not None and second.reused_tokens is not None
    # Everything up to the new question came from the KV cache: the first turn's prompt and reply.
    assert second.reused_tokens >= first.prompt_tokens + first.generated_tokens - 1
    assert second.prompt_tokens - second.reused_tokens <= 20


def test_with_flash_attention_on_the_same_conversations_get_their_own_answers() -> None:
    # llm.flash_attn is off by default (docs/decisions/flash-attention.md); on must still give each
    # of several conversations decoding together its own right answer.
    config = profile_config({"llm.batching": "true", "llm.sequences": "4", "llm.flash_attn": "true"})
    if config.llm.backend != "llama_cpp":
        pytest.skip(f"the embedded engine is tested here; this profile's LLM is {config.llm.backend}")
    eng = llama_cpp.load(config.llm, config.cache_path)
    assert isinstance(eng, BatchedEngine)
    countries = ["France", "Japan", "Italy"]

    async def main() -> list[str]:
        return await asyncio.gather(*(answer(eng, f"fa-{c}", question(c)) for c in countries))

    try:
        replies = asyncio.run(main())
    finally:
        eng.close()
    for country, reply in zip(countries, replies, strict=True):
        assert CAPITALS[country] in reply, (country, reply)
