"""backends.router: which route answers a turn, what the turn log is told, and that each route
keeps its own breaker (fakes at the engine seam; tests/integration/test_llm_routing.py runs the
real models)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.llm_stream import text_and_routes
from tests.unit.test_fallback import ScriptedEngine
from voiceagent.backends.fallback import FallbackLlm
from voiceagent.backends.protocols import LlmItem, LlmRequest, is_piece
from voiceagent.backends.router import RoutedLlm, decide
from voiceagent.errors import EngineError
from voiceagent.text.turn_kind import small_talk_kind
from voiceagent.tools.spec import Message, ToolCall


class Prefilling(ScriptedEngine):
    def __init__(self, name: str, **kw: Any) -> None:
        super().__init__(name, **kw)
        self.prefilled: list[str] = []
        self.closed = 0

    async def prefill(self, key: str, messages: Any, tools: Any = ()) -> int:
        self.prefilled.append(messages[-1].content)
        return 1

    def close(self) -> None:
        self.closed += 1


def _routed(large_script: Any = (), small_script: Any = ()) -> tuple[RoutedLlm, Prefilling, Prefilling]:
    large = Prefilling("big", script=large_script, default=("Large", " answer."), window=4096)
    small = Prefilling("tiny", script=small_script, default=("Small", " answer."), window=2048)
    llm = RoutedLlm(FallbackLlm(large, small, 5.0, 2, 30.0), FallbackLlm(small, large, 5.0, 2, 30.0), small_talk_kind, [large, small])
    return llm, large, small


def _told(llm: RoutedLlm, messages: list[Message], tool_choice: str = "auto") -> tuple[str, list[tuple[str, str]]]:
    """The reply's text and every route the stream told, in order."""
    routes: list[tuple[str, str]] = []

    async def main() -> str:
        text, told = await text_and_routes(llm, LlmRequest("s", messages, 10, 0.0, tool_choice=tool_choice))
        routes.extend(told)
        return text

    return asyncio.run(main()), routes


def _ask(llm: RoutedLlm, messages: list[Message], tool_choice: str = "auto") -> tuple[str, list[tuple[str, str]]]:
    """The reply's text and the route that answered it (the last one told: what the LLM stage keeps)."""
    text, routes = _told(llm, messages, tool_choice)
    return text, routes[-1:]


def test_the_decision_is_told_before_the_engine_starts() -> None:
    """The LLM stage reads it while the reply is thought (no acknowledgement over the quick model)."""
    llm, _, _ = _routed()
    assert _told(llm, [Message("user", "Thank you very much.")])[1] == [("tiny", "small:thanks"), ("tiny", "small:thanks.primary")]
    assert _told(llm, [Message("user", "What is the capital of France?")])[1][0] == ("big", "large")


def test_a_social_turn_goes_to_the_small_model_and_the_rest_to_the_large() -> None:
    llm, large, small = _routed()
    assert _ask(llm, [Message("user", "Thank you very much.")]) == ("Small answer.", [("tiny", "small:thanks.primary")])
    assert _ask(llm, [Message("user", "What is the capital of France?")]) == ("Large answer.", [("big", "large.primary")])
    assert (large.calls, small.calls) == (1, 1)
    assert llm.window == 2048  # either may answer: the prompt must fit both


def test_a_small_model_that_fails_hands_the_turn_to_the_large_and_its_breaker_opens_alone() -> None:
    llm, large, small = _routed(small_script=[EngineError("boom"), EngineError("boom")])
    assert (large.calls, small.calls) == (0, 0)
    for _ in range(2):
        assert _ask(llm, [Message("user", "Hello.")]) == ("Large answer.", [("big", "small:greeting.primary_failed")])
    assert _ask(llm, [Message("user", "Hi there.")]) == ("Large answer.", [("big", "small:greeting.breaker_open")])
    # The large route's breaker is its own: still closed, the large model answers as usual.
    assert _ask(llm, [Message("user", "What is two plus two?")]) == ("Large answer.", [("big", "large.primary")])
    assert llm.stats().breaker == "closed"
    assert (large.calls, small.calls) == (4, 2)  # the open breaker asked the small model no more


@pytest.mark.parametrize(
    ("messages", "tool_choice"),
    [
        ([Message("user", "Thanks."), Message("assistant", "", tool_calls=(ToolCall("c1", "get_time", {}),))], "auto"),
        ([Message("user", "Okay."), Message("tool", "12:00", tool_call_id="c1")], "auto"),  # a tool's output
        ([Message("user", "Yes.")], "required"),  # a response forced to call a tool
        ([Message("user", "Yes.")], "get_time"),
        ([], "auto"),
        # "Hello?" after a question whose reply was cancelled before its first word: it asks again.
        ([Message("user", "What is the capital of France?"), Message("user", "Hello?")], "auto"),
    ],
)
def test_what_is_not_a_user_s_social_words_goes_to_the_large_model(messages: list[Message], tool_choice: str) -> None:
    assert decide(messages, tool_choice, small_talk_kind) is None


def test_a_yes_where_tools_are_offered_goes_to_the_large_model_and_a_greeting_does_not() -> None:
    asked = [Message("system", "Be brief."), Message("assistant", "Shall I set a timer for ten minutes?"), Message("user", "Yes, please.")]
    assert decide(asked, "auto", small_talk_kind) == "confirmation"
    assert decide(asked, "auto", small_talk_kind, tools=True) is None
    assert decide([Message("user", "Hello.")], "auto", small_talk_kind, tools=True) == "greeting"


def test_prefill_warms_the_engine_the_partial_transcript_points_to() -> None:
    llm, large, small = _routed()

    async def main() -> None:
        await llm.prefill("s", [Message("system", "Be brief."), Message("user", "Good morning")])
        await llm.prefill("s", [Message("system", "Be brief."), Message("user", "Good morning, what is")])

    asyncio.run(main())
    assert small.prefilled == ["Good morning"]
    assert large.prefilled == ["Good morning, what is"]


def test_each_engine_is_primed_and_closed_once() -> None:
    llm, large, small = _routed()
    llm.prime([Message("system", "Be brief."), Message("user", "Hello.")])
    # The large route primes its engine and its fallback, which is the small model here.
    assert (len(large.primed), len(small.primed)) == (1, 1)
    llm.close()
    assert (large.closed, small.closed) == (1, 1)
    # With a fallback of its own, the large route does not hold the small model: prime_also does.
    third = Prefilling("spare")
    routes = (FallbackLlm(large, third, 5.0, 2, 30.0), FallbackLlm(small, large, 5.0, 2, 30.0))
    llm = RoutedLlm(*routes, small_talk_kind, [large, third, small], [small])
    llm.prime([Message("user", "Hello.")])
    assert (len(large.primed), len(third.primed), len(small.primed)) == (2, 1, 2)


def test_cancelling_a_routed_turn_closes_the_small_model_s_generation_and_propagates() -> None:
    llm, _large, small = _routed(small_script=["hang"])

    async def main() -> None:
        request = LlmRequest("s", [Message("user", "Hello.")], 10, 0.0)

        async def first_piece() -> LlmItem:
            async for item in llm.generate(request):
                if is_piece(item):
                    return item
            raise AssertionError("no piece")

        task = asyncio.create_task(first_piece())
        await small.hanging.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert small.closed_early == 1


def test_closing_reaches_every_engine_even_when_one_raises() -> None:
    llm, large, small = _routed()

    def broken() -> None:
        raise RuntimeError("close failed")

    large.close = broken  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="close failed"):
        llm.close()
    assert small.closed == 1
