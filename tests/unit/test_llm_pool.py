"""The in-process LLM engine: exclusive contexts, affinity, fair queueing, cancellation.

The contexts are :class:`SequenceCheckingLlm` fakes, which hold one sequence's state the way a
llama.cpp context does and fail loudly when two generations step on it in turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncGenerator, Callable, Iterator, Sequence
from typing import Any

import pytest

from voiceagent.backends.llm_pool import LlmPool
from voiceagent.backends.protocols import Admitted, EndProbability, LlmItem, LlmRequest, Pacing, is_piece
from voiceagent.pipeline import iterate_in
from voiceagent.pipeline.scheduler import PriorityExecutor
from voiceagent.tools.spec import Message, Tool

from .fakes import InterleavedError, Recorder, SequenceCheckingLlm, deadline

Run = Callable[..., Any]


@pytest.fixture
def executor() -> Iterator[PriorityExecutor]:
    ex = PriorityExecutor("test-llm")
    yield ex
    ex.shutdown(wait=True, cancel_futures=True)


class Logged(SequenceCheckingLlm):
    """Records, in ``order``, whose question each step answered (the order the worker ran them)."""

    def __init__(self, order: Recorder, name: str, pieces: int, step_s: float) -> None:
        super().__init__(name, pieces, step_s)
        self.order = order

    def _generate(self, me: int, question: str) -> Iterator[str]:
        for piece in super()._generate(me, question):
            self.order.record(question)
            yield piece

    def prefill(self, messages: Sequence[Message], tools: Sequence[Tool] = ()) -> int:
        n = super().prefill(messages, tools)
        self.order.record("prefill")
        return n


class HeldAfterFirst(SequenceCheckingLlm):
    """Yields one piece, then holds its next step (in the worker thread) until ``release``."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.started = threading.Event()
        self.release = threading.Event()

    def _generate(self, me: int, question: str) -> Iterator[str]:
        self.owner = me
        yield "first "
        self.started.set()
        self.release.wait(deadline())  # the step in flight while the consumer is cancelled
        yield "second "


async def cancel_during_held_step(pool: LlmPool, ctx: HeldAfterFirst, key: str) -> None:
    """Start a generation on ``ctx``, cancel it while its second step runs, and close it: the
    context stays busy (closing waits behind that step) until ``ctx.release`` is set."""
    gen = pool.generate(request(key, "one"))
    assert await next_piece(gen) == "first "
    step = asyncio.ensure_future(anext(gen))
    await asyncio.to_thread(ctx.started.wait, deadline())
    step.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await step
    await gen.aclose()


def request(key: str, question: str) -> LlmRequest:
    return LlmRequest(key, [Message("system", "sys"), Message("user", question)], 16, 0.0)


async def next_piece(gen: AsyncGenerator[LlmItem, None]) -> str:
    """The stream's next text piece (the engine's reports before it are skipped)."""
    while not is_piece(item := await anext(gen)):
        pass
    assert isinstance(item, str)
    return item


async def collect(gen: AsyncGenerator[LlmItem, None], when_admitted: Callable[[], None] | None = None) -> str:
    """The reply's text; ``when_admitted`` is called as the stream's :class:`Admitted` arrives."""
    text = ""
    async with contextlib.aclosing(gen) as items:
        async for item in items:
            if isinstance(item, Admitted):
                if when_admitted is not None:
                    when_admitted()
            elif is_piece(item):
                assert isinstance(item, str)
                text += item
    return text


async def settled(pool: LlmPool) -> None:
    """Wait until every lease is back (closing happens in the executor, then on the loop)."""
    async with asyncio.timeout(deadline()):
        await pool.drained()
    assert pool.stats().busy == 0


def test_the_detector_catches_two_generations_stepped_in_turn_on_one_context(run: Run, executor: PriorityExecutor) -> None:
    """The bug this engine exists to prevent: two sessions' generators pulled in turn on one context."""
    ctx = SequenceCheckingLlm("shared", pieces=6, step_s=0.002)
    msgs = [Message("user", "a")]

    async def consume() -> str:
        return await collect(iterate_in(executor, lambda: ctx.stream(msgs, 8, 0.0)))

    async def main() -> None:
        results = await asyncio.gather(consume(), consume(), return_exceptions=True)
        assert any(isinstance(r, InterleavedError) for r in results), results

    run(main(), 10)
    assert len(ctx.violations) >= 1


def test_concurrent_generations_each_answer_their_own_prompt_without_interleaving(run: Run, executor: PriorityExecutor) -> None:
    contexts = [SequenceCheckingLlm(f"ctx{i}", pieces=5, step_s=0.001) for i in range(2)]
    pool = LlmPool(contexts, executor)
    steps = Recorder()

    async def ask(key: str, q: str) -> str:
        text = ""
        async with contextlib.aclosing(pool.generate(request(key, q))) as pieces:
            async for piece in pieces:
                if not is_piece(piece):
                    continue
                steps.record(key)
                text += str(piece)
        return text

    async def main() -> None:
        replies = await asyncio.gather(*(ask(f"s{i}", f"q{i}") for i in range(4)))
        for i, reply in enumerate(replies):
            assert reply.startswith(f"q{i} 0."), reply
        await settled(pool)

    run(main(), 10)
    assert all(len(c.violations) == 0 for c in contexts)
    # Two contexts, four requests: the first two interleaved token by token.
    order = steps.items
    assert order.index("s1") < len(order) - order[::-1].index("s0") - 1, order
    assert pool.stats().busy == 0 and pool.stats().waiting == 0


def test_one_context_serialises_requests_in_arrival_order(run: Run, executor: PriorityExecutor) -> None:
    ctx = SequenceCheckingLlm("only", pieces=3)
    pool = LlmPool([ctx], executor)
    admitted = Recorder()

    async def main() -> None:
        gens = [collect(pool.generate(request(f"s{i}", f"q{i}")), lambda i=i: admitted.record(i)) for i in range(3)]  # type: ignore[misc]
        replies = await asyncio.gather(*gens)
        assert [r.split(" ")[0] for r in replies] == ["q0", "q1", "q2"]
        await settled(pool)

    run(main(), 10)
    assert admitted.items == [0, 1, 2]
    assert len(ctx.violations) == 0


def test_a_conversation_returns_to_its_context_after_others_spoke(run: Run, executor: PriorityExecutor) -> None:
    contexts = [SequenceCheckingLlm(f"ctx{i}") for i in range(2)]
    pool = LlmPool(contexts, executor)

    async def main() -> None:
        for key in ("a", "b", "a", "b", "b", "a"):
            await collect(pool.generate(request(key, key)))
            await settled(pool)

    run(main(), 10)
    slots = {key: {i for k, i in pool.slot_history if k == key} for key in ("a", "b")}
    assert len(slots["a"]) == len(slots["b"]) == 1 and slots["a"] != slots["b"], pool.slot_history


def test_least_recently_used_context_is_reused_when_all_are_owned(run: Run, executor: PriorityExecutor) -> None:
    pool = LlmPool([SequenceCheckingLlm(f"ctx{i}") for i in range(2)], executor)

    async def main() -> None:
        for key in ("a", "b", "a", "c"):  # c takes b's context: a used its own more recently
            await collect(pool.generate(request(key, key)))
            await settled(pool)

    run(main(), 10)
    history = dict(pool.slot_history[:2])
    assert pool.slot_history[-1] == ("c", history["b"])


def test_a_conversation_waits_for_its_own_closing_context_rather_than_going_cold(run: Run, executor: PriorityExecutor) -> None:
    """A retracted speculation is still closing when the same session asks again: it gets the same
    context (its warm prefix), not the free one."""
    held = HeldAfterFirst("ctx0")
    pool = LlmPool([held, SequenceCheckingLlm("ctx1")], executor)

    async def main() -> None:
        await cancel_during_held_step(pool, held, "a")
        again = asyncio.ensure_future(collect(pool.generate(request("a", "two"))))
        await asyncio.sleep(0)
        assert pool.stats().waiting == 1  # waiting for ctx0, although ctx1 is free
        held.release.set()
        await again
        await settled(pool)

    run(main(), 10)
    assert [slot for key, slot in pool.slot_history] == [0, 0]


def test_a_newcomer_takes_a_free_context_while_an_earlier_waiter_waits_for_its_own(run: Run, executor: PriorityExecutor) -> None:
    held = HeldAfterFirst("ctx0")
    pool = LlmPool([held, SequenceCheckingLlm("ctx1")], executor)

    async def main() -> None:
        await cancel_during_held_step(pool, held, "a")
        again = asyncio.ensure_future(collect(pool.generate(request("a", "two"))))  # waits for ctx0
        await asyncio.sleep(0)
        admitted = asyncio.Event()
        other = asyncio.ensure_future(collect(pool.generate(request("b", "other")), admitted.set))
        # b finds ctx1 free and gets it now, although a waits ahead of it in the queue (for ctx0,
        # whose closing waits behind the step still running).
        await asyncio.wait_for(admitted.wait(), deadline())
        assert pool.stats().waiting == 1
        held.release.set()
        assert (await other).startswith("other")
        await again

    run(main(), 10)
    assert pool.slot_history[-2:] == [("b", 1), ("a", 0)]


def test_cancelling_a_generation_closes_it_in_the_executor_then_frees_the_context(run: Run, executor: PriorityExecutor) -> None:
    closed = Recorder()

    class Tracked(SequenceCheckingLlm):
        def _generate(self, me: int, question: str) -> Iterator[str]:
            try:
                yield from super()._generate(me, question)
            finally:
                closed.record(threading.current_thread().name)

    pool = LlmPool([Tracked("ctx0", pieces=1000, step_s=0.002)], executor)
    got = Recorder()

    async def main() -> None:
        async def consume() -> None:
            async for piece in pool.generate(request("a", "q")):
                if is_piece(piece):
                    got.record(piece)

        task = asyncio.create_task(consume())
        await got.wait(2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await settled(pool)
        assert pool.finished == {"abort": 1}
        assert await collect(pool.generate(request("b", "next"))) != ""

    run(main(), 10)
    assert pool.finished == {"abort": 1, "stop": 1}
    assert closed.items[0] == "test-llm"
    assert len(got) < 1000  # stopped early, not drained


def test_a_cancelled_waiter_leaves_the_queue_and_takes_no_context(run: Run, executor: PriorityExecutor) -> None:
    pool = LlmPool([SequenceCheckingLlm("ctx0", pieces=3, step_s=0.01)], executor)

    async def main() -> None:
        first = asyncio.ensure_future(collect(pool.generate(request("a", "qa"))))
        await asyncio.sleep(0)
        waiting = asyncio.ensure_future(collect(pool.generate(request("b", "qb"))))
        await asyncio.sleep(0)  # let it reach the queue
        assert pool.stats().waiting == 1
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert pool.stats().waiting == 0
        assert (await first).startswith("qa")
        await settled(pool)

    run(main(), 10)
    assert [k for k, _ in pool.slot_history] == ["a"]


def test_an_exception_in_a_step_propagates_and_frees_the_context(run: Run, executor: PriorityExecutor) -> None:
    class Failing(SequenceCheckingLlm):
        def _generate(self, me: int, question: str) -> Iterator[str]:
            yield "partial "
            raise RuntimeError("model broke")

    pool = LlmPool([Failing("ctx0")], executor)

    async def main() -> None:
        with pytest.raises(RuntimeError, match="model broke"):
            await collect(pool.generate(request("a", "q")))
        await settled(pool)
        with pytest.raises(RuntimeError):
            await collect(pool.generate(request("a", "q")))
        await settled(pool)

    run(main(), 10)
    assert pool.finished == {"error": 2}


def test_new_generations_step_before_the_later_tokens_of_long_ones(run: Run, executor: PriorityExecutor) -> None:
    """Least-served first: a turn that just started gets its first tokens ahead of the tenth token
    of another session's reply."""
    order = Recorder()

    pool = LlmPool([Logged(order, "ctx0", pieces=30, step_s=0.002), Logged(order, "ctx1", pieces=3, step_s=0.002)], executor)

    async def main() -> None:
        long = asyncio.ensure_future(collect(pool.generate(request("a", "long"))))
        await order.wait(10)
        short = await collect(pool.generate(request("b", "short")))
        assert short.startswith("short")
        await long

    run(main(), 10)
    items = order.items
    last_short = len(items) - 1 - items[::-1].index("short")
    # While "short" produced its 3 tokens, "long" got at most one step in between each.
    assert items[last_short - 4 : last_short + 1].count("short") >= 3, items


def test_prime_warms_every_context_and_forgets_affinity(run: Run, executor: PriorityExecutor) -> None:
    contexts = [SequenceCheckingLlm(f"ctx{i}") for i in range(3)]
    pool = LlmPool(contexts, executor)
    run(collect(pool.generate(request("a", "q"))), 5)
    run(settled(pool), 5)
    pool.prime([Message("system", "sys"), Message("user", "Hello.")])
    assert [c.prompts.items[-1] for c in contexts] == ["Hello."] * 3
    run(collect(pool.generate(request("z", "q"))), 5)
    assert pool.slot_history[-1] == ("z", 0)  # nobody owns a context any more: the first is taken


def test_first_clause_tokens_run_in_admission_order_ahead_of_round_robin(run: Run, executor: PriorityExecutor) -> None:
    """Turns that end together: the first admitted reaches the end of its urgent tokens first, then
    the next (shortest remaining work first), instead of all of them finishing late together."""
    order = Recorder()

    pool = LlmPool([Logged(order, f"ctx{i}", pieces=8, step_s=0.001) for i in range(3)], executor)

    def urgent(key: str) -> LlmRequest:
        return LlmRequest(key, [Message("user", key)], 16, 0.0, pacing=Pacing(4))

    async def main() -> None:
        await asyncio.gather(*(collect(pool.generate(urgent(k))) for k in ("a", "b", "c")))

    run(main(), 10)
    items = order.items
    firsts = {k: [i for i, q in enumerate(items) if q == k][:4] for k in "abc"}
    assert max(firsts["a"]) < min(firsts["b"]) and max(firsts["b"]) < min(firsts["c"]), items
    assert len(items) == 24  # every token of every reply still came


def test_urgency_ends_with_the_token_that_completes_the_first_clause(run: Run, executor: PriorityExecutor) -> None:
    """The caller judges the first clause complete in the worker thread (``Pacing.piece``), so the
    next session's first clause runs at once: judged only when the token reaches the event loop,
    the worker would already have decoded one more token of the finished clause ahead of it."""
    order = Recorder()
    pool = LlmPool([Logged(order, "ctx0", pieces=6, step_s=0.001), Logged(order, "ctx1", pieces=4, step_s=0.001)], executor)
    gate = threading.Event()
    seen: list[str] = []

    class FirstTwo(Pacing):
        def piece(self, piece: object) -> None:  # the worker thread: the first clause is two tokens
            seen.append(str(piece))
            if len(seen) == 2:
                self.urgent = False

    pacing = FirstTwo(8)

    async def consume(gen: AsyncGenerator[LlmItem, None]) -> str:
        got: list[str] = []
        async with contextlib.aclosing(gen) as pieces:
            async for piece in pieces:
                if not isinstance(piece, str):
                    continue
                got.append(piece)
                if len(got) == 2:
                    pacing.urgent = False  # what the stage does on the loop, when the token gets there
        return "".join(got)

    async def main() -> tuple[str, str]:
        blocker = asyncio.wrap_future(executor.submit_at(-5, gate.wait, deadline()))
        a = asyncio.ensure_future(consume(pool.generate(LlmRequest("a", [Message("user", "a")], 16, 0.0, pacing=pacing))))
        await asyncio.sleep(0)
        b = asyncio.ensure_future(collect(pool.generate(LlmRequest("b", [Message("user", "b")], 16, 0.0, pacing=Pacing(8)))))
        await asyncio.sleep(0)
        gate.set()
        await blocker
        return await a, await b

    text_a, text_b = run(main(), 10)
    assert text_a.startswith("a") and text_b.startswith("b")
    assert order.items[:6] == ["a", "a", "b", "b", "b", "b"], order.items
    assert order.items.count("a") == 6  # the rest of "a" still came


def test_steps_run_on_one_thread_while_other_models_are_busy(run: Run, executor: PriorityExecutor) -> None:
    ctx = SequenceCheckingLlm("ctx0", pieces=2)
    pool = LlmPool([ctx], executor, threads=2)
    busy = [True]
    pool.contended = lambda: busy[0]
    run(collect(pool.generate(request("a", "q"))), 5)
    assert set(ctx.threads.items) == {1}
    busy[0] = False
    run(collect(pool.generate(request("a", "q"))), 5)
    assert ctx.threads.items[-1] == 2


# ---------------------------------------------------------------------------- prefill


def test_prefill_runs_on_the_context_the_turn_then_gets(run: Run, executor: PriorityExecutor) -> None:
    contexts = [SequenceCheckingLlm(f"ctx{i}") for i in range(3)]
    pool = LlmPool(contexts, executor)

    async def main() -> tuple[int, str]:
        await collect(pool.generate(request("a", "first turn")))  # "a" owns a context
        await collect(pool.generate(request("b", "other turn")))
        n = await pool.prefill("a", [Message("system", "sys"), Message("user", "tell me a")])
        answer = await collect(pool.generate(request("a", "tell me a joke")))
        await settled(pool)
        return n, answer

    n, answer = run(main(), 10)
    assert n == 3 and pool.stats().prefilled_tokens == 3
    own = next(c for c in contexts if c.prompts.items and c.prompts.items[0] == "first turn")
    # Prefilled where "a" was served, and its turn was served there again: the prefix is warm.
    assert own.prefills.items == ["tell me a"] and own.prompts.items == ["first turn", "tell me a joke"]
    assert answer.startswith("tell me a joke")
    assert all(not c.violations for c in contexts)


def test_prefill_never_waits_for_a_busy_context_nor_takes_one_from_a_running_generation(run: Run, executor: PriorityExecutor) -> None:
    held = HeldAfterFirst("held")
    pool = LlmPool([held], executor)

    async def main() -> tuple[int, int, str]:
        gen = pool.generate(request("a", "one"))
        assert await next_piece(gen) == "first "
        # "a"'s own context is busy, and there is no other: nothing to do, at once.
        own = await asyncio.wait_for(pool.prefill("a", [Message("user", "tell me")]), deadline())
        other = await asyncio.wait_for(pool.prefill("b", [Message("user", "tell me")]), deadline())
        held.release.set()
        rest = "".join([p async for p in gen if isinstance(p, str)])
        await settled(pool)
        return own, other, rest

    own, other, rest = run(main(), 10)
    assert (own, other) == (0, 0) and rest == "second "
    assert held.prefills.items == [] and not held.violations


def test_prefill_yields_to_first_clauses_and_to_waiting_requests(run: Run, executor: PriorityExecutor) -> None:
    order = Recorder()
    contexts = [Logged(order, f"ctx{i}", pieces=3, step_s=0.002) for i in range(2)]
    pool = LlmPool(contexts, executor)
    gate = threading.Event()

    async def main() -> tuple[int, str]:
        # Hold the worker so that both calls are queued before either runs.
        blocker = asyncio.wrap_future(executor.submit_at(-5, gate.wait, deadline()))
        answer = asyncio.ensure_future(collect(pool.generate(LlmRequest("a", [Message("user", "urgent")], 8, 0.0, pacing=Pacing(8)))))
        await asyncio.sleep(0)  # the generation is admitted and queues its first step
        prefill = asyncio.ensure_future(pool.prefill("b", [Message("user", "coming words")]))
        await asyncio.sleep(0)
        gate.set()
        await blocker
        n = await prefill
        text = await answer
        await settled(pool)
        return n, text

    n, text = run(main(), 10)
    assert n == 2 and text.startswith("urgent")
    # Every urgent step of "a" ran before the prefill (queued after the first, it waited for all).
    assert order.items == ["urgent"] * 3 + ["prefill"]


def test_a_cancelled_prefill_frees_its_context_and_the_turn_still_answers(run: Run, executor: PriorityExecutor) -> None:
    contexts = [SequenceCheckingLlm("ctx0")]
    pool = LlmPool(contexts, executor)
    gate = threading.Event()

    async def main() -> str:
        blocker = asyncio.wrap_future(executor.submit_at(-5, gate.wait, deadline()))
        task = asyncio.ensure_future(pool.prefill("a", [Message("user", "tell me")]))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        gate.set()
        await blocker
        answer = await collect(pool.generate(request("a", "tell me more")))
        await settled(pool)
        return answer

    assert run(main(), 10).startswith("tell me more")
    # The cancelled prefill never ran (it was still queued).
    assert contexts[0].prefills.items == []


def test_a_turn_takes_its_context_from_a_prefill_that_has_not_started(run: Run, executor: PriorityExecutor) -> None:
    """A prefill queued behind other sessions' first clauses holds its context's lease; the turn it
    was for must not wait for it (that was a wait of up to 5 s at 8 sessions): it is cancelled."""
    contexts = [SequenceCheckingLlm("ctx0"), SequenceCheckingLlm("ctx1")]
    pool = LlmPool(contexts, executor)
    gate = threading.Event()

    async def main() -> tuple[int, bool, str]:
        await collect(pool.generate(request("a", "earlier turn")))  # "a" owns a context
        blocker = asyncio.wrap_future(executor.submit_at(-5, gate.wait, deadline()))  # the worker is busy
        prefill = asyncio.ensure_future(pool.prefill("a", [Message("user", "tell me")]))
        await asyncio.sleep(0)
        assert pool.stats().busy == 1  # the prefill holds "a"'s context, queued
        admitted = asyncio.Event()
        answer = asyncio.ensure_future(collect(pool.generate(request("a", "tell me more")), admitted.set))
        await asyncio.wait_for(admitted.wait(), deadline())  # while the worker is still busy
        admitted_while_busy = not gate.is_set()
        gate.set()
        await blocker
        text = await answer
        n = await prefill
        await settled(pool)
        return n, admitted_while_busy, text

    n, admitted_while_busy, text = run(main(), 10)
    assert admitted_while_busy and n == 0 and text.startswith("tell me more")
    assert all(c.prefills.items == [] for c in contexts)
    assert [c.prompts.items for c in contexts if c.prompts.items] == [["earlier turn", "tell me more"]]


class Judging(SequenceCheckingLlm):
    """Tells the sentence-end probability as the number of the user's words over ten, on its own
    sequence state (judging evaluates the prompt: it takes the state like a prefill)."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.judged = Recorder()

    def end_probability(self, messages: Sequence[Message], tools: Sequence[Tool] = ()) -> float | None:
        self.judged.record((threading.current_thread().name, messages[-1].content))
        return len(messages[-1].content.split()) / 10


def test_the_sentence_end_verdict_is_read_on_the_generation_context_before_its_first_piece(run: Run, executor: PriorityExecutor) -> None:
    contexts = [Judging(f"ctx{i}") for i in range(2)]
    pool = LlmPool(contexts, executor)
    told: dict[str, list[tuple[float, int]]] = {"a": [], "b": []}
    seen: dict[str, list[str]] = {"a": [], "b": []}

    async def ask(key: str, question: str, judge: bool) -> str:
        req = LlmRequest(key, [Message("system", "sys"), Message("user", question)], 16, 0.0, end_probability=judge)
        async with contextlib.aclosing(pool.generate(req)) as pieces:
            async for piece in pieces:
                if isinstance(piece, EndProbability):  # how many pieces had come by then
                    told[key].append((piece.p, len(seen[key])))
                elif isinstance(piece, str):
                    seen[key].append(piece)
        return "".join(seen[key])

    async def main() -> list[str]:
        answers = await asyncio.gather(ask("a", "how many wheels", True), ask("b", "what colour is the sky today", True))
        await collect(pool.generate(request("a", "not judged")))
        await settled(pool)
        return list(answers)

    answers = run(main(), 10)
    assert told == {"a": [(0.3, 0)], "b": [(0.6, 0)]}  # once each, its own words, before any piece
    assert answers[0].startswith("how many wheels") and answers[1].startswith("what colour is the sky today")
    judged = [item for c in contexts for item in c.judged.items]
    assert sorted(text for _thread, text in judged) == ["how many wheels", "what colour is the sky today"]  # never for "not judged"
    assert all(thread.startswith("test-llm") for thread, _text in judged)
    assert all(not c.violations for c in contexts)
