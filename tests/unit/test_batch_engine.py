"""The batched engine's scheduling: one step carries every generation's next token, each
conversation keeps its own sequence, prefixes are copied, cancellation drops one sequence only.

The core is :class:`~tests.unit.fake_batch.FakeBatch`, whose answers depend on the cells each
sequence holds: a mix-up of sequences, a lost prefix or a token put in the wrong place shows as a
wrong answer or a failed assertion in its step.  The real model's tests are in
tests/integration/test_batch_engine.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncGenerator, Iterator
from typing import Any

import pytest

from voiceagent.backends.batch_engine import BatchedEngine
from voiceagent.backends.protocols import Admitted, EndProbability, LlmItem, LlmRequest, Pacing, Usage, is_piece
from voiceagent.errors import EngineError
from voiceagent.tools.spec import Message

from .fake_batch import FakeBatch, render, reply_for
from .fakes import until

SYSTEM = Message("system", "You are terse. " * 4)


def messages(question: str) -> list[Message]:
    return [SYSTEM, Message("user", question)]


@pytest.fixture
def core() -> FakeBatch:
    return FakeBatch()


@pytest.fixture
def engine(core: FakeBatch) -> Iterator[BatchedEngine]:
    eng = BatchedEngine(core, model="fake", ahead=64)  # type: ignore[arg-type]
    yield eng
    eng.close()


async def ask(engine: BatchedEngine, key: str, msgs: list[Message], usages: list[Usage] | None = None, **kw: Any) -> str:
    """The reply's text; its :class:`Usage` item is appended to ``usages``."""
    out = ""
    async with contextlib.aclosing(engine.generate(LlmRequest(key, msgs, 64, 0.0, **kw))) as pieces:
        async for piece in pieces:
            if isinstance(piece, Usage):
                if usages is not None:
                    usages.append(piece)
                continue
            if isinstance(piece, Admitted):
                continue
            assert isinstance(piece, str)
            out += piece
    return out


async def next_piece(gen: AsyncGenerator[LlmItem, None]) -> str:
    """The stream's next text piece (the engine's reports before it are skipped)."""
    while not is_piece(item := await anext(gen)):
        pass
    assert isinstance(item, str)
    return item


def test_simultaneous_generations_each_answer_their_own_prompt_in_shared_steps(engine: BatchedEngine, core: FakeBatch) -> None:
    questions = [f"Question number {i}?" for i in range(4)]
    gate = threading.Event()
    core.gate = gate

    async def main() -> list[str]:
        # The first question's pass holds the step thread until the other three are waiting, so
        # they meet in the steps however fast this machine's threads run today (started at
        # once, the first could finish alone on a loaded machine before the others arrived).
        tasks = [asyncio.ensure_future(ask(engine, "k0", messages(questions[0])))]
        await until(lambda: engine.stats().busy > 0)
        tasks += [asyncio.ensure_future(ask(engine, f"k{i}", messages(q))) for i, q in enumerate(questions) if i]
        await until(lambda: engine.stats().waiting == 3)
        gate.set()
        return list(await asyncio.gather(*tasks))

    answers = asyncio.run(main())
    assert answers == [reply_for(messages(q)) for q in questions]
    # Their reply tokens went through the model together, not one sequence per step.
    widest = max(len({seq for _, _, seq, out in batch if out}) for batch in core.batches)
    assert widest >= 3
    assert engine.finished == {"stop": 4}
    assert core.samplers_open == 0


def test_a_conversation_keeps_its_sequence_and_its_prefix_while_seven_others_talk() -> None:
    core = FakeBatch(sequences=8)
    engine = BatchedEngine(core, model="fake")  # type: ignore[arg-type]
    try:
        first = messages("Where do I live?")
        usage: list[Usage] = []

        async def main() -> None:
            reply = await ask(engine, "me", first, usages=usage)
            await asyncio.gather(*(ask(engine, f"other{i}", messages(f"Other question {i}?")) for i in range(7)))
            second = [*first, Message("assistant", reply), Message("user", "And you?")]
            assert await ask(engine, "me", second, usages=usage) == reply_for(second)

        asyncio.run(main())
        mine = {seq for key, seq in engine.seq_history if key == "me"}
        assert len(mine) == 1
        # The second turn evaluated only what was new: the first turn's prompt and reply were cached.
        assert len(usage) == 2 and usage[1].prompt_tokens is not None and usage[1].reused_tokens is not None
        assert usage[1].prompt_tokens - usage[1].reused_tokens <= len("<a>\x00<u>And you?<a>")
    finally:
        engine.close()


def test_a_new_conversation_copies_a_shared_prefix_instead_of_evaluating_it(engine: BatchedEngine, core: FakeBatch) -> None:
    engine.prime([SYSTEM, Message("user", "Hello.")])
    first, second = messages("A fresh question?"), messages("Another question?")
    asyncio.run(ask(engine, "one", first))  # takes the primed sequence itself
    done = len(core.batches)
    usages: list[Usage] = []
    assert asyncio.run(ask(engine, "two", second, usages=usages)) == reply_for(second)
    (usage,) = usages
    prompt_len = len(core.render.prompt_tokens(second, ()))
    evaluated = sum(1 for batch in core.batches[done:] for _, pos, _, _ in batch if pos < prompt_len)
    assert usage.reused_tokens is not None and usage.reused_tokens >= len("<s>" + SYSTEM.content + "<u>")
    assert evaluated == prompt_len - usage.reused_tokens
    assert engine.stats().shared_tokens >= len(SYSTEM.content)
    # The copy shares the cells: the instructions are held once by the two sequences.
    held = [set(core.cells[seq]) for key, seq in engine.seq_history]
    assert len(held[0] & held[1]) >= len(SYSTEM.content)


def test_cancelling_one_generation_drops_only_its_sequence_within_a_step(core: FakeBatch) -> None:
    # One token ahead of its reader at most: the unread reply cannot finish on its own.
    engine = BatchedEngine(core, model="fake", ahead=1)  # type: ignore[arg-type]
    long_a, long_b = messages("A long one?"), messages("Another long one?")

    async def main() -> tuple[str, str]:
        gen = engine.generate(LlmRequest("a", long_a, 64, 0.0))
        first = await next_piece(gen)
        other = asyncio.ensure_future(ask(engine, "b", long_b))
        await gen.aclose()  # a barge-in
        return first, await other

    first, other = asyncio.run(main())
    assert other == reply_for(long_b)
    assert first == reply_for(long_a)[0]
    assert engine.finished == {"stop": 1, "abort": 1}
    # After the abort was seen, no step carried a token of "a"'s sequence again.
    seq_a = next(seq for key, seq in engine.seq_history if key == "a")
    a_tokens = sum(1 for batch in core.batches for _, _, seq, _ in batch if seq == seq_a)
    assert a_tokens <= len(core.render.prompt_tokens(long_a, ())) + 2
    assert core.samplers_open == 0
    engine.close()


def test_first_clauses_go_first_in_admission_order_when_the_batch_is_full() -> None:
    core = FakeBatch(batch_size=2)
    engine = BatchedEngine(core, model="fake", ahead=64)  # type: ignore[arg-type]
    gate = threading.Event()
    core.gate = gate
    try:

        async def main() -> None:
            # A prefill holds the step thread, so the three turns are admitted together after it.
            hold = asyncio.ensure_future(engine.prefill("other", [SYSTEM, Message("user", "Hm")]))
            await until(lambda: engine.stats().busy > 0)
            tasks = [asyncio.ensure_future(ask(engine, f"k{i}", messages(f"Q{i}?"), pacing=Pacing(3))) for i in range(3)]
            await until(lambda: engine.stats().waiting == 3)
            gate.set()
            await asyncio.gather(hold, *tasks)

        asyncio.run(main())
        seq_of = dict(engine.seq_history)
        plen = len(core.render.prompt_tokens(messages("Q0?"), ()))
        reply_steps: dict[int, list[int]] = {}
        for n, batch in enumerate(core.batches):
            for _, pos, seq, _ in batch:
                if pos >= plen:
                    reply_steps.setdefault(seq, []).append(n)
        # Each earlier admission's first clause (its first three reply tokens after the one the
        # prompt's pass gave) is through before a later one's reply begins.
        for i in range(2):
            earlier, later = reply_steps[seq_of[f"k{i}"]], reply_steps[seq_of[f"k{i + 1}"]]
            assert earlier[1] < later[0]
    finally:
        engine.close()


def test_while_a_first_clause_is_urgent_its_steps_carry_no_other_generation() -> None:
    # At long contexts every sequence in a step adds to its cost, and a first clause waits for
    # each of its steps: the rest of another reply (non-urgent) waits for it instead.
    core = FakeBatch()
    engine = BatchedEngine(core, model="fake", ahead=64)  # type: ignore[arg-type]
    gate = threading.Event()
    core.gate = gate
    try:

        async def main() -> list[str]:
            hold = asyncio.ensure_future(engine.prefill("other", [SYSTEM, Message("user", "Hm")]))
            await until(lambda: engine.stats().busy > 0)
            tasks = [
                asyncio.ensure_future(ask(engine, "calm", messages("Q0?"), pacing=Pacing(0))),
                asyncio.ensure_future(ask(engine, "urgent", messages("Q1?"), pacing=Pacing(4))),
            ]
            await until(lambda: engine.stats().waiting == 2)
            gate.set()
            await hold
            return list(await asyncio.gather(*tasks))

        assert asyncio.run(main()) == [reply_for(messages("Q0?")), reply_for(messages("Q1?"))]
        seq_of = dict(engine.seq_history)
        plen = len(core.render.prompt_tokens(messages("Q0?"), ()))
        urgent_steps = [b for b in core.batches if any(seq == seq_of["urgent"] and plen <= pos < plen + 3 for _, pos, seq, _ in b)]
        assert len(urgent_steps) == 3
        for batch in urgent_steps:
            assert all(seq != seq_of["calm"] for _, _, seq, _ in batch), batch
        assert any(seq == seq_of["calm"] and pos >= plen for b in core.batches for _, pos, seq, _ in b)
    finally:
        engine.close()


def test_a_speculative_prefill_never_shares_a_step_with_a_generation() -> None:
    # On a CPU the model is compute-bound: a speculation's tokens in a step would slow the reply
    # being decoded, so it only fills steps that carry nothing else.
    core = FakeBatch()
    engine = BatchedEngine(core, model="fake", ahead=64, prefill_chunk=4)  # type: ignore[arg-type]
    gate = threading.Event()
    core.gate = gate
    try:

        async def main() -> tuple[str, int]:
            hold = asyncio.ensure_future(engine.prefill("other", [SYSTEM, Message("user", "Hm")]))
            await until(lambda: engine.stats().busy > 0)
            talk = asyncio.ensure_future(ask(engine, "talk", messages("Q0?"), pacing=Pacing(0)))
            await until(lambda: engine.stats().waiting == 1)
            spec = asyncio.ensure_future(engine.prefill("spec", [SYSTEM, Message("user", "Something else entirely, at length")]))
            gate.set()
            await hold
            return await talk, await spec

        answer_, _ = asyncio.run(main())
        assert answer_ == reply_for(messages("Q0?"))
        talk_seq = dict(engine.seq_history)["talk"]
        plen = len(core.render.prompt_tokens(messages("Q0?"), ()))
        replying = [b for b in core.batches if any(seq == talk_seq and pos >= plen for _, pos, seq, _ in b)]
        mixed = [b for b in replying if len({seq for _, _, seq, _ in b}) > 1]
        assert mixed == []
        others = [b for b in core.batches if all(seq != talk_seq for _, _, seq, _ in b)]
        assert others and max(len(b) for b in others[1:]) <= 4  # the speculation, 4 tokens a step
    finally:
        engine.close()


def test_a_consumer_that_stops_reading_stops_its_decoding() -> None:
    core = FakeBatch()
    ahead = 1
    engine = BatchedEngine(core, model="fake", ahead=ahead)  # type: ignore[arg-type]
    consumed = [0]
    over: list[int] = []
    question = messages("Slow reader?")
    plen = len(core.render.prompt_tokens(question, ()))

    def check(entries: list[tuple[int, int, int, bool]]) -> None:
        for _, pos, _, _ in entries:
            # The token at ``pos`` is the (pos - plen + 1)-th reply token fed back in: the one
            # sampled before it was given out, and at most ``ahead`` beyond what was read.
            if pos - plen + 1 > consumed[0] + ahead:
                over.append(pos)

    core.on_decode = check
    try:

        async def main() -> str:
            out = ""
            async for piece in engine.generate(LlmRequest("slow", question, 64, 0.0)):
                if not is_piece(piece):
                    continue
                await asyncio.to_thread(lambda: None)  # a slow reader gives the step thread time
                consumed[0] += 1
                out += str(piece)
            return out

        assert asyncio.run(main()) == reply_for(question)
        assert over == []
    finally:
        engine.close()


def test_a_paused_generation_decodes_nothing_while_others_do_and_goes_on_when_its_reader_reads(
    engine: BatchedEngine, core: FakeBatch
) -> None:
    held, other = messages("A long one?"), messages("Another long one?")
    pieces = [0]
    paused_at = [0]

    class Held(Pacing):
        def piece(self, piece: object) -> None:  # the step thread, before it plans the next step
            pieces[0] += 1
            if pieces[0] == 2:
                self.paused = True  # as the LLM stage does once its first clause is out (Pacing.paused)
                paused_at[0] = len(core.batches)

    pacing = Held()

    async def main() -> tuple[str, str, int]:
        request = LlmRequest("held", held, 64, 0.0, pacing=pacing)
        gen = engine.generate(request)
        text = await next_piece(gen) + await next_piece(gen)
        seq = next(s for key, s in engine.seq_history if key == "held")
        answer = await ask(engine, "other", other)  # steps run meanwhile, 64 tokens ahead allowed
        await until(lambda: len(engine._cond._waiters) == 1)  # type: ignore[attr-defined]  # the step thread sleeps
        during = sum(1 for batch in core.batches[paused_at[0] :] for _, _, s, _ in batch if s == seq)
        pacing.paused = False
        # The reader has taken all there was: only its wait for the next token wakes the step thread.
        async for piece in gen:
            if is_piece(piece):
                text += str(piece)
        return text, answer, during

    text, answer, during = asyncio.run(asyncio.wait_for(main(), 30))
    assert answer == reply_for(other)
    assert text == reply_for(held) and len(text) > 4
    assert during == 0


def test_a_turn_takes_its_sequence_from_its_own_prefill_and_answers(engine: BatchedEngine, core: FakeBatch) -> None:
    gate = threading.Event()
    core.gate = gate

    async def main() -> tuple[int, str]:
        prefill = asyncio.ensure_future(engine.prefill("k", [SYSTEM, Message("user", "Partial words")]))
        await until(lambda: engine.stats().busy > 0)
        turn = asyncio.ensure_future(ask(engine, "k", messages("Partial words here?")))
        gate.set()
        return await prefill, await turn

    evaluated, answer = asyncio.run(main())
    assert answer == reply_for(messages("Partial words here?"))
    head = core.render.head_tokens([SYSTEM, Message("user", "Partial words")], ())
    assert head is not None and evaluated == len(head)  # the turn waited for it, then went on from there
    assert len({seq for key, seq in engine.seq_history if key == "k"}) == 1


def test_a_turn_called_after_its_prefill_waits_for_it_even_when_the_prefill_renders_longer(engine: BatchedEngine, core: FakeBatch) -> None:
    # Long instructions take the prefill longer to render than the short turn behind it: the
    # turn must not overtake it (else the instructions are evaluated in the turn, not before it).
    rendered = threading.Event()
    head_tokens = core.render.head_tokens

    def slow_head(messages: Any, tools: Any) -> Any:
        rendered.wait(30)
        return head_tokens(messages, tools)

    core.render.head_tokens = slow_head  # type: ignore[method-assign]
    warm = [SYSTEM, Message("user", "")]

    async def main() -> tuple[int, str]:
        prefill = asyncio.ensure_future(engine.prefill("k", warm))
        await until(lambda: bool(engine._rendering))
        turn = asyncio.ensure_future(ask(engine, "k", messages("Right behind it?")))
        await until(lambda: engine.stats().waiting == 1)  # the turn is rendered and submitted
        rendered.set()
        return await prefill, await turn

    evaluated, answer = asyncio.run(main())
    assert answer == reply_for(messages("Right behind it?"))
    head = head_tokens(warm, ())
    assert head is not None and evaluated == len(head)


def test_prefill_never_takes_a_sequence_a_turn_needs() -> None:
    core = FakeBatch(sequences=1)
    engine = BatchedEngine(core, model="fake", ahead=1)  # type: ignore[arg-type]
    try:

        async def main() -> tuple[str, int]:
            gen = engine.generate(LlmRequest("a", messages("Busy?"), 64, 0.0))
            first = await next_piece(gen)
            n = await engine.prefill("b", [SYSTEM, Message("user", "Waiting")])
            rest = first + "".join([p async for p in gen if isinstance(p, str)])
            return rest, n

        answer, n = asyncio.run(main())
        assert n == 0
        assert answer == reply_for(messages("Busy?"))
    finally:
        engine.close()


def test_a_full_kv_cache_drops_idle_conversations_first() -> None:
    core = FakeBatch(sequences=4, kv_tokens=160)
    engine = BatchedEngine(core, model="fake")  # type: ignore[arg-type]
    try:

        async def main() -> list[str]:
            return [await ask(engine, f"k{i}", messages(f"Question {i} with some words?")) for i in range(4)]

        answers = asyncio.run(main())
        assert answers == [reply_for(messages(f"Question {i} with some words?")) for i in range(4)]
        assert core.live_cells() <= 160
    finally:
        engine.close()


def test_a_failing_step_fails_its_generations_and_the_engine_goes_on(engine: BatchedEngine, core: FakeBatch) -> None:
    core.fail_next = True

    async def main() -> str:
        with pytest.raises(EngineError, match="fake model failed"):
            await ask(engine, "a", messages("First?"))
        return await ask(engine, "a", messages("Second?"))

    assert asyncio.run(main()) == reply_for(messages("Second?"))
    assert engine.finished == {"error": 1, "stop": 1}


def test_the_sentence_end_verdict_comes_in_the_prompt_pass_before_the_first_piece(engine: BatchedEngine, core: FakeBatch) -> None:
    seen: list[object] = []

    async def main() -> None:
        req = LlmRequest("k", messages("Is it over?"), 64, 0.0, end_probability=True)
        async for item in engine.generate(req):
            if not isinstance(item, (Admitted, Usage)):
                seen.append(item)

    asyncio.run(main())
    assert isinstance(seen[0], EndProbability) and seen[1] == reply_for(messages("Is it over?"))[0]
    assert sum(isinstance(item, EndProbability) for item in seen) == 1
    # Judged where the words end, without their "?": the fake model predicts a space there.
    assert seen[0].p == pytest.approx(0.0, abs=1e-3)


def test_closing_the_engine_fails_queued_generations_instead_of_hanging(core: FakeBatch) -> None:
    engine = BatchedEngine(core, model="fake")  # type: ignore[arg-type]
    gate = threading.Event()
    core.gate = gate

    async def main() -> None:
        task = asyncio.ensure_future(ask(engine, "a", messages("Never?")))
        await until(lambda: engine.stats().busy > 0)
        closer = threading.Thread(target=engine.close)
        closer.start()
        gate.set()
        with pytest.raises(EngineError):
            await task
        closer.join()

    asyncio.run(main())
    assert core.closed


def long_history(name: str, turns: int = 8) -> list[Message]:
    msgs = [SYSTEM]
    for i in range(turns):
        msgs += [Message("user", f"{name} asks question {i} " + "q" * 20), Message("assistant", f"Answer {i} " + "a" * 30)]
    return msgs


def test_a_cut_conversation_moves_its_kept_turns_back_instead_of_reading_them_again(engine: BatchedEngine, core: FakeBatch) -> None:
    history = long_history("Ann")
    asyncio.run(ask(engine, "ann", [*history, Message("user", "Before the cut?")]))
    # The fitter dropped the three oldest turns: the instructions, then turns 3 to 7.
    cut = [SYSTEM, *history[7:], Message("user", "After the cut?")]
    done = len(core.batches)
    usages: list[Usage] = []
    assert asyncio.run(ask(engine, "ann", cut, usages=usages)) == reply_for(cut)  # the cells hold exactly the cut prompt
    (usage,) = usages
    prompt_len = len(core.render.prompt_tokens(cut, ()))
    evaluated = sum(1 for batch in core.batches[done:] for _, pos, _, _ in batch if pos < prompt_len)
    kept = len(core.render.tokenize("".join(f"<{m.role[0]}>{m.content}" for m in history[7:])))
    assert usage.reused_tokens is not None and usage.reused_tokens >= len(SYSTEM.content) + kept - 8
    assert evaluated == prompt_len - usage.reused_tokens
    assert len(core.shifts) == 1 and engine.stats().shifted_tokens == core.shifts[0][3]


def test_without_context_shift_a_cut_conversation_is_read_again(core: FakeBatch) -> None:
    engine = BatchedEngine(core, model="fake", ahead=64, context_shift=False)  # type: ignore[arg-type]
    try:
        history = long_history("Ann")
        before = [*history, Message("user", "Before the cut?")]
        asyncio.run(ask(engine, "ann", before))
        cut = [SYSTEM, *history[7:], Message("user", "After the cut?")]
        usages: list[Usage] = []
        assert asyncio.run(ask(engine, "ann", cut, usages=usages)) == reply_for(cut)
        (usage,) = usages
        a, b = render(before), render(cut)
        common = next(i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y)  # the instructions, "<u>Ann asks question "
        assert usage.reused_tokens == common
        assert not core.shifts and engine.stats().shifted_tokens == 0
    finally:
        engine.close()


def test_cells_another_sequence_shares_are_never_moved(engine: BatchedEngine, core: FakeBatch) -> None:
    # A second conversation with the same history (a client that reconnected and replayed it)
    # copies the first one's cells; a cut of the first must not move them under the second.
    history = long_history("Ann")
    asyncio.run(ask(engine, "first", [*history, Message("user", "Before the cut?")]))
    asyncio.run(ask(engine, "second", [*history, Message("user", "Me too?")]))
    cut = [SYSTEM, *history[7:], Message("user", "After the cut?")]
    assert asyncio.run(ask(engine, "first", cut)) == reply_for(cut)
    assert not core.shifts  # read again instead (the fake fails a step that moves a shared cell)
    again = [*history, Message("user", "Me too?"), Message("assistant", "fine"), Message("user", "Still there?")]
    assert asyncio.run(ask(engine, "second", again)) == reply_for(again)


def test_a_prefill_whose_caller_gave_up_is_still_waited_for_by_drained(engine: BatchedEngine, core: FakeBatch) -> None:
    # A session that closes cancels its speculative prefill while the step thread is still busy
    # with it.  The job is not released until the thread reaps it; a shutdown's drained() must wait
    # for that (not read the caller's cancellation as its own) and then return.
    gate = threading.Event()
    core.gate = gate

    async def main() -> None:
        prefill = asyncio.ensure_future(engine.prefill("k", [SYSTEM, Message("user", "Partial words")]))
        await until(lambda: engine.stats().busy > 0)
        prefill.cancel()
        with pytest.raises(asyncio.CancelledError):
            await prefill
        drained = asyncio.ensure_future(engine.drained())
        await asyncio.sleep(0)  # drained() takes its snapshot of the jobs while the step is held
        assert not drained.done()
        gate.set()
        await asyncio.wait_for(drained, 30)
        assert engine.stats().busy == 0

    asyncio.run(main())
