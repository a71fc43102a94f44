"""The embedded LLM engine with continuous batching: every conversation a sequence of one context,
every step one ``llama_decode`` carrying the next token of every active generation.

Why: on a CPU a decode step of a small model is bound by reading the weights, so the next
tokens of 8 conversations cost about 3× one token, not 8× (:mod:`voiceagent.backends.llama_batch`).
The per-context pool (:mod:`voiceagent.backends.llm_pool`) steps one generation at a time and
keeps a copy of the weights per context.

**Sequences.**  The context has ``sequences`` sequence ids.  A conversation (``LlmRequest.key``)
keeps its sequence between turns, so its prompt prefix stays in the KV cache while others talk;
a new conversation takes a sequence nobody owns, else the least recently used idle one.  On
admission a job keeps the longest prefix of its prompt its sequence already holds, or, when
another sequence holds a longer one (the same instructions and tools, or the start-up prime),
copies that sequence's cells (shared, not duplicated: the KV cache is unified) and evaluates
only the rest.  When the KV cache is full, idle sequences are dropped least recently used first.

**Steps.**  One thread runs the steps.  Each step decodes, in one batch of at most ``batch``
tokens: the pending token of every generating sequence that is not too far ahead of its
consumer (while any generation is urgent, one whose first clause someone waits for, only the
urgent ones, in admission order; otherwise the least served first), and then prompt tokens
(chunked prefill: real turns in admission order, then the start-up prime, then speculative
prefills, which run only in a step that carries nothing else, at most ``prefill_chunk`` tokens
of them).  While an urgent generation is decoding, a step carries at most ``chunk`` prompt
tokens, so a long new prompt does not stall first clauses (a step of 64 prompt tokens of the
1.5B took ~200 ms: a first clause of 6 tokens took 4 times as long as on the pool in the
concurrency benchmark).  A generation decodes at most ``ahead`` tokens past what its consumer
has taken (``urgent_tokens`` while urgent): a consumer that pauses pauses its decoding too, and
one that says it is paused (``Pacing.paused``: it waits for TTS's first audio) is left out
of the steps until a read of it wakes the thread again.

**End of sentence.**  With ``LlmRequest.end_probability``, the logits at the end of the user's words
(final punctuation left out) are taken in the same pass as the prompt, when those words'
tokens are a prefix of the prompt's (otherwise the verdict is not given); the verdict goes
to the reader as an :class:`~voiceagent.backends.protocols.EndProbability` item.

**Cancellation.**  Closing or cancelling the iterator of :meth:`BatchedEngine.generate` marks
its job; the step thread drops it before the next step (its sequence keeps what was decoded,
a sampled token not yet decoded is dropped) and counts it as ``abort`` in :attr:`finished`
(``stop``: ran to its end; ``error``: the model failed).  ``CancelledError`` propagates.
Cancelling :meth:`BatchedEngine.prefill` stops it before its next chunk; what it evaluated stays.

Nothing of a sequence is touched outside the step thread; the event loop only queues jobs and
sets flags, under one condition variable that also wakes the thread.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import math
import threading
import time
from collections import Counter
from collections.abc import AsyncGenerator, Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import numpy.typing as npt

from voiceagent.backends.kv_shift import find_gap
from voiceagent.backends.protocols import Admitted, EndProbability, LlmItem, LlmRequest, LlmStats, Usage
from voiceagent.errors import EngineError
from voiceagent.pipeline.scheduler import name_os_thread
from voiceagent.text.clauses import unpunctuated
from voiceagent.tools.format import NO_CALL_GBNF, OPEN, HermesToolParser, new_call_id
from voiceagent.tools.spec import Message, Tool, ToolCall

if TYPE_CHECKING:  # llama.cpp itself only where the engine is built (llama-cpp-python is optional)
    from voiceagent.backends.llama_batch import BatchContext, Sampler

__all__ = ["BatchedEngine", "sentence_end_probability"]

log = logging.getLogger(__name__)

_DONE = object()


@dataclass(frozen=True, slots=True)
class _Admission:
    """Step thread → reader: the job has its sequence, with ``prompt`` tokens of which ``reused``
    were kept from before."""

    prompt: int
    reused: int


_TURN, _PRIME, _PREFILL = 0, 1, 2  # prompt priority, and what a job is
_PROMPT, _JUDGE, _LAST, _NEXT = range(4)  # what a planned token is: prompt, the words' end, the prompt's last, a reply token


class Entry(NamedTuple):
    """One token of a step: ``token`` at position ``pos`` of sequence ``seq``; ``logits``: keep
    the logits after it (to sample or judge from)."""

    token: int
    pos: int
    seq: int
    logits: bool


def sentence_end_probability(logits: npt.NDArray[np.floating[Any]], ends: npt.NDArray[np.int64]) -> float:
    """P(the next token is one of ``ends``) from a position's logits (a softmax in float64)."""
    x = logits.astype(np.float64)
    top = float(x.max())
    log_z = top + math.log(float(np.exp(x - top).sum()))
    return float(np.exp(x[ends] - log_z).sum())


def _lcp(a: Sequence[int], b: Sequence[int]) -> int:
    """The length of the longest common prefix of two token lists."""
    n = min(len(a), len(b))
    if n == 0:
        return 0
    diff = np.flatnonzero(np.asarray(a[:n]) != np.asarray(b[:n]))
    return int(diff[0]) if diff.size else n


@dataclass(eq=False)
class _Job:
    """One use of a sequence: a turn's generation, a speculative prefill, or the start-up prime."""

    kind: int
    key: str
    prompt: list[int]
    order: int
    released: Future[int] = field(default_factory=Future)
    """Resolved (with the prompt tokens this job evaluated) once its sequence is free again."""
    cancelled: bool = False
    seq: _Seq | None = None
    evaluated: int = 0
    # A turn's generation only:
    request: LlmRequest | None = None
    loop: asyncio.AbstractEventLoop | None = None
    queue: asyncio.Queue[object] | None = None
    grammar: str | None = None
    parser: HermesToolParser | None = None
    named: Tool | None = None
    named_text: str = ""
    bias: float = 0.0
    judge_at: int | None = None
    sampler: Sampler | None = None
    detok: Any = None
    token: int | None = None
    """Sampled and given out, not yet decoded (its logits are what the next token comes from)."""
    produced: int = 0
    consumed: int = 0
    done: bool = False
    promoted: bool = False
    """A prefill a turn waits for: its prompt tokens go at a turn's priority."""

    def pending(self) -> int:
        """Prompt tokens not yet evaluated (0 before admission and once it generates)."""
        return len(self.prompt) - len(self.seq.tokens) if self.seq is not None and self.token is None and not self.done else 0


async def _released(job: _Job) -> int:
    """Wait for ``job.released``; cancelling this wait leaves the future alone.  A bare
    ``wrap_future`` would cancel it, and every other waiter (a shutdown's :meth:`BatchedEngine.drained`)
    would then read the caller's cancellation as its own while the job still holds its sequence."""
    return await asyncio.shield(asyncio.wrap_future(job.released))


@dataclass(eq=False)
class _Seq:
    id: int
    tokens: list[int] = field(default_factory=list)
    """Exactly what the KV cache holds for this sequence, position by position."""
    owner: str | None = None
    last_used: int = 0
    job: _Job | None = None


class BatchedEngine:
    """:class:`~voiceagent.backends.protocols.LlmEngine` over one :class:`BatchContext` (contract:
    module docstring).  ``core`` is used only from this engine's step thread from now on."""

    def __init__(
        self,
        core: BatchContext,
        name: str = "llama_cpp",
        model: str = "",
        threads: int = 1,
        call_bias: float = 0.0,
        ahead: int = 8,
        chunk: int = 16,
        prefill_chunk: int = 64,
        context_shift: bool = True,
    ) -> None:
        """``context_shift``: a prompt that is a sequence's cached tokens with a run taken out (a
        conversation cut to fit) moves the cells after the run back instead of evaluating them
        again (:mod:`voiceagent.backends.kv_shift`)."""
        self.core = core
        self.name = name
        self.model = model
        self.window: int | None = core.window
        self.threads = threads
        self.contended: Callable[[], bool] = lambda: False
        """True while other model work shares the cores (checked before every step)."""
        self._call_bias = call_bias
        self._ahead = ahead
        self._chunk = chunk
        self._prefill_chunk = prefill_chunk
        self._context_shift = context_shift and core.can_shift
        self.shifted_tokens = 0
        """Cached tokens brought back by context shifts so far (not evaluated again)."""
        self._render = core.render
        self._seqs = [_Seq(i) for i in range(core.sequences)]
        self._cond = threading.Condition()
        self._incoming: list[_Job] = []
        self._rendering: dict[int, str] = {}
        """Jobs called but still being rendered (order -> key): a later job of the same
        conversation is not admitted before them (calls keep their order, not their renders')."""
        self._waiting: list[_Job] = []
        self._active: list[_Job] = []
        self._orders = itertools.count()
        self._clock = itertools.count(1)
        self._stopping = False
        self._warm = False
        self._prompt_tokens = 0
        self._reused_tokens = 0
        self._shared_tokens = 0
        self._generated = 0
        self._decode_s = 0.0
        self._prefilled = 0
        self.steps = 0
        """Decode steps run; with :attr:`batched_tokens`, the mean batch."""
        self.batched_tokens = 0
        self.finished: Counter[str] = Counter()
        """Generations by how they ended (``stop``, ``abort``: closed early, ``error``)."""
        self.seq_history: list[tuple[str, int]] = []
        """(key, sequence id) of every turn admitted, in order (bounded: the last 1000)."""
        self.busy = False
        """True while a step runs (other models' threads adapt to it, as to a busy executor)."""
        self._thread = threading.Thread(target=self._run, name="llm-batch", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ the event loop's side

    def _announce(self, key: str) -> int:
        """A job of ``key`` is coming: its place in the order is now (see ``_rendering``)."""
        with self._cond:
            order = next(self._orders)
            self._rendering[order] = key
            return order

    def _withdraw(self, order: int) -> None:
        with self._cond:
            self._rendering.pop(order, None)
            self._cond.notify()

    def _submit(self, job: _Job) -> None:
        with self._cond:
            self._rendering.pop(job.order, None)
            if self._stopping:
                self._cond.notify()
                raise EngineError("the LLM engine is closed")
            self._incoming.append(job)
            self._cond.notify()

    def _cancel(self, job: _Job) -> None:
        with self._cond:
            job.cancelled = True
            self._cond.notify()

    def _turn_job(self, request: LlmRequest, loop: asyncio.AbstractEventLoop) -> _Job:
        """Render the request (in a worker thread: tokenizing a long prompt takes milliseconds)."""
        r = self._render
        if r.formatter is None:
            raise EngineError(f"{self.model}: the model has no chat template")
        messages, tools, choice = list(request.messages), request.tools, request.tool_choice
        offered = tools if choice != "none" else ()
        prompt = r.prompt_tokens(messages, tools)
        job = _Job(_TURN, request.key, prompt, 0, request=request, loop=loop, queue=asyncio.Queue())
        job.named = next((t for t in offered if t.name == choice), None)
        if job.named is not None:
            job.grammar = self.core.schema_grammar(json.dumps(dict(job.named.parameters)))
        else:
            required = bool(offered) and choice == "required"
            job.parser = HermesToolParser(open_tag=required, names=[t.name for t in offered]) if offered else None
            if required:
                job.prompt = prompt + r.tokenize(f"{OPEN}\n")
                job.grammar = self.core.json_grammar()
            elif tools and not offered:
                job.grammar = NO_CALL_GBNF
            elif offered and choice == "auto":
                job.bias = self._call_bias
        if request.end_probability and messages and messages[-1].role == "user":
            words = unpunctuated(messages[-1].content)
            head = r.head_tokens([*messages[:-1], Message("user", words)], tools) if words else None
            if head and job.prompt[: len(head)] == head and len(head) < len(job.prompt):
                job.judge_at = len(head) - 1
        if self.window is not None and len(job.prompt) >= self.window:
            raise EngineError(f"a prompt of {len(job.prompt)} tokens does not fit llm.context {self.window}")
        return job

    async def generate(self, request: LlmRequest) -> AsyncGenerator[LlmItem, None]:
        """Stream the reply from the conversation's sequence (contract: module docstring)."""
        loop = asyncio.get_running_loop()
        order = self._announce(request.key)
        try:
            job = await asyncio.to_thread(self._turn_job, request, loop)
        except BaseException:
            self._withdraw(order)
            raise
        assert job.queue is not None
        job.order = order
        self._submit(job)
        finished = False
        prompt: tuple[int | None, int | None] = (None, None)
        generated = 0
        try:
            while True:
                if job.queue.empty():
                    # The reader waits for a token: wake the scheduler, which leaves a paused
                    # generation (Pacing.paused) out of its steps and sleeps when nothing else runs.
                    with self._cond:
                        self._cond.notify()
                item = await job.queue.get()
                if isinstance(item, _Admission):
                    prompt = (item.prompt, item.reused)
                    yield Admitted()
                    continue
                if isinstance(item, EndProbability):
                    yield item
                    continue
                if item is _DONE:
                    finished = True
                    yield Usage(self.model, prompt[0], prompt[1], generated)
                    return
                if isinstance(item, BaseException):
                    finished = True
                    raise item
                with self._cond:
                    job.consumed += 1
                    self._cond.notify()
                self._generated += 1
                generated += 1
                yield item  # type: ignore[misc]
        finally:
            if not finished:
                self._cancel(job)

    async def prefill(self, key: str, messages: Sequence[Message], tools: tuple[Tool, ...] = ()) -> int:
        """Evaluate ``key``'s coming prompt on its sequence, below every turn (contract: module
        docstring); 0 when every sequence is busy or requests wait."""
        order = self._announce(key)
        try:
            head = await asyncio.to_thread(self._render.head_tokens, list(messages), tools)
        except BaseException:
            self._withdraw(order)
            raise
        if not head or (self.window is not None and len(head) >= self.window):
            self._withdraw(order)
            return 0
        job = _Job(_PREFILL, key, head, order)
        self._submit(job)
        try:
            return await _released(job)
        except asyncio.CancelledError:
            self._cancel(job)
            raise

    def prime(self, messages: Sequence[Message], tools: tuple[Tool, ...] = ()) -> None:
        """Evaluate the prompt ``messages`` render to on one sequence that nobody owns, so every
        conversation copies it instead of evaluating it; forget all affinity (blocking)."""
        job = _Job(_PRIME, "", self._render.prompt_tokens(list(messages), tools), next(self._orders))
        self._submit(job)
        job.released.result()

    async def count_tokens(self, messages: Sequence[Message], tools: tuple[Tool, ...] = ()) -> int | None:
        """The prompt's length in the model's tokens (in a worker thread; touches no sequence)."""
        return await asyncio.to_thread(self._render.prompt_length, list(messages), tools)

    def stats(self) -> LlmStats:
        return LlmStats(
            engine=self.name,
            slots=len(self._seqs),
            busy=sum(s.job is not None for s in self._seqs),
            waiting=len(self._waiting) + len(self._incoming),
            prompt_tokens=self._prompt_tokens,
            reused_tokens=self._reused_tokens,
            generated_tokens=self._generated,
            decode_seconds=round(self._decode_s, 3),
            prefilled_tokens=self._prefilled,
            shared_tokens=self._shared_tokens,
            shifted_tokens=self.shifted_tokens,
            steps=self.steps,
            step_tokens=self.batched_tokens,
        )

    async def drained(self) -> None:
        """Return once every job submitted so far has given its sequence back."""
        with self._cond:
            jobs = [*self._incoming, *self._waiting, *self._active]
        for job in jobs:
            await _released(job)

    async def aclose(self) -> None:
        """Wait for every job to end (nothing of the engine belongs to a loop)."""
        await self.drained()

    def close(self) -> None:
        """Stop the step thread (after the step in flight), fail what is still queued, free the model."""
        with self._cond:
            if self._stopping:
                return
            self._stopping = True
            self._cond.notify()
        self._thread.join()
        for job in [*self._incoming, *self._waiting, *self._active]:
            self._end(job, "abort", EngineError("the LLM engine closed"))
        self.core.close()

    # ------------------------------------------------------------------ the step thread

    def _run(self) -> None:
        name_os_thread("llm-batch")
        while True:
            with self._cond:
                while True:
                    if self._stopping:
                        return
                    try:
                        self._reap()
                        self._admit()
                        plan = self._plan()
                    except Exception as exc:  # a bug here must fail the requests, never hang them
                        log.exception("llm: scheduling failed")
                        self._fail([*self._incoming, *self._waiting, *self._active], exc)
                        plan = []
                    if plan:
                        break
                    self._cond.wait()
            self.busy = True
            try:
                self._step(plan)
            except Exception as exc:  # a step that fails fails its jobs, never the thread
                log.exception("llm: a batched step failed")
                self._fail([j for _, j, _ in plan], exc)
            finally:
                self.busy = False

    def _fail(self, jobs: list[_Job], exc: Exception) -> None:
        for job in {id(j): j for j in jobs}.values():
            self._end(job, "error", EngineError(f"the LLM failed: {exc}"), forget=True)

    def _emit(self, job: _Job, item: object) -> None:
        loop, queue = job.loop, job.queue
        if loop is None or queue is None:
            return
        try:
            loop.call_soon_threadsafe(queue.put_nowait, item)
        except RuntimeError:  # its loop has closed: nobody is reading
            job.cancelled = True

    def _end(self, job: _Job, reason: str, error: BaseException | None = None, forget: bool = False) -> None:
        """Finish ``job``: tell its consumer, free its sampler and sequence, count it."""
        if job.done:
            return
        job.done = True
        if job.kind == _TURN:
            self.finished[reason] += 1
            if error is not None or reason != "abort":  # an abort the consumer asked for tells nobody
                self._emit(job, error if error is not None else _DONE)
        elif error is not None and job.kind == _PRIME:
            job.released.set_exception(error)
        if job.sampler is not None:
            job.sampler.close()
            job.sampler = None
        seq = job.seq
        if seq is not None:
            seq.job = None
            seq.last_used = next(self._clock)
            if forget:  # its cells are in an unknown state
                self.core.remove(seq.id)
                seq.tokens = []
                seq.owner = None
            if job.kind == _PRIME:
                for s in self._seqs:
                    s.owner = None
        for queue in (self._incoming, self._waiting, self._active):
            if job in queue:
                queue.remove(job)
        if not job.released.done():
            job.released.set_result(job.evaluated)

    def _reap(self) -> None:
        for job in [*self._incoming, *self._waiting, *self._active]:
            if job.cancelled:
                self._end(job, "abort")

    def _admit(self) -> None:
        self._waiting.extend(self._incoming)
        self._incoming.clear()
        turns_wait = False
        for job in sorted(self._waiting, key=lambda j: j.order):
            if job.done:
                continue
            if job.kind == _PREFILL and turns_wait:
                self._end(job, "abort")  # sequences are scarce: real requests first
                continue
            # A conversation's jobs start in the order they were called.
            before = [*self._rendering.items(), *((w.order, w.key) for w in self._waiting if not w.done)]
            if any(o < job.order and k == job.key for o, k in before):
                continue
            seq = self._seq_for(job)
            if seq is None:
                if job.kind == _PREFILL:
                    self._end(job, "abort")
                else:
                    turns_wait = True
                continue
            self._waiting.remove(job)
            try:
                self._start(job, seq)
            except Exception as exc:  # a grammar that does not parse, say: this request fails alone
                log.exception("llm: a request could not start")
                self._fail([job], exc)

    def _seq_for(self, job: _Job) -> _Seq | None:
        """The sequence ``job`` runs on, or None (it waits; a prefill never waits)."""
        own = next((s for s in self._seqs if s.owner == job.key and job.key), None)
        if own is not None:
            running = own.job
            if running is None:
                return own
            if running.kind == _PREFILL and job.kind != _PREFILL:
                useful = _lcp(running.prompt, job.prompt)
                if useful > len(own.tokens):
                    # The turn needs what the prefill is evaluating: it waits for that part only,
                    # which goes on at a turn's priority.
                    running.prompt = running.prompt[:useful]
                    running.promoted = True
                    return None
                self._end(running, "abort")  # nothing more of use: what it evaluated stays
                return own
            return None
        free = [s for s in self._seqs if s.job is None]
        if not free and job.kind != _PREFILL:
            busy = next((s for s in self._seqs if s.job is not None and s.job.kind == _PREFILL), None)
            if busy is not None and busy.job is not None:
                self._end(busy.job, "abort")
                free = [busy]
        if not free:
            return None
        unowned = [s for s in free if s.owner is None]
        if unowned:
            return max(unowned, key=lambda s: (_lcp(s.tokens, job.prompt), -s.id))
        return min(free, key=lambda s: s.last_used)

    def _start(self, job: _Job, seq: _Seq) -> None:
        """Give ``seq`` to ``job``: keep the longest prefix of its prompt that this or another
        sequence holds (copying the other's cells), so only the rest is evaluated."""
        prompt = job.prompt
        limit = len(prompt) - (0 if job.kind == _PREFILL else 1)  # a turn needs logits: one token at least
        if job.judge_at is not None:
            limit = min(limit, job.judge_at)
        own = _lcp(seq.tokens, prompt)
        if self._context_shift and own < len(seq.tokens):
            own = self._shift(seq, prompt, own)
        src, best = None, own
        for other in self._seqs:
            if other is not seq and other.tokens:
                n = _lcp(other.tokens, prompt)
                if n > best:
                    src, best = other, n
        if src is not None and min(best, limit) > own:
            n = min(best, limit)
            self.core.remove(seq.id)
            self.core.copy(src.id, seq.id, n)
            self._shared_tokens += n - own
        else:
            n = min(own, limit)
            self.core.remove(seq.id, n)
        seq.tokens = prompt[:n]
        seq.job = job
        seq.owner = job.key or None
        seq.last_used = next(self._clock)
        job.seq = seq
        self._active.append(job)
        if job.kind == _TURN:
            request = job.request
            assert request is not None
            self.seq_history.append((job.key, seq.id))
            del self.seq_history[:-1000]
            self._prompt_tokens += len(prompt)
            self._reused_tokens += n
            # llama-cpp-python's chat completions penalise repeats; its plain completion (the
            # "required" path, whose prompt opens the call) does not.
            repeat = 1.0 if job.parser is not None and job.parser.open_tag_in_prompt else 1.1
            job.sampler = self.core.sampler(request.temperature, job.grammar, repeat)
            job.detok = self.core.detokenizer()
            self._emit(job, _Admission(len(prompt), n))
        elif n >= len(prompt):
            self._end(job, "stop")  # a prefill with nothing left to do

    def _shift(self, seq: _Seq, prompt: list[int], own: int) -> int:
        """Close the gap a cut left between ``seq``'s tokens and ``prompt`` where one is found
        (module kv_shift); the length of ``prompt`` that ``seq`` then holds.  Not where another
        sequence may share the cells to move (copied from this one's history): moving them would
        move them for it too, so this one re-reads instead."""
        gap = find_gap(seq.tokens, prompt, own)
        if gap is None:
            return own
        start, removed, kept = gap
        # Cells are shared only as a common prefix (a copy starts at position 0), so another
        # sequence shares a moved cell only if its tokens agree with this one's past the gap's
        # start.  Removing shared cells is safe (the others keep theirs).
        if any(o is not seq and _lcp(o.tokens, seq.tokens) > start + removed for o in self._seqs):
            return own
        self.core.close_gap(seq.id, start, removed, kept)
        seq.tokens = seq.tokens[:start] + seq.tokens[start + removed : start + removed + kept]
        self.shifted_tokens += kept
        return start + kept

    def _urgent(self, job: _Job) -> bool:
        return job.request is not None and job.request.pacing.urgent_at(job.produced)

    def _plan(self) -> list[tuple[Entry, _Job, int]]:
        """The next step's tokens, each with the job it belongs to (module docstring, "Steps")."""
        size = self.core.batch_size
        decoding = []
        for job in self._active:
            if job.token is None or job.cancelled or job.done:
                continue
            if job.request is not None and job.request.pacing.paused:
                continue  # its reader leaves the cores to TTS for now (Pacing.paused)
            urgent = self._urgent(job)
            ahead = max(self._ahead, job.request.pacing.urgent_tokens) if urgent and job.request is not None else self._ahead
            if job.produced - job.consumed < ahead:
                decoding.append((not urgent, job.order if urgent else job.produced, job))
        decoding.sort(key=lambda t: (t[0], t[1]))
        urgent_now = any(not later for later, _, _ in decoding)
        if urgent_now:
            # Only the urgent ones: on two cores the model is compute-bound (each token of a step
            # cost ~22 ms in the long soak), and a first clause waits for each of its steps.
            decoding = [d for d in decoding if not d[0]]
        plan: list[tuple[Entry, _Job, int]] = []
        for _, _, job in decoding[:size]:
            assert job.seq is not None and job.token is not None
            plan.append((Entry(job.token, len(job.seq.tokens), job.seq.id, True), job, _NEXT))
        budget = size - len(plan)
        if urgent_now:
            budget = min(budget, self._chunk)
        prompts = sorted(
            (j for j in self._active if j.pending() > 0 and not j.cancelled), key=lambda j: (_TURN if j.promoted else j.kind, j.order)
        )
        turn_waits = any(j.kind == _TURN for j in prompts)
        for job in prompts:
            speculative = job.kind == _PREFILL and not job.promoted
            # A speculation only fills an otherwise idle engine, a few tokens a step: on a CPU the
            # model is compute-bound, so its tokens would slow every other step, and a turn that
            # arrives meanwhile waits for the step in progress.
            if budget <= 0 or (speculative and (turn_waits or plan)):
                break
            if speculative:
                budget = min(budget, self._prefill_chunk)
            assert job.seq is not None
            start = len(job.seq.tokens)
            end = min(len(job.prompt), start + budget)
            for pos in range(start, end):
                what = _PROMPT
                if job.kind == _TURN:
                    what = _LAST if pos == len(job.prompt) - 1 else _JUDGE if pos == job.judge_at else _PROMPT
                plan.append((Entry(job.prompt[pos], pos, job.seq.id, what != _PROMPT), job, what))
            budget -= end - start
        return plan

    def _step(self, plan: list[tuple[Entry, _Job, int]]) -> None:
        self.core.set_threads(1 if self.threads > 1 and self.contended() else self.threads)
        entries = [e for e, _, _ in plan]
        if not self._warm:
            self._warm_buffers()
        t0 = time.perf_counter()
        rc = self.core.decode(entries)
        while rc == 1 and self._evict():
            rc = self.core.decode(entries)
        self._decode_s += time.perf_counter() - t0
        if rc != 0:
            raise RuntimeError("the KV cache is full" if rc == 1 else f"llama_decode returned {rc}")
        self.steps += 1
        self.batched_tokens += len(entries)
        for entry, job, what in plan:
            assert job.seq is not None
            job.seq.tokens.append(entry.token)
            if what != _NEXT:
                job.evaluated += 1
                self._prefilled += job.kind == _PREFILL
        # In batch order: a turn's verdict on the user's words comes before its first piece.
        for index, (_, job, what) in enumerate(plan):
            if job.done:
                continue
            if what == _JUDGE:
                self._judge(job, index)
            elif what in (_LAST, _NEXT):
                self._sample(job, index)
        for job in {id(j): j for _, j, _ in plan}.values():
            if job.kind != _TURN and not job.done and job.pending() == 0:
                self._end(job, "stop")

    def _judge(self, job: _Job, index: int) -> None:
        request = job.request
        if request is None or not request.end_probability:
            return
        self._emit(job, EndProbability(sentence_end_probability(self.core.logits(index), self._render.ends)))

    def _sample(self, job: _Job, index: int) -> None:
        request, seq, sampler = job.request, job.seq, job.sampler
        assert request is not None and seq is not None and sampler is not None
        if job.produced == 0 and job.bias:
            self.core.logits(index)[self._render.call_openers] += job.bias
        token = sampler.sample(self.core.ctx, index)
        if token in self.core.eog:
            self._finish(job)
            return
        job.produced += 1
        text = job.detok.text(token)
        if job.named is not None:
            job.named_text += text
            out: list[str | ToolCall] = [""]
        elif job.parser is not None:
            out = job.parser.push(text) if text else []
            out = out or [""]
        else:
            out = [text]
        self._give(job, out)
        job.token = token
        if job.produced >= request.max_tokens or len(seq.tokens) + 1 >= (self.window or math.inf):
            self._finish(job)

    def _finish(self, job: _Job) -> None:
        """The generation ended on its own: flush what its parser holds, then end it."""
        rest: list[str | ToolCall] = []
        if job.named is not None:
            rest = [ToolCall(new_call_id(), job.named.name, job.named_text)]
        elif job.parser is not None:
            rest = job.parser.flush()
        self._give(job, rest)
        self._end(job, "stop")

    def _give(self, job: _Job, pieces: list[str | ToolCall]) -> None:
        """Hand ``pieces`` to the request's pacing (here, in the step thread) and its consumer."""
        assert job.request is not None
        for piece in pieces:
            job.request.pacing.piece(piece)
            self._emit(job, piece)

    def _evict(self) -> bool:
        """Drop the least recently used idle sequence's cells to make room; False if none is left."""
        idle = [s for s in self._seqs if s.job is None and s.tokens]
        if not idle:
            return False
        seq = min(idle, key=lambda s: s.last_used)
        log.info("llm: the KV cache is full; dropping an idle conversation's %d cached tokens", len(seq.tokens))
        self.core.remove(seq.id)
        seq.tokens = []
        seq.owner = None
        return True

    def _warm_buffers(self) -> None:
        """Evaluate one full batch once, on the last sequence, so the compute buffers are resident
        from the start (else the first long prompt makes them so mid-serving: reads as growth)."""
        self._warm = True
        seq = self._seqs[-1]
        if seq.job is not None or seq.tokens:
            return
        filler = self._render.tokenize("a " * self.core.batch_size)[: self.core.batch_size]
        if self.core.decode([Entry(t, i, seq.id, i == len(filler) - 1) for i, t in enumerate(filler)]) == 0:
            self.core.remove(seq.id)
