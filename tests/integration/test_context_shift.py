"""The context shift with the real model (voiceagent.backends.kv_shift): after a cut, the turns
kept are moved back in the KV cache, not read again, and the model still reads them right.

Two conversations are cut and asked at the same instant on each engine, each about facts only
its own kept turns hold: a shift that moved the wrong cells, or moved them for the other
conversation too, answers with the wrong name or none."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from tests.profile import profile_config
from voiceagent.backends import llama_cpp
from voiceagent.backends.protocols import LlmEngine, LlmRequest, Usage, is_piece
from voiceagent.tools.spec import Message

pytestmark = [pytest.mark.models, pytest.mark.unpaced]

SYSTEM = "You are a helpful voice assistant. Answer in one short sentence. " + "Be kind and precise. " * 30
PEOPLE = {"Oliver": ("Mr Grey", "Leeds"), "Maria": ("Mrs Stone", "Porto")}


def history(name: str) -> list[Message]:
    boss, city = PEOPLE[name]
    facts = [("my dog", "Rex"), ("my car", "a red Volvo"), ("my job", "baker"), ("my sister", "Anna"), ("my cat", "Tom")]
    facts += [("my city", city), ("my boss", boss)]
    msgs = [Message("system", SYSTEM), Message("user", f"My name is {name}."), Message("assistant", f"Nice to meet you, {name}!")]
    for what, value in facts:
        msgs += [
            Message("user", f"Remember that {what} is {value}. Tell me something about that."),
            Message("assistant", f"Sure, I will remember that {what} is {value}. I am happy to help with anything about it."),
        ]
    return msgs


async def ask(engine: LlmEngine, key: str, messages: list[Message]) -> tuple[str, Usage]:
    usage: Usage | None = None
    out = ""
    async with contextlib.aclosing(engine.generate(LlmRequest(key, messages, 40, 0.0))) as pieces:
        async for piece in pieces:
            if isinstance(piece, Usage):
                usage = piece
            elif is_piece(piece):
                out += str(piece)
    assert usage is not None, "the generation ran to its end: its usage comes last"
    return out, usage


@pytest.mark.parametrize("batching", ["true", "false"], ids=["batched", "pool"])
def test_two_conversations_cut_at_once_keep_their_turns_in_the_cache_and_answer_from_them(batching: str) -> None:
    config = profile_config({"llm.batching": batching, "llm.context": "4096", "llm.contexts": "2"})
    if config.llm.backend != "llama_cpp":
        pytest.skip(f"the embedded engine is tested here; this profile's LLM is {config.llm.backend}")
    engine = llama_cpp.load(config.llm, config.cache_path)

    async def main() -> None:
        names = list(PEOPLE)
        first = await asyncio.gather(*(ask(engine, n, [*history(n), Message("user", "Hello again.")]) for n in names))
        # As the fitter cuts: the instructions stay, the oldest whole turns (the name's, then the
        # dog's, car's and job's) go, the rest stays.
        question = Message("user", "Which city do I live in, and who is my boss?")
        cut = {
            n: [history(n)[0], *history(n)[9:], Message("user", "Hello again."), Message("assistant", first[i][0]), question]
            for i, n in enumerate(names)
        }
        shifted = engine.stats().shifted_tokens
        replies = await asyncio.gather(*(ask(engine, n, cut[n]) for n in names))
        for name, (reply, usage) in zip(names, replies, strict=True):
            boss, city = PEOPLE[name]
            assert city in reply and boss.split()[-1] in reply, (name, reply)
            assert usage.prompt_tokens is not None and usage.reused_tokens is not None
            # Only the new question (and the reply before it) is evaluated, not the kept turns.
            assert usage.prompt_tokens - usage.reused_tokens < 60, usage
        assert engine.stats().shifted_tokens - shifted >= 2 * 150

    try:
        asyncio.run(main())
    finally:
        engine.close()
