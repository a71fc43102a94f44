"""The in-process LLM engine: a few exclusive contexts over one model, stepped fairly on one thread.

Why: one llama.cpp context holds the KV cache of *one* sequence.  Stepping two sessions'
generators in turn on it runs each step on the other's state (llama.cpp aborts the process).
Here every generation leases a context of its own for its whole life:

* **Exclusive leases.**  A context is leased to one generation until that generation's iterator
  has been closed *in the executor*; only then can another lease it.
* **Affinity with LRU reuse.**  A conversation (``LlmRequest.key``) gets the context it used last
  while that is free, so its prompt prefix is still in the KV cache.  If its own context is still
  closing its previous generation (a retracted speculation), it waits for that one rather than
  starting cold elsewhere.  Otherwise it takes a context nobody owns, else the least recently
  used one.  With as many contexts as active conversations nobody's prefix is evicted.
* **Fair queueing.**  Requests that find no context wait in arrival order.
* **One thread, token-step scheduling.**  Every step (the prompt evaluation plus first token, then
  one token per step) is a separate call on one :class:`PriorityExecutor`, so steps of different
  generations interleave.  The first urgent steps of a generation (its first clause: someone is
  waiting for them; its :class:`~voiceagent.backends.protocols.Pacing` sees each token in the
  worker thread, so urgency ends with the token that completes the clause, not one token later)
  run ahead of every later token, in admission order: when many
  turns end at once, the first admitted reaches its first audio first, then the next, rather
  than all of them reaching it late together (shortest-remaining-work first; round robin would
  finish every first clause at about the time the last one finishes now).  Later tokens are
  needed only at speaking pace; among them the least-served generation goes first.  On a CPU
  the cores run one step at a time (llama.cpp's own threads inside it), which is also what makes
  the state safe to share.

Threads adapt to contention: llama.cpp's threads meet at a barrier many times per token, so when
another model (a Whisper decode, a Piper clause) holds a core, a two-thread step waits for a
descheduled peer at every barrier and runs several times slower than one thread would.  Each step
therefore runs on ``threads`` threads when the other model executors are idle and on one thread
while any of them is busy (``contended``, wired by the registry).

Prefill: :meth:`LlmPool.prefill` leases the context the conversation's next turn would get (never
waiting: a busy context, or requests already waiting, mean no prefill) and evaluates the coming
prompt on it at the priority of later tokens (below every first clause: it is speculation), then
frees it with the conversation's affinity kept.  A prefill that has not started yet gives way
to any request that needs its context (the conversation's own turn, or one that finds no free
context): it is cancelled and the context freed at once, so speculation never holds a turn up.

Cancellation: closing or cancelling the iterator of :meth:`LlmPool.generate` closes the token
generator in the executor after the step in flight (llama.cpp stops decoding), then releases the
lease; :attr:`LlmPool.finished` then counts it as ``abort`` (a generation that ran to its end
counts as ``stop``, one whose model raised as ``error``).  A queued request that is cancelled
leaves the queue.  ``CancelledError`` propagates.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import functools
import itertools
import time
from collections.abc import AsyncGenerator, Callable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, TypeVar

from voiceagent.backends.protocols import Admitted, EndProbability, LlmContext, LlmItem, LlmRequest, LlmStats, Pacing, Usage
from voiceagent.pipeline.scheduler import PriorityExecutor
from voiceagent.tools.spec import Message, Tool, ToolCall

__all__ = ["LlmPool"]

T = TypeVar("T")
_DONE = object()
_CLOSE_PRIORITY = -1  # a closing generation frees its context: let it go first
_LATE = 1 << 40  # priorities of non-urgent tokens start here (urgent ones count admissions from 0)


@dataclass
class _Slot:
    index: int
    context: LlmContext
    owner: str | None = None
    busy: bool = False
    last_used: int = 0
    prefill: Future[int] | None = None  # the prefill that holds the lease, if one does


@dataclass
class _Waiter:
    key: str
    future: asyncio.Future[_Slot]


def _cancelling() -> bool:
    """Whether the current task itself is being cancelled (not only a future it awaits)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def _step(it: Iterator[T]) -> T | object:
    return next(it, _DONE)


class _Steps:
    """The token steps of one generation on the pool's executor.

    The urgent steps (:meth:`Pacing.urgent_at <voiceagent.backends.protocols.Pacing.urgent_at>`) chain: the call
    that starts the generator (:meth:`begin`) and each urgent step, in the worker thread, queue
    the next before their own result reaches the event loop, so while a generation is urgent the
    worker never finds its queue without that generation's next step, and priority (admission
    order) decides: lower-priority work (a later token, a prefill) cannot slip in between.
    Later steps are queued one at a time as the consumer asks for them, so a consumer that pauses
    (the LLM stage waiting for the first audio) pauses the decoding too.  At most
    ``pacing.urgent_tokens`` tokens are decoded ahead of the consumer.
    """

    def __init__(
        self,
        pool: LlmPool,
        context: LlmContext,
        admitted: int,
        pacing: Pacing,
    ) -> None:
        self.pool = pool
        self.context = context
        self.it: Iterator[str | ToolCall] | None = None
        self.admitted = admitted
        self.pacing = pacing
        self.queue: collections.deque[Future[object]] = collections.deque()
        self.submitted = 0
        self.closed = False

    def _submit(self) -> None:
        n = self.submitted
        self.submitted += 1
        priority = self.admitted if self.pacing.urgent_at(n) else _LATE + n
        self.queue.append(self.pool.executor.submit_at(priority, self._run))

    def begin(self, make: Callable[[], Iterator[str | ToolCall]]) -> None:
        """Start the generator (in the worker thread) and, while urgent, queue its first step."""
        self.it = make()
        if not self.closed and self.pacing.urgent_at(0):
            self._submit()

    def close_iterator(self) -> None:
        """Close the generator, if it was started (in the worker thread)."""
        close = getattr(self.it, "close", None)
        if close is not None:
            close()

    def _run(self) -> object:
        """One step, in the worker thread."""
        if self.closed or self.it is None:
            return _DONE
        self.pool._threads_now(self.context)
        t0 = time.perf_counter()
        item = _step(self.it)
        self.pool._decode_s += time.perf_counter() - t0
        if item is not _DONE:
            # Before the next urgent step is queued: the piece may end the first clause.
            self.pacing.piece(item)  # type: ignore[arg-type]
        if item is not _DONE and not self.closed and self.pacing.urgent_at(self.submitted):
            self._submit()
        return item

    async def next(self) -> object:
        """The next piece, or ``_DONE``.  Cancelling the caller takes a queued step off the queue."""
        if not self.queue:
            self._submit()
        item = await asyncio.wrap_future(self.queue[0])
        self.queue.popleft()
        return item

    def cancel(self) -> None:
        """No further step touches the generator; queued ones are dropped."""
        self.closed = True
        for fut in list(self.queue):  # the worker may be appending one more right now
            fut.cancel()


class LlmPool:
    """:class:`~voiceagent.backends.protocols.LlmEngine` over ``contexts`` of one model.

    ``contexts`` are used only from ``executor``'s thread.  ``count_prompt`` (optional) returns
    ``(prompt_tokens, reused_tokens)`` for a context and messages, for the prefix-reuse metrics;
    it is called in the executor before the generation starts.
    """

    def __init__(
        self,
        contexts: Sequence[LlmContext],
        executor: PriorityExecutor,
        name: str = "llama_cpp",
        count_prompt: Callable[[LlmContext, Sequence[Message], Sequence[Tool]], tuple[int, int]] | None = None,
        threads: int = 1,
        model: str = "",
        window: int | None = None,
        tokens: Callable[[Sequence[Message], Sequence[Tool]], int] | None = None,
        shared: Callable[[], int] | None = None,
        shifted: Callable[[], int] | None = None,
    ) -> None:
        """``window``: the context length of every context; ``tokens``: the length of a rendered
        prompt in the model's tokens, thread-safe and touching no context (for
        :meth:`count_tokens`, run in a worker thread); ``shared``: the prompt tokens the contexts
        have copied from each other's evaluated prefixes so far, ``shifted``: those context shifts
        brought back (both for :meth:`stats`)."""
        if not contexts:
            raise ValueError("an LLM pool needs at least one context")
        self.name = name
        self.model = model
        self.window = window
        self._tokens = tokens
        self._shared = shared
        self._shifted = shifted
        self.executor = executor
        self._slots = [_Slot(i, c) for i, c in enumerate(contexts)]
        self._waiters: collections.deque[_Waiter] = collections.deque()
        self._drained: list[asyncio.Future[None]] = []
        self._clock = itertools.count(1)
        self._admissions = itertools.count()
        self._count_prompt = count_prompt
        self.threads = threads
        self.contended: Callable[[], bool] = lambda: False
        """True while other model work shares the cores (checked before every step)."""
        self._prompt_tokens = 0
        self._reused_tokens = 0
        self._generated = 0
        self._decode_s = 0.0
        self._prefilled = 0
        self.finished: collections.Counter[str] = collections.Counter()
        """Generations by how they ended (``stop``, ``abort``: closed in the executor, ``error``)."""
        self.slot_history: list[tuple[str, int]] = []
        """(key, slot index) of every lease, in order (bounded: the last 1000)."""

    @property
    def contexts(self) -> list[LlmContext]:
        return [s.context for s in self._slots]

    # ------------------------------------------------------------------ leases

    def _pick(self, key: str) -> _Slot | None:
        own = [s for s in self._slots if s.owner == key]
        if own:
            # Its prefix is there; if that context is still busy (its previous generation is
            # closing), waiting for it beats re-reading the whole history elsewhere.
            return None if own[0].busy else own[0]
        free = [s for s in self._slots if not s.busy]
        if not free:
            return None
        unowned = [s for s in free if s.owner is None]
        return unowned[0] if unowned else min(free, key=lambda s: s.last_used)

    def _take(self, slot: _Slot, key: str) -> _Slot:
        for other in self._slots:
            if other is not slot and other.owner == key:
                other.owner = None
        slot.busy = True
        slot.owner = key
        slot.last_used = next(self._clock)
        self.slot_history.append((key, slot.index))
        del self.slot_history[:-1000]
        return slot

    def _preempt_prefills(self, key: str) -> None:
        """Cancel prefills not yet started that hold ``key``'s own context, or any context if none
        is free (their done callbacks free the contexts, and the waiters are served)."""
        own = [s for s in self._slots if s.owner == key and s.prefill is not None]
        held = own or ([s for s in self._slots if s.prefill is not None] if all(s.busy for s in self._slots) else [])
        for slot in held:
            assert slot.prefill is not None
            slot.prefill.cancel()  # False when it is running: then it finishes first (a few tokens)

    async def _acquire(self, key: str) -> _Slot:
        self._preempt_prefills(key)
        if not self._waiters:
            slot = self._pick(key)
            if slot is not None:
                return self._take(slot, key)
        waiter = _Waiter(key, asyncio.get_running_loop().create_future())
        self._waiters.append(waiter)
        self._dispatch()  # earlier waiters may be waiting for their own busy context only
        try:
            return await waiter.future
        except asyncio.CancelledError:
            if waiter.future.done() and not waiter.future.cancelled():
                self._release(waiter.future.result())  # handed over just as we were cancelled
            elif waiter in self._waiters:
                self._waiters.remove(waiter)
            raise

    def _release(self, slot: _Slot) -> None:
        slot.busy = False
        self._dispatch()
        if not any(s.busy for s in self._slots):
            for fut in self._drained:
                if not fut.done():
                    fut.set_result(None)
            self._drained.clear()

    async def drained(self) -> None:
        """Return once no context is leased (at once if none is): every generation has been closed."""
        if any(s.busy for s in self._slots):
            fut = asyncio.get_running_loop().create_future()
            self._drained.append(fut)
            await fut

    def _dispatch(self) -> None:
        # In arrival order, each waiter that can be served now is; one waiting for its own busy
        # context does not hold back the others.
        for waiter in list(self._waiters):
            if waiter.future.done():
                self._waiters.remove(waiter)
                continue
            slot = self._pick(waiter.key)
            if slot is None:
                if not any(not s.busy for s in self._slots):
                    return
                continue
            self._waiters.remove(waiter)
            waiter.future.set_result(self._take(slot, waiter.key))

    # ------------------------------------------------------------------ generation

    async def _call(self, priority: int, fn: Callable[[], T]) -> T:
        ctx = contextvars.copy_context()
        return await asyncio.wrap_future(self.executor.submit_at(priority, ctx.run, fn))

    def _threads_now(self, context: LlmContext) -> None:
        context.set_threads(1 if self.threads > 1 and self.contended() else self.threads)

    async def generate(self, request: LlmRequest) -> AsyncGenerator[LlmItem, None]:
        """Stream the reply on a context leased for this generation (contract: module docstring)."""
        slot = await self._acquire(request.key)
        steps: _Steps | None = None
        finished = False
        failed = False
        try:
            yield Admitted()
            context = slot.context
            msgs = list(request.messages)
            admitted = next(self._admissions)
            # Written by ``make`` in the executor, read here after ``begin`` returns.
            seen: dict[str, Any] = {"prompt": None, "reused": None, "end": None}

            def make() -> Iterator[str | ToolCall]:
                self._threads_now(context)
                if self._count_prompt is not None:
                    total, reused = self._count_prompt(context, msgs, request.tools)
                    self._prompt_tokens += total
                    self._reused_tokens += reused
                    seen["prompt"], seen["reused"] = total, reused
                judge = getattr(context, "end_probability", None)
                if request.end_probability and judge is not None:
                    # The prompt up to the user's last word is evaluated anyway: read the verdict there.
                    seen["end"] = judge(msgs, request.tools)
                return context.stream(msgs, request.max_tokens, request.temperature, request.tools, request.tool_choice)

            steps = _Steps(self, context, admitted, request.pacing)
            await self._call(admitted, functools.partial(steps.begin, make))
            if seen["end"] is not None:
                yield EndProbability(seen["end"])
            generated = 0
            while (item := await steps.next()) is not _DONE:
                self._generated += 1
                generated += 1  # the context yields one piece per token
                yield item  # type: ignore[misc]
            finished = True  # the context is done with: a reader that stops at the usage frees it
            yield Usage(self.model, seen["prompt"], seen["reused"], generated)
        except Exception:
            failed = True
            raise
        finally:
            if finished:
                self.finished["stop"] += 1
                self._release(slot)
            else:
                # Cancelled, closed early or failed: no further step may touch the context, the
                # generator is closed in the executor (after any call of ours still running
                # there, ``make`` included), and only then is the context free.
                if steps is not None:
                    steps.cancel()
                self._close_then_release(steps, slot, "error" if failed else "abort")

    def _close_then_release(self, steps: _Steps | None, slot: _Slot, reason: str) -> None:
        """Close the generator of ``steps`` in the executor (after the step in flight, so one
        that call started is closed too), then free the context and count the generation as
        ``reason``.  If the executor is shut down (the engine closed), the context is freed at once."""
        loop = asyncio.get_running_loop()

        def released() -> None:
            self.finished[reason] += 1
            self._release(slot)

        try:
            fut: Future[Any] = self.executor.submit_at(_CLOSE_PRIORITY, steps.close_iterator if steps is not None else (lambda: None))
        except RuntimeError:
            released()
            return
        fut.add_done_callback(lambda _f: loop.call_soon_threadsafe(released))

    async def prefill(self, key: str, messages: Sequence[Message], tools: tuple[Tool, ...] = ()) -> int:
        """Evaluate ``key``'s coming prompt ahead of its turn (contract: module docstring)."""
        if self._waiters:
            return 0  # contexts are scarce: real requests first
        slot = self._pick(key)
        if slot is None:
            return 0
        prefill = getattr(slot.context, "prefill", None)
        if prefill is None:
            return 0
        self._take(slot, key)
        context = slot.context
        msgs = list(messages)
        loop = asyncio.get_running_loop()

        def run() -> int:
            self._threads_now(context)
            n = int(prefill(msgs, tools))
            self._prefilled += n
            return n

        try:
            fut: Future[int] = self.executor.submit_at(_LATE, contextvars.copy_context().run, run)
        except RuntimeError:  # the engine is closing
            self._release(slot)
            return 0
        slot.prefill = fut

        def freed() -> None:
            slot.prefill = None
            self._release(slot)

        # Freed once the call has run or was skipped, whoever waits for it.
        fut.add_done_callback(lambda _f: loop.call_soon_threadsafe(freed))
        try:
            return await asyncio.wrap_future(fut)
        except asyncio.CancelledError:
            if fut.cancelled() and not _cancelling():
                return 0  # a turn took the context before the prefill started
            raise

    # ------------------------------------------------------------------ the rest of LlmEngine

    def prime(self, messages: Sequence[Message], tools: tuple[Tool, ...] = ()) -> None:
        """Evaluate ``messages`` (offering ``tools``) on every context, one token each, and
        forget all affinity."""

        def run(context: LlmContext) -> None:
            # A prefill first: a context that evaluates long instructions offers them to the
            # others, which copy them instead of evaluating them again (llama_prefix).
            prefill = getattr(context, "prefill", None)
            if prefill is not None:
                prefill(messages, tools)
            for _ in context.stream(messages, 1, 0.0, tools):
                pass

        futures = [self.executor.submit_at(0, run, s.context) for s in self._slots]
        for fut in futures:
            fut.result()
        for slot in self._slots:
            slot.owner = None

    async def count_tokens(self, messages: Sequence[Message], tools: tuple[Tool, ...] = ()) -> int | None:
        """The prompt's length in the model's tokens (None without a counter).  Runs in a worker
        thread, not on the executor: rendering and tokenizing read only the model's vocabulary,
        and a count must not queue behind other sessions' token steps."""
        if self._tokens is None:
            return None
        return await asyncio.to_thread(self._tokens, list(messages), tools)

    def stats(self) -> LlmStats:
        return LlmStats(
            engine=self.name,
            slots=len(self._slots),
            busy=sum(s.busy for s in self._slots),
            waiting=len(self._waiters),
            prompt_tokens=self._prompt_tokens,
            reused_tokens=self._reused_tokens,
            generated_tokens=self._generated,
            decode_seconds=round(self._decode_s, 3),
            prefilled_tokens=self._prefilled,
            shared_tokens=self._shared() if self._shared is not None else 0,
            shifted_tokens=self._shifted() if self._shifted is not None else 0,
        )

    async def aclose(self) -> None:
        """Wait for every lease to come back (nothing of the pool belongs to a loop)."""
        await self.drained()

    def close(self) -> None:
        """Stop the executor (after the step in flight, if any), then free every context that can
        be freed: left to the garbage collector at interpreter exit, llama.cpp's finalisers run
        after the library is unloaded and print tracebacks."""
        self.executor.shutdown(wait=True, cancel_futures=True)
        for slot in self._slots:
            close = getattr(slot.context, "close", None)
            if callable(close):
                close()
