"""The LLM circuit breaker: which engine answers, why, and what happens to the primary's request."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from voiceagent.backends.fallback import Breaker, BreakerState, FallbackLlm
from voiceagent.backends.protocols import Admitted, LlmItem, LlmRequest, LlmStats, Routed, Usage
from voiceagent.errors import EngineError
from voiceagent.tools.spec import Message, Tool


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class ScriptedEngine:
    """An async engine whose next generations follow a script: a reply (pieces), an exception
    raised before the first piece, ``"hang"`` (never answers), or ("fail_after", pieces).  Like
    the real engines, each generation starts with :class:`Admitted` and a reply that runs to its
    end ends with :class:`Usage`."""

    def __init__(
        self,
        name: str,
        script: Sequence[Any] = (),
        default: Sequence[str] = ("Hello", " there."),
        window: int | None = None,
        tokens: int | None = None,
    ) -> None:
        self.name = name
        self.window = window
        self.tokens = tokens
        self.script = list(script)
        self.default = list(default)
        self.calls = 0
        self.closed_early = 0
        self.primed: list[Sequence[Message]] = []
        self.prime_error: Exception | None = None
        self.hanging = asyncio.Event()

    async def count_tokens(self, messages: Sequence[Message], tools: tuple[Any, ...] = ()) -> int | None:
        return self.tokens

    async def generate(self, request: LlmRequest) -> AsyncGenerator[LlmItem, None]:
        self.calls += 1
        step = self.script.pop(0) if self.script else self.default
        finished = False
        try:
            yield Admitted()
            if isinstance(step, Exception):
                raise step
            if step == "hang":
                self.hanging.set()
                await asyncio.Event().wait()
            if isinstance(step, tuple):
                for piece in step[1]:
                    yield piece
                raise EngineError(f"{self.name} broke mid-reply")
            for piece in step:
                await asyncio.sleep(0)
                yield piece
            finished = True
            yield Usage(self.name, 1, 0, len(step))
        finally:
            if not finished:
                self.closed_early += 1

    def prime(self, messages: Sequence[Message], tools: tuple[Tool, ...] = ()) -> None:
        if self.prime_error is not None:
            raise self.prime_error
        self.primed.append(messages)

    def stats(self) -> LlmStats:
        return LlmStats(engine=self.name, slots=0, busy=0, waiting=0)

    async def aclose(self) -> None:
        pass

    def close(self) -> None:
        pass


def _request() -> LlmRequest:
    return LlmRequest("s", [Message("user", "Hi")], 10, 0.0)


async def _pieces(llm: FallbackLlm, routes: list[tuple[str, str]]) -> AsyncGenerator[str, None]:
    """The reply's pieces; each :class:`Routed` item of the stream is appended to ``routes``."""
    async with contextlib.aclosing(llm.generate(_request())) as items:
        async for item in items:
            if isinstance(item, Routed):
                routes.append((item.engine, item.reason))
            elif not isinstance(item, (Admitted, Usage)):
                assert isinstance(item, str)
                yield item


async def _ask(llm: FallbackLlm, routes: list[tuple[str, str]]) -> str:
    async with contextlib.aclosing(_pieces(llm, routes)) as pieces:
        return "".join([p async for p in pieces])


@dataclass
class Rig:
    llm: FallbackLlm
    primary: ScriptedEngine
    fallback: ScriptedEngine
    clock: Clock


def _make(primary_script: Sequence[Any], *, failures: int = 2, reset_s: float = 10.0, budget: float = 5.0) -> Rig:
    clock = Clock()
    primary = ScriptedEngine("remote", primary_script, default=("Primary", " answer."))
    fallback = ScriptedEngine("embedded", default=("Fallback", " answer."))
    return Rig(FallbackLlm(primary, fallback, budget, failures, reset_s, clock), primary, fallback, clock)


def test_a_healthy_primary_answers_and_says_so() -> None:
    rig = _make([])
    llm, _primary, fallback, _clock = rig.llm, rig.primary, rig.fallback, rig.clock
    routes: list[tuple[str, str]] = []
    assert asyncio.run(_ask(llm, routes)) == "Primary answer."
    assert routes == [("remote", "primary")]
    assert fallback.calls == 0
    assert llm.stats().breaker == "closed"


def test_the_primary_s_reports_before_its_text_pass_through_and_the_route_comes_before_the_first_piece() -> None:
    async def items(llm: FallbackLlm) -> list[LlmItem]:
        async with contextlib.aclosing(llm.generate(_request())) as stream:
            return [item async for item in stream]

    healthy = _make([])
    assert asyncio.run(items(healthy.llm)) == [Admitted(), Routed("remote", "primary"), "Primary", " answer.", Usage("remote", 1, 0, 2)]
    # Handed over: the primary's admission (its attempt is part of the turn's wait), then the route,
    # then the fallback's whole stream.
    failed = _make([EngineError("connection refused")])
    assert asyncio.run(items(failed.llm)) == [
        Admitted(),
        Routed("embedded", "primary_failed"),
        Admitted(),
        "Fallback",
        " answer.",
        Usage("embedded", 1, 0, 2),
    ]
    # An empty reply is the primary's answer: its route, then its usage, last as ever.
    empty = _make([[]])
    assert asyncio.run(items(empty.llm)) == [Admitted(), Routed("remote", "primary"), Usage("remote", 1, 0, 0)]


def test_a_primary_that_fails_before_its_first_text_hands_the_same_turn_to_the_fallback() -> None:
    rig = _make([EngineError("connection refused")])
    llm, _primary, _fallback, _clock = rig.llm, rig.primary, rig.fallback, rig.clock
    routes: list[tuple[str, str]] = []
    assert asyncio.run(_ask(llm, routes)) == "Fallback answer."
    assert routes == [("embedded", "primary_failed")]
    assert llm.answered[("embedded", "primary_failed")] == 1
    assert llm.breaker.state is BreakerState.CLOSED  # one failure of two


def test_a_primary_that_misses_the_first_token_budget_is_closed_and_the_fallback_answers() -> None:
    rig = _make(["hang"], budget=0.05)
    llm, primary, _fallback, _clock = rig.llm, rig.primary, rig.fallback, rig.clock
    routes: list[tuple[str, str]] = []
    assert asyncio.run(_ask(llm, routes)) == "Fallback answer."
    assert routes == [("embedded", "first_token_budget")]
    assert primary.closed_early == 1  # its request was closed (aborted), not left running


def test_repeated_failures_open_the_breaker_then_a_probe_closes_it() -> None:
    rig = _make([EngineError("down"), EngineError("down")], failures=2, reset_s=10.0)
    llm, primary, _fallback, clock = rig.llm, rig.primary, rig.fallback, rig.clock
    routes: list[tuple[str, str]] = []

    async def main() -> None:
        await _ask(llm, routes)
        await _ask(llm, routes)
        assert llm.breaker.state is BreakerState.OPEN
        calls = primary.calls
        assert await _ask(llm, routes) == "Fallback answer."
        assert primary.calls == calls  # open: the broken primary is not asked at all
        clock.t = 10.0
        assert llm.breaker.state is BreakerState.HALF_OPEN
        assert await _ask(llm, routes) == "Primary answer."  # the probe
        assert llm.breaker.state is BreakerState.CLOSED
        assert await _ask(llm, routes) == "Primary answer."

    asyncio.run(main())
    assert routes == [
        ("embedded", "primary_failed"),
        ("embedded", "primary_failed"),
        ("embedded", "breaker_open"),
        ("remote", "probe"),
        ("remote", "primary"),
    ]


def test_a_failed_probe_reopens_for_another_period_and_only_one_probe_runs_at_a_time() -> None:
    breaker = Breaker(failures=3, reset_s=5.0, clock=(clock := Clock()))
    for _ in range(3):
        assert breaker.acquire() == "primary"
        breaker.release("primary", False)
    assert breaker.acquire() is None
    clock.t = 5.0
    assert breaker.acquire() == "probe"
    assert breaker.acquire() is None  # a second turn meanwhile goes to the fallback
    breaker.release("probe", False)
    assert breaker.state is BreakerState.OPEN
    clock.t = 9.0
    assert breaker.acquire() is None  # the period starts again from the failed probe
    clock.t = 10.0
    assert breaker.acquire() == "probe"
    breaker.release("probe", None)  # cancelled: the probe slot is given back, nothing learned
    assert breaker.acquire() == "probe"


def test_a_success_resets_the_count_of_failures() -> None:
    breaker = Breaker(failures=2, reset_s=5.0, clock=Clock())
    breaker.release("primary", False)
    breaker.release("primary", True)
    breaker.release("primary", False)
    assert breaker.state is BreakerState.CLOSED


def test_a_primary_that_breaks_after_its_first_text_fails_the_reply_and_counts_as_a_failure() -> None:
    rig = _make([("fail_after", ["Half"])], failures=1)
    llm, _primary, fallback, _clock = rig.llm, rig.primary, rig.fallback, rig.clock
    routes: list[tuple[str, str]] = []
    got: list[str] = []

    async def main() -> None:
        async with contextlib.aclosing(_pieces(llm, routes)) as pieces:
            async for piece in pieces:
                got.append(piece)

    with pytest.raises(EngineError, match="mid-reply"):
        asyncio.run(main())
    assert got == ["Half"]  # what was said stays said; nothing is spliced on from another model
    assert fallback.calls == 0
    assert llm.breaker.state is BreakerState.OPEN


def test_cancelling_while_the_primary_is_silent_closes_it_and_is_neither_success_nor_failure() -> None:
    rig = _make(["hang"], failures=1, budget=30.0)
    llm, primary, fallback, _clock = rig.llm, rig.primary, rig.fallback, rig.clock
    routes: list[tuple[str, str]] = []

    async def main() -> None:
        task = asyncio.create_task(_ask(llm, routes))
        await primary.hanging.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert primary.closed_early == 1
    assert fallback.calls == 0 and routes == []
    assert llm.breaker.state is BreakerState.CLOSED


def test_a_primary_unreachable_at_start_up_opens_the_breaker_and_the_server_can_start() -> None:
    rig = _make([])
    llm, primary, fallback, _clock = rig.llm, rig.primary, rig.fallback, rig.clock
    primary.prime_error = EngineError("unreachable")
    llm.prime([Message("system", "Be brief.")])
    assert fallback.primed and llm.breaker.state is BreakerState.OPEN
    routes: list[tuple[str, str]] = []
    assert asyncio.run(_ask(llm, routes)) == "Fallback answer."
    assert routes == [("embedded", "breaker_open")]


def test_a_prompt_must_fit_both_engines_and_is_counted_by_the_primary_where_it_can() -> None:
    """A turn may go to either engine: the window is the smaller one; the count is the primary's,
    or the fallback's when the primary (a remote server) cannot count."""
    counting = FallbackLlm(ScriptedEngine("vllm", window=8192, tokens=120), ScriptedEngine("llama_cpp", window=2048, tokens=130), 1.0)
    assert counting.window == 2048
    assert asyncio.run(counting.count_tokens([Message("user", "hi")])) == 120
    remote = FallbackLlm(ScriptedEngine("openai", window=None, tokens=None), ScriptedEngine("llama_cpp", window=4096, tokens=130), 1.0)
    assert remote.window == 4096
    assert asyncio.run(remote.count_tokens([Message("user", "hi")])) == 130
