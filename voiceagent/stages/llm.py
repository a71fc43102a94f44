"""LLM stage: streams the reply and cuts it into clauses for TTS as the tokens arrive.

The LLM is a shared :class:`~voiceagent.backends.protocols.LlmEngine`; each request names this
session (its ``key``), so the engine gives it its own sequence state and keeps its prefix warm.
Marks: ``llm_request`` (asked), ``llm_admitted`` (got its sequence state; the difference is the
queue wait), ``llm_first_token``, ``first_clause``, ``llm_done``; with the first token, an
``LlmRoute`` names the engine that answers and why.

Cancellation: when the generation goes stale the stage's task is cancelled and the engine's
iterator closed, which stops the generation inside the engine (see the engine contract).
An engine that raises ends the generation with ``GenerationEnd(status=failed)`` downstream (so
the response is closed for the client) and is reported as a ``StageError``.

Prefill: :meth:`LlmStage.prefill` is told each partial transcript while the user speaks and has
the engine evaluate the prompt the turn will start with (:meth:`LlmEngine.prefill`), one at a
time per session, so that at the end of speech only the last words are left to evaluate.  It is
speculation: a failure is logged, never reported, and a stale one costs only CPU time.

Sentence end: given ``sentence_end``, the stage asks the engine, for each speculative answer, how
likely the user's sentence is to end where their words end
(:attr:`~voiceagent.backends.protocols.LlmRequest.end_probability`) and tells the turn stage
``sentence_end(gen, p)`` on the event loop, exactly once per speculative answer that reaches the
engine or fails: with None when the first piece (or the end) comes first, as from an engine that
cannot tell.  A cancelled answer is told nothing (its turn was retracted).

Semantic cache (``ports.cache``): a conversation's first question (no assistant message in its
prompt), at a temperature no hotter than the cache's limit, is looked up before the engine is
asked.  A hit answers from the cache: its clauses go on with their audio (the TTS stage passes
them through), routed as ``cache``/``hit``, and the engine is never asked.  A miss is answered by
the engine (a lookup that fails is logged and counts as a miss); a reply of the primary engine
that completes without tool calls is stored with its clauses' audio once the TTS stage has
reported them (:meth:`LlmStage.spoken`) and the listener has heard it to its end
(:meth:`LlmStage.completed`): never a retracted speculation or a reply cut by a barge-in.

Tools: the prompt (:class:`LlmPrompt`) may offer tools.  Each call the engine yields is checked
against its tool's schema (:func:`~voiceagent.tools.args.check_arguments`, which repairs a small
model's usual slips) and notified as :class:`~voiceagent.events.ToolCallMade`.  A call that
cannot be repaired is asked for once more with the tool named (the engine then holds the
arguments to the schema where it can); if that fails too it is notified as
:class:`~voiceagent.events.ToolCallRejected`.  Either way the turn ends normally.  A call (with
``tool_choice`` "auto") of a tool that is not offered is dropped (logged, no error event: the
client did nothing wrong) and, when nothing has been said yet, the turn is asked again with
``tool_choice`` "none": the listener hears an answer, not silence or JSON.  So is a call whose
text arguments nobody said (``llm.call_grounding``, :mod:`voiceagent.tools.grounding`).

Call check (``llm.call_check``): later in a conversation, with tools offered and ``tool_choice``
"auto", whether the user's last words ask for a tool is first decided on the prompt they would
have had as the conversation's first turn (:mod:`voiceagent.tools.call_check`: one token on the
system message and the last user message, an anonymous request).  When that opens a call, the
turn is asked with ``tool_choice`` "required".  The check is part of the turn: cancelling the
turn cancels it; an engine that fails it leaves the turn at "auto" (logged).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from voiceagent.backends.protocols import Admitted, EndProbability, LlmEngine, LlmRequest, Pacing, Report, Routed, Usage
from voiceagent.cache.semantic import CacheKey, SemanticCache
from voiceagent.cache.store import CachedClause, CacheEntry
from voiceagent.clock import Clock
from voiceagent.config import LlmConfig
from voiceagent.config.prompts import ACKNOWLEDGEMENTS
from voiceagent.errors import StageError
from voiceagent.events import (
    Clause,
    Event,
    GenerationEnd,
    LlmRoute,
    LlmUsage,
    Mark,
    ResponseStatus,
    ToolCallMade,
    ToolCallRejected,
    UserTurn,
)
from voiceagent.pipeline import Channel, Stage, StageContext
from voiceagent.pipeline.gate import GenerationGate
from voiceagent.settings import SessionSettings
from voiceagent.text.clauses import ClauseSplitter
from voiceagent.tools.args import check_arguments
from voiceagent.tools.call_check import check_messages, opens_call
from voiceagent.tools.grounding import grounded
from voiceagent.tools.retry import answered_calls, canonical, nameless, retried_call, retry_choice
from voiceagent.tools.spec import Message, Tool, ToolCall

__all__ = ["LlmOptions", "LlmPorts", "LlmPrompt", "LlmStage", "SentenceEnd"]

log = logging.getLogger(__name__)

CallKind = Literal["call", "dropped", "repeated", "invented"]
"""What a call the engine yielded is (:meth:`LlmStage._call_kind`)."""

PREFILL_MIN_WORDS = 2
"""Words a partial transcript must keep (after its last is left out) to be worth a prefill."""


@dataclass(frozen=True, slots=True)
class LlmPrompt:
    """What to ask for one turn: the messages and the tools offered (``tool_choice`` as in
    :class:`~voiceagent.backends.protocols.LlmRequest`)."""

    messages: Sequence[Message]
    tools: tuple[Tool, ...] = ()
    tool_choice: str = "auto"
    max_tokens: int | None = None
    """This answer's ``max_output_tokens`` (``response.create``); None: the session's."""
    say: str | None = None
    """Words to speak as they are, instead of asking the engine (``ResponseOptions.say``)."""


SentenceEnd = Callable[[int, float | None], None]
"""Told each speculative answer's (generation's) sentence-end probability; None: the engine cannot tell."""


@dataclass(frozen=True)
class LlmPorts:
    """What the LLM stage uses outside itself."""

    engine: LlmEngine
    """The shared engine; each generation is its own request (its Protocol says what is shared)."""
    prompt: Callable[[UserTurn], Awaitable[LlmPrompt]]
    """The prompt for a turn: the session's history fitted to the engine's window."""
    settings: Callable[[], SessionSettings]
    """The session's settings as they are now (instructions, tools, limits)."""
    tts_first_audio: GenerationGate | None = None
    """Opened by the TTS stage at a reply's first audio: until then this stage yields the CPU
    (``llm.yield_to_tts``)."""
    first_token: GenerationGate | None = None
    """Opened here at a generation's first token (the turn stage waits on it)."""
    sentence_end: SentenceEnd | None = None
    """The turn stage's ``sentence_end`` (module docstring); None: not asked."""
    cache: SemanticCache | None = None
    """The process's semantic reply cache (module docstring); None: off."""
    on_cache: Callable[[str], None] | None = None
    """Told each cache lookup's result (``hit``, or why not), for the metrics."""
    heard_before: Callable[[], str] | None = None
    """The turn's words before the segment being spoken (the turn stage's ``heard_so_far``),
    which a prefill puts before a partial transcript; None: a partial is prefilled alone."""


@dataclass(frozen=True)
class LlmOptions:
    """The server's LLM-stage settings (``[llm]``), fixed for the session."""

    first_clause_words: int = 0
    prefill: bool = False
    call_check: bool = False
    """``llm.call_check`` (module docstring)."""
    call_grounding: bool = True
    """``llm.call_grounding`` (module docstring)."""
    acknowledge_ms: int = -1
    """``llm.acknowledge_ms`` (module docstring)."""

    @classmethod
    def from_config(cls, llm: LlmConfig) -> LlmOptions:
        return cls(
            first_clause_words=llm.first_clause_words,
            prefill=llm.prefill,
            call_check=llm.call_check,
            call_grounding=llm.call_grounding,
            acknowledge_ms=llm.acknowledge_ms,
        )


class LlmStage(Stage):
    name = "llm"

    def __init__(self, ctx: StageContext, inbox: Channel[Event], out: Channel[Event], ports: LlmPorts, options: LlmOptions) -> None:
        super().__init__(ctx, inbox, out)
        self._sentence_end = ports.sentence_end
        self._prefill = options.prefill
        self._call_check = options.call_check
        self._call_grounding = options.call_grounding
        self._acknowledge_ms = options.acknowledge_ms
        self._acknowledged = 0  # acknowledgements said: the next one is the next phrase
        self._prefilling: asyncio.Task[None] | None = None
        self._heard_before = ports.heard_before or (lambda: "")
        self.prefilled = 0
        """Prompt tokens evaluated ahead of their turn for this session."""
        self._engine = ports.engine
        self._prompt = ports.prompt
        self._settings = ports.settings
        self._gate = ports.tts_first_audio or GenerationGate(enabled=False)
        self._pacing = Pacing()
        """The reply being generated: paused while it waits for its first audio (see :meth:`_clause`)."""
        self._first_token = ports.first_token or GenerationGate(enabled=False)
        self._first_clause_words = options.first_clause_words
        self._cache = ports.cache
        self._on_cache = ports.on_cache or (lambda result: None)
        self._storable: dict[int, tuple[CacheKey, str]] = {}
        """Replies that may be stored, by generation (see ``_may_store``)."""
        self._voiced: dict[int, list[CachedClause]] = {}
        """Their clauses' audio, as the TTS stage reported it, until the listener has heard them."""

    @property
    def prefilling(self) -> bool:
        """Whether a prefill (or warm-up) of this session is running: partials meanwhile are skipped."""
        return self._prefilling is not None and not self._prefilling.done()

    def prefill(self, heard: str) -> None:
        """The user's words so far (a partial transcript of the segment being spoken): have the
        engine evaluate the coming prompt now.  The last word is left out: it may be cut off or
        still change, and the words before it are what the final transcript most often begins
        with.  The turn's earlier segments (``heard_before``) go first: a turn of several segments
        is answered from all of them, and a prompt of the last segment alone would overwrite the
        cells its first words already had (from the speculative answer at the pause), so the turn
        would evaluate every word of the user's message again after they stopped.  At most one
        prefill per session runs; a partial that comes meanwhile is skipped (the next one will do)."""
        words = heard.split()[:-1]
        if not self._prefill or len(words) < PREFILL_MIN_WORDS:
            return
        if self.prefilling:
            return
        text = " ".join([*self._heard_before().split(), *words])
        self._prefilling = self.spawn(self._prefill_now(text), "prefill")

    def warm(self) -> None:
        """The session's prompt changed (a client's tools or instructions): evaluate its new
        prefix now, so the next turn does not pay for it: a tools' listing is a few hundred
        tokens, ~1 s on the 0.5B and ~3 s on the 1.5B when the turn itself has to evaluate it.
        Skipped while a prefill runs (the next partial transcript prefills the new prompt) or with
        ``llm.prefill`` off; outside a running event loop there is no session to warm yet."""
        if not self._prefill or self.prefilling:
            return
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return
        self._prefilling = self.spawn(self._prefill_now(""), "warm")

    async def _prefill_now(self, text: str) -> None:
        turn = UserTurn(t=self.ctx.clock.now(), gen=-1, session=self.ctx.session_id, text=text, speculative=True)
        try:
            prompt = await self._prompt(turn)
            self.prefilled += await self._engine.prefill(self.ctx.session_id, prompt.messages, prompt.tools)
        except Exception as exc:  # speculation: the turn itself will meet any real failure
            log.debug("session %s: prefill failed: %r", self.ctx.session_id, exc)

    async def handle(self, event: Event) -> None:
        if not isinstance(event, UserTurn):
            await self.emit(event)
            return
        gen = event.gen
        prompt = await self._turn_prompt(event)
        if prompt.say is not None:
            await self._say_text(gen, prompt.say)
            return
        messages = list(prompt.messages)
        settings = self._settings()
        key, cached = await self._from_cache(event, prompt, settings)
        if cached:
            return
        splitter = ClauseSplitter(first_max_words=self._first_clause_words)
        text = ""
        said = _Said()
        pacing = self._pacing = FirstClause(self._first_clause_words)
        verdict = _SentenceEnd(gen, self._sentence_end if event.speculative else None)
        reports = _Reports(self.ctx.clock, verdict, self._engine.name)
        first_token_t = 0.0
        await self.ctx.notify(self._mark(gen, "llm_request"))
        choice = prompt.tool_choice
        if self._call_check and prompt.tools and choice == "auto" and await self._asks_for_call(messages, prompt.tools):
            log.info("session %s: the last words ask for a tool (call check): the turn is asked to call one", self.ctx.session_id)
            choice = "required"
        request = LlmRequest(
            key=self.ctx.session_id,
            messages=messages,
            max_tokens=prompt.max_tokens or settings.max_output_tokens,
            temperature=settings.temperature,
            pacing=pacing,
            tools=prompt.tools,
            tool_choice=choice,
            end_probability=verdict.wanted,
        )
        retry: list[ToolCall] = []
        calls = 0  # the calls this reply made (tool_choice "none" aside), good or not
        answered = answered_calls(messages)
        attempts = [request]
        hold = await self._hold(event, said, reports, settings)

        try:
            while attempts:
                current = attempts.pop(0)
                kind = ""
                invented = False
                reports.begin()
                async with contextlib.aclosing(self._engine.generate(current)) as pieces:
                    async for piece in pieces:
                        if isinstance(piece, Report):
                            reports.take(piece)
                            continue
                        if reports.piece():
                            verdict.tell(None)  # none before the first piece: the engine cannot tell
                            self._first_token.open(gen)
                            if reports.admitted is not None:
                                await self.ctx.notify(Mark(t=reports.admitted, gen=gen, session=self.ctx.session_id, name="llm_admitted"))
                            engine, reason = reports.route
                            now = first_token_t = self.ctx.clock.now()
                            await self.ctx.notify(LlmRoute(t=now, gen=gen, session=self.ctx.session_id, engine=engine, reason=reason))
                            await self.ctx.notify(self._mark(gen, "llm_first_token"))
                        if isinstance(piece, ToolCall):
                            kind = self._call_kind(piece, current, answered)
                            if kind == "repeated":
                                break
                            invented = invented or kind == "invented"
                            if kind == "call":
                                calls += 1
                                if not await self._tool_call(gen, piece, prompt.tools, final=False):
                                    retry.append(piece)
                            continue
                        text += piece
                        for clause in splitter.push(piece):
                            pacing.urgent = False  # an engine that never calls piece() learns it here
                            await self._say(gen, clause, said)
                reports.end()
                # Asked again in words (at most once: the new attempt's choice is "none"), when
                # this attempt said nothing and made no call of its own.
                if (kind == "repeated" or (invented and calls == 0 and not retry)) and not text.strip() and current.tool_choice != "none":
                    attempts.append(dataclasses.replace(request, tool_choice="none", end_probability=False))
            verdict.tell(None)  # a reply with no pieces at all
            for clause in splitter.flush():
                await self._say(gen, clause, said)
            for call in retry:
                if nameless(call) and calls > 1:
                    # The reply called something else too: asked again, the model would most
                    # likely repeat that call under a new id (two timers), so report this one.
                    await self._tool_call(gen, call, prompt.tools, final=True)
                else:
                    await self._retry_call(gen, call, request)
        except Exception as exc:
            hold.cancel()  # no acknowledgement after the reply's end
            self._first_token.open(gen)
            verdict.tell(None)
            await self.emit(
                GenerationEnd(
                    t=self.ctx.clock.now(),
                    gen=gen,
                    session=self.ctx.session_id,
                    text=text,
                    status=ResponseStatus.FAILED,
                    error=f"{type(exc).__name__}: {exc}",
                )
            )
            raise StageError(self.name, f"{type(exc).__name__}: {exc}") from exc
        finally:
            hold.cancel()
        done = self._mark(gen, "llm_done")
        await self.ctx.notify(done)
        await self.ctx.notify(
            LlmUsage(
                t=done.t,
                gen=gen,
                session=self.ctx.session_id,
                engine=reports.route[0],
                model=reports.usage.model,
                prompt_tokens=reports.usage.prompt_tokens,
                reused_tokens=reports.usage.reused_tokens,
                generated_tokens=reports.usage.generated_tokens,
                decode_s=max(0.0, done.t - first_token_t) if reports.spoke else 0.0,
            )
        )
        # The engine that should answer did ("primary", or a router's "large.primary" /
        # "small:KIND.primary"), not a fallback standing in for it.
        primary = reports.route[1].rpartition(".")[2] == "primary"
        self._may_store(gen, key, text, calls == 0 and not retry and primary)
        await self.emit(
            GenerationEnd(t=self.ctx.clock.now(), gen=gen, session=self.ctx.session_id, text=text, status=ResponseStatus.COMPLETED)
        )

    async def _asks_for_call(self, messages: Sequence[Message], tools: tuple[Tool, ...]) -> bool:
        """Whether the user's last message opens a call when read as its conversation's first
        (module docstring, "Call check"); False when there is nothing to check or the engine
        fails the check.  Cancellation propagates (the turn's own)."""
        first = check_messages(messages)
        if first is None:
            return False
        # No key: the check holds no conversation's sequence; its prompt's prefix (the system
        # message) is copied from the conversation's own.
        request = LlmRequest(key="", messages=first, max_tokens=1, temperature=0.0, tools=tools, tool_choice="auto")
        pieces: list[str | ToolCall] = []
        t0 = self.ctx.clock.now()
        try:
            async with contextlib.aclosing(self._engine.generate(request)) as stream:
                async for piece in stream:
                    if isinstance(piece, str | ToolCall):
                        pieces.append(piece)
        except Exception as exc:  # the turn goes on as it would have without the check
            log.warning("session %s: the call check failed, the turn decides alone: %r", self.ctx.session_id, exc)
            return False
        opened = opens_call(pieces)
        log.debug(
            "session %s: call check %s in %.0f ms",
            self.ctx.session_id,
            "opened a call" if opened else "answered",
            (self.ctx.clock.now() - t0) * 1000,
        )
        return opened

    def _may_store(self, gen: int, key: CacheKey | None, text: str, reusable: bool) -> None:
        """A completed reply of the primary engine without tool calls may be stored (``spoken``
        and ``completed`` decide when)."""
        if key is not None and reusable and text.strip():
            # Replies that never complete (retracted, cut, failed) are forgotten a few turns on.
            self._storable = {g: v for g, v in self._storable.items() if g > gen - 4}
            self._voiced = {g: v for g, v in self._voiced.items() if g > gen - 4}
            self._storable[gen] = (key, text)

    def spoken(self, gen: int, clauses: Sequence[CachedClause]) -> None:
        """The TTS stage has synthesized every clause of generation ``gen`` (on the event loop)."""
        if gen in self._storable and clauses:
            self._voiced[gen] = list(clauses)

    def completed(self, gen: int) -> None:
        """The listener has heard generation ``gen`` to its end (its ``response.done`` is
        ``completed``): store it if it may be reused and its audio is known."""
        stored, clauses = self._storable.pop(gen, None), self._voiced.pop(gen, None)
        # A session that turned the cache off while this reply played stores nothing more.
        if stored is not None and clauses and self._cache is not None and self._settings().semantic_cache:
            self._cache.add(stored[0], stored[1], clauses)

    async def _from_cache(self, turn: UserTurn, prompt: LlmPrompt, settings: SessionSettings) -> tuple[CacheKey | None, bool]:
        """(the turn's cache key or None, whether the cache answered it: see ``_replay``)."""
        try:
            key = await self._cache_key(turn, prompt, settings)
            found = self._cache.lookup(key) if key is not None and self._cache is not None else None
        except Exception as exc:  # the cache is an optimisation: the engine answers instead
            log.warning("session %s: semantic cache lookup failed: %r", self.ctx.session_id, exc)
            self._on_cache("error")
            return None, False
        if found is None or found.entry is None:
            if found is not None:
                self._on_cache(found.reason)
            return key, False
        self._on_cache("hit")
        await self._replay(turn.gen, found.entry, turn.speculative)
        return key, True

    async def _cache_key(self, turn: UserTurn, prompt: LlmPrompt, settings: SessionSettings) -> CacheKey | None:
        """The turn's key in the semantic cache, or None when its answer may not be reused: no
        cache, no words, not the conversation's first question (example exchanges in the prompt
        count as earlier turns), a tool the reply must call, sampled too hot, or the session has
        turned the cache off (``session.voiceagent.semantic_cache``)."""
        cache = self._cache
        question = (turn.text or "").strip()
        if cache is None or not question or settings.temperature > cache.max_temperature:
            return None
        if any(m.role != "system" for m in prompt.messages[:-1]) or prompt.tool_choice not in ("auto", "none"):
            return None
        if not settings.semantic_cache:
            self._on_cache("session_off")  # a turn the cache could have answered: counted as refused
            return None
        scope = cache.scope(
            system=[m.content for m in prompt.messages if m.role == "system"],
            tools=[(t.name, t.description, t.parameters) for t in prompt.tools],
            tool_choice=prompt.tool_choice,
            model=getattr(self._engine, "model", self._engine.name),
            voice=settings.voice,
            speed=settings.speed,
            max_tokens=prompt.max_tokens or settings.max_output_tokens,
        )
        return await cache.key(scope, question)

    async def _replay(self, gen: int, entry: CacheEntry, speculative: bool) -> None:
        """Answer generation ``gen`` with a stored reply: its clauses with their audio."""
        await self.ctx.notify(self._mark(gen, "llm_request"))
        self._first_token.open(gen)
        now = self.ctx.clock.now()
        await self.ctx.notify(LlmRoute(t=now, gen=gen, session=self.ctx.session_id, engine="cache", reason="hit"))
        await self.ctx.notify(self._mark(gen, "llm_first_token"))
        if speculative and self._sentence_end is not None:
            self._sentence_end(gen, None)  # the engine was not asked: it cannot tell
        for index, clause in enumerate(entry.clauses):
            if index == 0:
                await self.ctx.notify(self._mark(gen, "first_clause"))
            await self.emit(
                Clause(
                    t=self.ctx.clock.now(),
                    gen=gen,
                    session=self.ctx.session_id,
                    text=clause.text,
                    index=index,
                    audio=clause.pcm,
                    rate=clause.rate,
                )
            )
        await self.ctx.notify(self._mark(gen, "llm_done"))
        await self.emit(
            GenerationEnd(t=self.ctx.clock.now(), gen=gen, session=self.ctx.session_id, text=entry.reply, status=ResponseStatus.COMPLETED)
        )

    async def _turn_prompt(self, turn: UserTurn) -> LlmPrompt:
        """The turn's prompt.  One that cannot be made (an out-of-band one that does not fit the
        window) fails its response like a failed generation: never a response left open."""
        try:
            return await self._prompt(turn)
        except Exception as exc:
            self._first_token.open(turn.gen)
            error = f"{type(exc).__name__}: {exc}"
            now = self.ctx.clock.now()
            await self.emit(
                GenerationEnd(t=now, gen=turn.gen, session=self.ctx.session_id, text="", status=ResponseStatus.FAILED, error=error)
            )
            raise StageError(self.name, error) from exc

    async def _say_text(self, gen: int, text: str) -> None:
        """Answer generation ``gen`` with ``text`` as it is: its clauses, for the voice."""
        await self.ctx.notify(self._mark(gen, "llm_request"))
        self._first_token.open(gen)
        await self.ctx.notify(LlmRoute(t=self.ctx.clock.now(), gen=gen, session=self.ctx.session_id, engine="text", reason="said"))
        await self.ctx.notify(self._mark(gen, "llm_first_token"))
        splitter = ClauseSplitter(first_max_words=self._first_clause_words)
        said = _Said()
        for clause in [*splitter.push(text), *splitter.flush()]:
            await self._say(gen, clause, said)
        await self.ctx.notify(self._mark(gen, "llm_done"))
        end = GenerationEnd(t=self.ctx.clock.now(), gen=gen, session=self.ctx.session_id, text=text, status=ResponseStatus.COMPLETED)
        await self.emit(end)

    def _call_kind(self, call: ToolCall, request: LlmRequest, answered: set[tuple[str, str]]) -> CallKind:
        """What a call the engine yielded for ``request`` is: ``"call"`` (checked, then made),
        ``"dropped"`` (tool_choice "none": an engine that could not prevent it, such as vLLM,
        whose parser reads calls whatever the choice), ``"repeated"`` (a small model asks again
        for the result it was just given: the turn is answered instead) or ``"invented"``
        (tool_choice "auto", a tool nobody offered: the 0.5B invents get_largest_planet for a
        plain question; logged, no error for the client, which did nothing wrong, and the turn
        is answered in words)."""
        if request.tool_choice == "none":
            return "dropped"
        if (call.name, canonical(call.arguments)) in answered:
            return "repeated"
        tool = next((t for t in request.tools if t.name == call.name), None)
        if request.tool_choice == "auto" and not nameless(call) and tool is None:
            log.info("session %s: the model called %r, which is not offered; answering without tools", self.ctx.session_id, call.name)
            return "invented"
        if request.tool_choice == "auto" and self._call_grounding and not grounded(call.arguments, request.messages, tool):
            log.info(
                "session %s: the model called %r with arguments nobody said (%s); answering without tools",
                self.ctx.session_id,
                call.name,
                call.arguments[:200],
            )
            return "invented"
        return "call"

    async def _tool_call(self, gen: int, call: ToolCall, tools: Sequence[Tool], *, final: bool) -> bool:
        """Check ``call`` and notify it; False when it needs another try (and ``final`` is not set)."""
        tool = next((t for t in tools if t.name == call.name), None)
        checked = check_arguments(tool, call.arguments)
        now = self.ctx.clock.now()
        if checked.problem is None and checked.arguments is not None:
            await self.ctx.notify(
                ToolCallMade(
                    t=now,
                    gen=gen,
                    session=self.ctx.session_id,
                    call_id=call.call_id,
                    name=call.name,
                    arguments=checked.arguments,
                    repaired=checked.repaired,
                )
            )
            return True
        if not final and (tool is not None or nameless(call)):
            return False  # usable-looking but broken arguments, or a call opened with no name
        problem = checked.problem or "unreadable arguments"
        await self.ctx.notify(
            ToolCallRejected(t=now, gen=gen, session=self.ctx.session_id, name=call.name, arguments=call.arguments[:500], problem=problem)
        )
        return True

    async def _retry_call(self, gen: int, call: ToolCall, request: LlmRequest) -> None:
        """Ask once more for ``call`` with its tool named (the engine constrains the arguments).

        A call with no name (the 1.5B sometimes answers a weather question with an empty
        ``<tools></tools>``) is asked again with the only offered tool named, or with
        ``"required"`` when several are offered; the answer is used if it names an offered tool."""
        # Off the listener's critical path, and outside the turn's timeline and usage.
        choice = retry_choice(call, request.tools)
        again = dataclasses.replace(request, tool_choice=choice, pacing=Pacing(), end_probability=False)
        second: ToolCall | None = None
        async with contextlib.aclosing(self._engine.generate(again)) as pieces:
            async for piece in pieces:
                if isinstance(piece, ToolCall) and second is None:
                    second = piece
        await self._tool_call(gen, retried_call(call, second, request.tools) or call, request.tools, final=True)

    async def _say(self, gen: int, text: str, said: _Said) -> None:
        """The reply's next clause, in order with an acknowledgement said meanwhile."""
        async with said.lock:
            said.index = await self._clause(gen, text, said.index)

    async def _hold(self, turn: UserTurn, said: _Said, reports: _Reports, settings: SessionSettings) -> asyncio.Future[None]:
        """The acknowledgement's timer for a spoken user turn (a done future where none is due:
        ``acknowledge_ms`` -1, a response the client asked for, a text-only session).  With 0 the
        acknowledgement is said now, before the model is asked: its voice gets the cores first
        (a model's prompt, once running, cannot be paused), and the model waits only for its
        first audio."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        if self._acknowledge_ms < 0 or turn.text is None or not settings.audio:
            return done
        if self._acknowledge_ms == 0:
            await self._acknowledge_now(turn.gen, said)
            return done
        return self.spawn(self._acknowledge(turn.gen, said, reports, self.ctx.clock.now()), "acknowledge")

    async def _acknowledge(self, gen: int, said: _Said, reports: _Reports, asked: float) -> None:
        """``acknowledge_ms`` after the LLM was asked (``asked``), a short acknowledgement unless
        the reply has words by then or the quick model of a router answers it.  Cancelled when
        the generation ends."""
        await self.ctx.clock.sleep_until(asked + self._acknowledge_ms / 1000.0)
        if said.index > 0 or reports.spoke or reports.route[1].startswith("small"):
            return
        await self._acknowledge_now(gen, said)

    async def _acknowledge_now(self, gen: int, said: _Said) -> None:
        """The acknowledgement, unless the reply has said something already."""
        async with said.lock:
            if said.index > 0:
                return
            phrase = ACKNOWLEDGEMENTS[self._acknowledged % len(ACKNOWLEDGEMENTS)]
            self._acknowledged += 1
            # What the turn stage waits for before its model (the prompt's head start) is moot now:
            # the acknowledgement is the first audio, and it waits for the turn to be confirmed.
            self._first_token.open(gen)
            # Set apart from the answer, as its clauses are.
            said.index = await self._clause(gen, phrase + " ", said.index, ack=True)

    async def _clause(self, gen: int, text: str, index: int, *, ack: bool = False) -> int:
        if not text.strip():
            return index
        if index == 0:
            await self.ctx.notify(self._mark(gen, "first_clause"))
        await self.emit(Clause(t=self.ctx.clock.now(), gen=gen, session=self.ctx.session_id, text=text, index=index, ack=ack))
        if index == 0:
            # Leave the cores to TTS until the first audio exists (see pipeline/gate.py): this task
            # stops taking tokens, and an engine that decodes ahead of its reader stops too.
            pacing = self._pacing
            pacing.paused = self._gate.enabled
            try:
                await self._gate.wait(gen)
            finally:
                pacing.paused = False
        return index + 1

    def _mark(self, gen: int, name: str) -> Mark:
        return Mark(t=self.ctx.clock.now(), gen=gen, session=self.ctx.session_id, name=name)


@dataclass
class _Said:
    """The clauses one reply has said so far (its acknowledgement included), under one lock."""

    index: int = 0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class FirstClause(Pacing):
    """A reply's pacing: urgent until its first clause is complete, judged in the engine's thread
    as each piece is decoded (the same cut as the stage's own splitter), so urgency ends with
    the token that completes the clause.  ``paused`` is the stage's to set (:meth:`LlmStage._clause`).

    At most :data:`URGENT_TOKENS` tokens are urgent: a bound in case the clause never ends.  A
    call's tokens are never spoken, so until a clause the listener waits for all of them (the
    call, its result, the answer): get_time is ~26 tokens, and the 0.5B's made-up calls 50-75,
    which past a bound of 32 decoded at speaking pace (~200 ms each with 8 conversations)
    before the answer could start."""

    URGENT_TOKENS = 96

    def __init__(self, first_clause_words: int) -> None:
        super().__init__(self.URGENT_TOKENS)
        self._cut = ClauseSplitter(first_max_words=first_clause_words)

    def piece(self, piece: str | ToolCall) -> None:  # the engine's thread: only the cut is touched
        if self.urgent and isinstance(piece, str) and self._cut.push(piece):
            self.urgent = False


class _Reports:
    """What the engine reported about one reply: the items of its stream that are not pieces
    (contract: :mod:`voiceagent.backends.protocols`), taken in order on the event loop, over the
    reply's attempts (a call asked again in words is a second stream: :meth:`begin` .. :meth:`end`)."""

    def __init__(self, clock: Clock, verdict: _SentenceEnd, engine: str) -> None:
        self._clock = clock
        self._verdict = verdict
        self.spoke = False
        """A piece has been read (by any attempt)."""
        self._read = 0
        self._measured = False
        self.admitted: float | None = None
        """When the first engine to answer granted the reply its sequence state (a handed-over
        turn keeps the primary's, so its queue wait includes the primary's attempt)."""
        self.route = (engine, "primary")
        """The engine that answered and why: the last :class:`Routed` before the reply's first
        piece (a later attempt's does not rename what was already reported), else the engine's own."""
        self.usage = Usage()
        """Over every attempt: the last one's prompt, every attempt's generated tokens."""

    def begin(self) -> None:
        """An attempt's stream opens."""
        self._read, self._measured = 0, False

    def piece(self) -> bool:
        """The attempt read a piece (text or a call): True for the reply's first."""
        self._read += 1
        first, self.spoke = not self.spoke, True
        return first

    def end(self) -> None:
        """The attempt's stream is closed.  One cut short (at a repeated call) sent no usage: its
        pieces count as its tokens (a lower bound: a call is one piece), and the prompt is
        unknown rather than wrong."""
        if not self._measured:
            u = self.usage
            self.usage = Usage(u.model, None, None, u.generated_tokens + self._read)

    def take(self, item: Report) -> None:
        if isinstance(item, Admitted):
            if self.admitted is None:
                self.admitted = self._clock.now()
        elif isinstance(item, Routed):
            if not self.spoke:
                self.route = (item.engine, item.reason)
        elif isinstance(item, EndProbability):
            self._verdict.tell(item.p)
        else:
            self._measured = True
            generated = self.usage.generated_tokens + item.generated_tokens
            self.usage = Usage(item.model, item.prompt_tokens, item.reused_tokens, generated)


class _SentenceEnd:
    """One speculative answer's sentence-end probability, told to ``report`` once (the first
    verdict wins: the engine's :class:`EndProbability` item, or None at the first piece when the
    engine could not tell).  ``report`` None: nobody asks."""

    def __init__(self, gen: int, report: Callable[[int, float | None], None] | None) -> None:
        self._gen = gen
        self._report = report

    @property
    def wanted(self) -> bool:
        return self._report is not None

    def tell(self, prob: float | None) -> None:
        report, self._report = self._report, None
        if report is not None:
            report(self._gen, prob)
