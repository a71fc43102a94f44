"""The turn controller: the one writer of a session's generation and the owner of its replies.

Every move of the generation goes through :class:`ReplyController`: a speculative answer or a
confirmed turn (:meth:`begin`, asked by the turn stage), a withdrawn speculation
(:meth:`retract`), ``response.create`` and barge-in or ``response.cancel``.  Stages, channels and
gates only read the counter (:class:`~voiceagent.pipeline.Generations`).

Each generation that answers has one :class:`~voiceagent.conversation.reply.Reply`, made when a stage first
notes something about it and dropped exactly once: when its ``response.done`` is sent, when its
speculation is withdrawn, or when a newer generation supersedes it before release.  Release is an
event down the playout channel (:class:`~voiceagent.events.ReleaseReply`), carrying the reply's
heard clock, so playout keeps nothing of a reply but the audio it holds for it.

Barge-in: speech that starts while a reply is audible moves the generation on, which cancels LLM,
TTS and playout work in flight; the assistant item is cut to the audio the listener heard, the
client is told to clear its playback buffer (:class:`~voiceagent.events.PlaybackCleared`) and the
response ends ``cancelled``.

MCP tools (:mod:`voiceagent.conversation.mcp_servers`): a call of one is run here, in a task of
its own, while its response stays open (``mcp_call`` events); the response ends when its last
call does, and an answer from the results follows (an apology for a call that failed or timed
out, with an ``error`` event).  A response that ends otherwise (barge-in, ``response.cancel``, a
new turn) cancels its calls and waits for them first.

Cancellation: :meth:`aclose` cancels the built-in tools' timers and the MCP calls, waits for
them and closes the MCP connections; every other method either finishes its bookkeeping or lets
``CancelledError`` through untouched.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import json
import logging
from collections.abc import Awaitable, Callable

from voiceagent.clock import Clock
from voiceagent.config import Config
from voiceagent.conversation.history import CANCELLED_OUTPUT, AssistantItem, History, McpCallItem, input_messages, new_id
from voiceagent.conversation.mcp_servers import McpServers
from voiceagent.conversation.prompt_fit import PromptFitter
from voiceagent.conversation.reply import Reply, turn_record
from voiceagent.errors import ProtocolError, excerpt
from voiceagent.events import (
    AudioDelta,
    CallSummary,
    ErrorEvent,
    Event,
    FunctionCallAdded,
    GenerationEnd,
    InputCommitted,
    InputSpeechStarted,
    InputSpeechStopped,
    InputTimeoutTriggered,
    InputTranscriptDelta,
    InputTranscriptDone,
    ItemsDropped,
    LlmRoute,
    LlmUsage,
    Mark,
    McpCallAdded,
    McpCallDone,
    OutputTranscriptDelta,
    PlaybackCleared,
    ReleaseReply,
    ResponseCreated,
    ResponseDone,
    ResponseStatus,
    SpeechStarted,
    ToolCallMade,
    ToolCallRejected,
    ToolOutputAdded,
    TranscriptDelta,
    TurnConfirmed,
    TurnMetrics,
    UserTurn,
)
from voiceagent.observability import tracing
from voiceagent.observability.metrics import Metrics
from voiceagent.pipeline import Channel, Generations, GenerationScope
from voiceagent.settings import InputItem, SessionSettings
from voiceagent.stages.llm import LlmPrompt
from voiceagent.tools.args import loads_lenient
from voiceagent.tools.builtin import BuiltinTools, TimerRequest
from voiceagent.tools.mcp import McpError, McpTool
from voiceagent.tools.spec import Message, Tool, with_tools

__all__ = ["ANSWER_FROM_TOOLS", "IDLE_PROMPT", "ReplyController"]

log = logging.getLogger(__name__)

ANSWER_FROM_TOOLS = "Answer the user now, in one short spoken sentence, from the tool result above."
IDLE_PROMPT = " The user has said nothing for a while: in one short sentence, ask whether they are still there or invite them to go on."
"""Added to the instructions of the response an idle timeout starts (``idle_timeout_ms``): the
item it answers is silence, and without a word on it a small model answers the silence itself."""
"""Closes a prompt that ends with tool outputs (see :meth:`ReplyController.prompt`)."""
MCP_APOLOGY = (
    " The tool you called ({tools}) failed; its error is above."
    " Apologise to the user in one short spoken sentence: you could not get that information right now."
)
"""Ends the instructions of the answer after a failed MCP call: a small model given only the
error tends to recite it, or to call again."""
turn_log = logging.getLogger("voiceagent.session")
"""The per-turn log line keeps the logger name that dashboards and log filters already select."""

Emit = Callable[[Event], Awaitable[None]]


class ReplyController:
    """Owns the generation counter and every live :class:`Reply` of one session.

    Wiring (the session's): :meth:`connect` hands it the LLM and playout inboxes once they
    exist; stages read :attr:`generations`, report through :meth:`on_event`, take prompts from
    :meth:`prompt` and the modality from :meth:`speaks`, and the turn stage asks :meth:`begin`
    and :meth:`retract`."""

    def __init__(
        self,
        session_id: str,
        clock: Clock,
        config: Config,
        metrics: Metrics,
        history: History,
        settings: Callable[[], SessionSettings],
        emit: Emit,
        trim_history: Callable[[], Awaitable[None]],
        arrival_time: Callable[[float], float],
        wall_clock: Callable[[], dt.datetime] | None = None,
        fitter: PromptFitter | None = None,
        input_ms: Callable[[], float] | None = None,
    ) -> None:
        """``fitter``: cuts the history to the LLM's window before each prompt (None: never cut).
        ``input_ms``: the user audio received so far (the idle timeout's event reports it)."""
        self._id = session_id
        self._clock = clock
        self._config = config
        self._metrics = metrics
        self._history = history
        self._settings = settings
        self._emit = emit
        self._trim_history = trim_history
        self._arrival_time = arrival_time
        self._scope = GenerationScope()
        self._replies: dict[int, Reply] = {}
        self._playing: Reply | None = None
        self._user_item: str | None = None
        self._user_start_ms: float | None = None  # where the user item's speech began (input-stream ms)
        self._input_end_ms = 0.0  # where the last user turn's audio ended
        self._llm_in: Channel[Event] | None = None
        self._play_in: Channel[Event] | None = None
        self._heard: Callable[[str], None] | None = None
        self.on_completed: Callable[[int], None] | None = None
        """Told the generation of each reply that ended ``completed`` (heard to its end), not
        out of band (the semantic cache stores only those)."""
        self._quiet = asyncio.Event()  # set while no response is active
        self._quiet.set()
        self._builtin = BuiltinTools(wall_clock) if config.tools.builtin else None
        self._timers: set[asyncio.Task[None]] = set()
        self._mcp_tasks: set[asyncio.Task[None]] = set()  # every MCP call's task, until it ends
        self._fitter = fitter
        self._fitting = asyncio.Lock()
        self._input_ms = input_ms or (lambda: 0.0)
        self.spoke = False
        """True once any reply's audio went to the client (the voice is fixed from then on)."""
        self._idle: asyncio.Task[None] | None = None  # the idle timeout armed now (still waiting)
        self._heard_end = 0.0  # when the last reply's audio finished playing (session clock)
        self._idle_ms: int | None = None  # the idle_timeout_ms the armed timeout counts
        self._idle_tasks: set[asyncio.Task[None]] = set()  # every idle timeout's task, until it ends
        self.mcp = McpServers(session_id, clock, lambda: self._scope.current, emit, config.tools.mcp_timeout_s, config.tools.mcp_allowed)
        """The session's MCP servers (``session.update`` names them)."""

    # ------------------------------------------------------------------ wiring

    @property
    def generations(self) -> Generations:
        """The counter, read-only: what stages, channels and gates get."""
        return self._scope

    def connect(self, llm_in: Channel[Event], play_in: Channel[Event], heard: Callable[[str], None] | None = None) -> None:
        """The inboxes a reply is started (``response.create``) and released into; ``heard`` is
        told each partial transcript of the user's speech (the LLM stage's prefill)."""
        self._llm_in, self._play_in = llm_in, play_in
        self._heard = heard

    async def aclose(self) -> None:
        """Cancel the built-in tools' timers, the idle timeout and the MCP calls, wait for them,
        and close the MCP connections."""
        # Every MCP task, not only those of live replies: one that has its result may be
        # finishing its reply (and starting the answer) right now.
        # Every idle timeout's task too: one that fired may be emitting or starting its response.
        tasks = (*self._timers, *self._mcp_tasks, *self._idle_tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.mcp.aclose()

    def live(self) -> dict[int, Reply]:
        """The replies kept now, by generation (for tests and diagnostics)."""
        return dict(self._replies)

    # ------------------------------------------------------------------ the generation

    def begin(self) -> int:
        """Open a new generation for an answer; every earlier one goes stale (turn stage)."""
        return self._move_on()

    def retract(self, gen: int) -> None:
        """Speculative answer ``gen`` is withdrawn: it goes stale and its reply is dropped."""
        self._move_on()

    def _move_on(self) -> int:
        """The one place the generation moves: every earlier one goes stale, and a reply of theirs
        that was never released (a superseded or withdrawn speculation, which nobody will see)
        is dropped with it.  Released replies stay until their ``response.done``."""
        gen = self._scope.next()
        for old in [g for g, r in self._replies.items() if g < gen and not r.released]:
            del self._replies[old]
        return gen

    # ------------------------------------------------------------------ the client's requests

    @property
    def active_response_id(self) -> str | None:
        """The response being generated or spoken, if any."""
        return self._playing.id if self._playing is not None and not self._playing.done else None

    async def quiet(self) -> None:
        """Return once no response is active (at once if none is)."""
        await self._quiet.wait()

    async def create_response(
        self,
        instructions: str | None = None,
        *,
        tools: tuple[Tool, ...] | None = None,
        tool_choice: str | None = None,
        audio: bool | None = None,
        out_of_band: bool = False,
        input: tuple[InputItem, ...] | None = None,
        metadata: dict[str, str] | None = None,
        max_output_tokens: int | None = None,
    ) -> str:
        """Answer now from the history (``response.create``); returns the response id.
        ``instructions``, ``tools``, ``tool_choice``, ``audio`` (False: text only) and
        ``max_output_tokens`` replace the session's for this response only.  ``out_of_band``
        (``conversation: "none"``): its message and calls stay out of the history (a summary, a
        classification).  ``input``: the items it reads instead of the conversation (an
        ``item_reference`` names one of the history's; an unknown one is refused with
        ``item_not_found`` before anything starts).  ``metadata`` comes back on its
        ``response.created`` and ``response.done``.
        Refused with ``conversation_already_has_active_response`` while one is active."""
        if self._settings().kind != "realtime":
            raise ProtocolError("invalid_state", "a transcription session does not create responses (session.type is transcription)")
        if self._playing is not None and not self._playing.done:
            raise ProtocolError(
                "conversation_already_has_active_response",
                f"response {self._playing.id} is still in progress; cancel it first",
            )
        for n, entry in enumerate(input or ()):
            if entry.ref is not None and self._history.find(entry.ref) is None:
                raise ProtocolError("item_not_found", f"no item {excerpt(entry.ref)} to reference", param=f"response.input[{n}].id")
        assert self._llm_in is not None, "connect() first"
        self._disarm_idle()
        gen = self.begin()
        reply = self._reply(gen)
        reply.instructions = instructions
        reply.tools, reply.tool_choice, reply.audio = tools, tool_choice, audio
        reply.out_of_band, reply.input, reply.metadata, reply.max_tokens = out_of_band, input, metadata, max_output_tokens
        await self._release(reply)
        await self._llm_in.put(UserTurn(t=self._clock.now(), gen=gen, session=self._id, text=None, speculative=False))
        return reply.id

    async def cancel_response(self, reason: str = "client_cancelled") -> bool:
        """Stop the response being spoken (``response.cancel``); False when there is none."""
        if self._playing is None or self._playing.done:
            return False
        await self._interrupt(reason)
        return True

    async def stop_item(self, item_id: str) -> bool:
        """The client has declared the rest of item ``item_id`` unheard
        (``conversation.item.truncate``) while its reply is still being paced out: its audio
        stops now (nothing more of it is sent), its generation is cancelled and it ends
        ``cancelled`` (``client_cancelled``).  The caller cuts the item to what the client heard.
        False (nothing done) when ``item_id`` is not the active reply's message."""
        reply = self._playing
        if reply is None or reply.done or reply.item_id != item_id:
            return False
        self._move_on()
        self._playing = None
        self._note_activity()
        await self._finish(reply, ResponseStatus.CANCELLED, "client_cancelled")
        return True

    async def clear_output(self) -> None:
        """``output_audio_buffer.clear``: the client dropped the audio it had buffered.  As a
        barge-in: a reply still being generated or heard stops, its item keeps what the listener
        heard by now (the heard clock) and it ends ``cancelled``; the client is told
        (:class:`PlaybackCleared`) in every case, also when nothing was playing (then with an
        empty ``response_id``).  Only a reply that speaks is cut: a text-only one has no audio
        to clear and goes on."""
        reply = self._playing
        now = self._clock.now()
        if reply is not None and reply.item is not None and self._speaks_reply(reply) and reply.audible(now):
            await self._interrupt("client_cancelled")  # tells the client PlaybackCleared itself
            return
        await self._emit(PlaybackCleared(t=now, gen=self._scope.current, session=self._id, response_id="", item_id="", heard_ms=0.0))

    def _speaks_reply(self, reply: Reply) -> bool:
        """Whether ``reply`` is spoken (also once it is no longer kept by generation)."""
        return reply.audio if reply.audio is not None else self._settings().audio

    def transcription_failed(self) -> str | None:
        """The STT failed on the user's speech: the id of the user item it was for (None when no
        speech was under way), which is forgotten, so the next speech starts a new item."""
        item_id = self._user_item
        self._user_item, self._user_start_ms = None, None
        return item_id

    async def add_tool_output(self, call_id: str, output: str) -> str:
        """The client's result of call ``call_id`` (a ``function_call_output`` item); returns the
        item's id.  Exactly once per call: an unknown call or a second output is refused, also
        when the call was already closed as cancelled because the conversation went on.  It
        does not start a response (the client asks with ``response.create``); an answer that
        starts later, spoken or created, uses it."""
        if self._history.call(call_id) is None:
            raise ProtocolError("call_not_found", f"no function call with call_id {excerpt(call_id)}", param="item.call_id")
        answered = self._history.output_of(call_id)
        if answered is not None:
            why = "was closed as cancelled: the conversation went on before it arrived" if answered.synthetic else "already has one"
            raise ProtocolError("tool_output_already_received", f"call {excerpt(call_id)} {why}", param="item.call_id")
        item = self._history.add_output(call_id, output)
        await self._emit_output(item.id, call_id, output, synthetic=False)
        return item.id

    # ------------------------------------------------------------------ what stages ask

    async def prompt(self, turn: UserTurn) -> LlmPrompt:
        """The messages, tools and tool choice of the answer of ``turn`` (the LLM stage asks)."""
        await self.mcp.ready()  # an MCP server named just now: offer its tools (bounded by the timeout)
        reply = self._replies.get(turn.gen)
        settings = self._settings()
        instructions = (reply.instructions if reply and reply.instructions else None) or settings.instructions
        # An out-of-band response, or one that reads its own ``input``, leaves the conversation
        # as it is: no closing outputs added (its prompt shows placeholders, as
        # History.messages does for any call without output) and no items cut to fit.
        keeps_conversation = reply is not None and (reply.out_of_band or reply.input is not None)
        if not turn.speculative and not keeps_conversation:
            # This answer goes ahead whatever the client sends now: a call still without its
            # output is closed as cancelled, in the history and for the client (exactly once).
            for call in self._history.unanswered_calls():
                item = self._history.add_output(call.call_id, CANCELLED_OUTPUT, synthetic=True)
                await self._emit_output(item.id, call.call_id, CANCELLED_OUTPUT, synthetic=True)
        # An out-of-band response only reports its calls (none runs here): it is offered the
        # client's tools alone, not the MCP servers' or the built-in ones it would never run.
        tools = self._client_tools(reply) if reply is not None and reply.out_of_band else self.offered_tools(self._client_tools(reply))
        choice = reply.tool_choice if reply is not None and reply.tool_choice is not None else settings.tool_choice
        if choice not in ("auto", "none", "required") and all(t.name != choice for t in tools):
            choice = "auto"
        # The examples show the reply style of the server's instructions; a response with its own
        # instructions, or one that may call a tool, is prompted without them.
        examples = settings.examples if not (reply and reply.instructions) and not tools else ()
        # with_tools ends the instructions with CALL_TOOLS when tools are offered.  Without it
        # the 1.5B (IQ4_NL) told the listener how to call get_weather ("you can call the
        # `get_weather` function with the city parameter set to Paris") for 3 of 5 phrasings of
        # a weather question; with it, it called the tool for all 5, and the 12 cases of
        # scripts/eval_tools.py still went to the right tool or none (0.5B: 10/12 either way).
        # "...; never describe a call" made it write an empty "<tools></tools>".  Also with
        # tool_choice "none" (the answer from a built-in tool's result, a timer announcement):
        # the system message, and so the KV-cached prefix with the tools' listing after it,
        # stays the one of the turns before; the engine's grammar keeps that reply from calling.
        instructions = with_tools(instructions, tools)

        max_tokens = reply.max_tokens if reply is not None else None
        if reply is not None and reply.input is not None:
            # The client's own context for this response: read as given, not cut to the window.
            given = input_messages(instructions, reply.input, self._history)
            if given[-1].role == "tool":
                given.append(Message("system", ANSWER_FROM_TOOLS))  # the answer after a tool (render() says why)
            return LlmPrompt(given, tools, choice, max_tokens)

        def render() -> list[Message]:
            messages = self._history.messages(instructions, pending_user=turn.text, gen=turn.gen, examples=examples)
            if messages and messages[-1].role == "tool":
                # Answering from tool results, not from the user's words.  Without a word on what to
                # do with them, the 0.5B model mostly writes another call (often as text, which would
                # be spoken); this one line turned that into a spoken answer in every case tried
                # (tests/integration/test_tools.py).  It is in this prompt only, not in the history.
                messages.append(Message("system", ANSWER_FROM_TOOLS))
            return messages

        if self._fitter is None:
            return LlmPrompt(render(), tools, choice, max_tokens)
        async with self._fitting:  # a prefill and a turn may ask at once: one cut at a time
            fitted = await self._fitter.fit(self._history, render, tools, may_cut=not keeps_conversation)
        if fitted.dropped:
            await self._announce_cut(fitted.dropped, fitted.tokens)
        return LlmPrompt(fitted.messages, tools, choice, max_tokens)

    def offered_tools(self, client_tools: tuple[Tool, ...]) -> tuple[Tool, ...]:
        """``client_tools``, the tools of the session's MCP servers, then the server's built-in
        tools: a name already offered is not offered again (the client's own tool wins)."""
        tools = (*client_tools, *(t.tool for t in self.mcp.tools() if all(c.name != t.tool.name for c in client_tools)))
        return tools if self._builtin is None else self._builtin.offered_with(tools)

    async def _announce_cut(self, dropped: list[str], tokens: int) -> None:
        """Tell the client which items left the history to fit the LLM's window; count and log it."""
        assert self._fitter is not None
        self._metrics.context_cut(len(dropped))
        log.info(
            "session %s: %d oldest history items dropped to fit the LLM's context window (prompt now %d of %d tokens)",
            self._id,
            len(dropped),
            tokens,
            self._fitter.window,
        )
        await self._emit(ItemsDropped(t=self._clock.now(), gen=self._scope.current, session=self._id, item_ids=tuple(dropped)))

    def speaks(self, gen: int) -> bool:
        """Whether generation ``gen`` is spoken (else its text goes to the client as text)."""
        reply = self._replies.get(gen)
        return reply.audio if reply is not None and reply.audio is not None else self._settings().audio

    def agent_audible(self) -> bool:
        """Whether the listener may be hearing the agent now (the VAD asks, for barge-in)."""
        return self._playing is not None and self._playing.audible(self._clock.now())

    def may_speculate(self) -> bool:
        """No speculative answer while a call waits for its output: its prompt is not known yet."""
        return not self._history.unanswered_calls()

    async def on_event(self, ev: Event) -> None:
        """What a stage notifies: turns, transcripts, timeline marks, calls, audio, ends."""
        now = self._clock.now()
        if isinstance(ev, SpeechStarted):
            self._disarm_idle()
            # speech_started goes first, then the interrupted response's done (OpenAI's order).
            if self._user_item is None:
                self._user_item = new_id("item")
                self._user_start_ms = ev.audio_ms
                await self._emit(InputSpeechStarted(t=now, gen=ev.gen, session=self._id, item_id=self._user_item, audio_ms=ev.audio_ms))
            detection = self._settings().turn_detection
            if self.agent_audible() and (detection is None or detection.interrupt_response):
                await self._interrupt("turn_detected")
        elif isinstance(ev, TranscriptDelta):
            if self._user_item is not None:
                await self._emit(InputTranscriptDelta(t=now, gen=ev.gen, session=self._id, item_id=self._user_item, text=ev.text))
            settings = self._settings()
            if self._heard is not None and settings.turn_detection is not None and settings.kind == "realtime":
                self._heard(ev.text)  # a prefill for the answer: a transcription session has none
        elif isinstance(ev, TurnConfirmed):
            await self._confirm(ev)
        elif isinstance(ev, Mark | LlmRoute | LlmUsage | ToolCallMade | ToolCallRejected):
            if not self._scope.is_stale(ev.gen):
                await self._on_generation_note(ev)
        elif isinstance(ev, OutputTranscriptDelta):
            reply = self._replies.get(ev.gen)
            # Stale: the reply was stopped (truncated, cleared, barged in): not one more word or chunk.
            if reply is not None and reply.item is not None and not self._scope.is_stale(ev.gen):
                reply.item.add_clause(ev.text, ev.clause_ms)
                await self._emit(ev)
        elif isinstance(ev, AudioDelta):
            reply = self._replies.get(ev.gen)
            if reply is not None and reply.item is not None and not self._scope.is_stale(ev.gen):
                reply.item.add_audio(len(ev.pcm) * 1000.0 / ev.rate)
                self.spoke = self.spoke or len(ev.pcm) > 0
                reply.timeline.mark("first_audio_sent", now)
                await self._emit(ev)
        elif isinstance(ev, GenerationEnd):
            reply = self._replies.get(ev.gen)
            if reply is not None and not reply.done:
                if reply.mcp_calls and ev.status is ResponseStatus.COMPLETED:
                    reply.ended = (ev.status, ev.error)  # the last MCP call to end finishes it
                else:
                    await self._finish(reply, ev.status, ev.error)
        else:  # pragma: no cover - every notified type is handled above
            log.debug("unhandled event %s", type(ev).__name__)

    # ------------------------------------------------------------------ internals

    def _note_activity(self) -> None:
        if self.active_response_id is None:
            self._quiet.set()
        else:
            self._quiet.clear()

    def _reply(self, gen: int) -> Reply:
        reply = self._replies.get(gen)
        if reply is None:
            reply = self._replies[gen] = Reply(gen)
        return reply

    async def _emit_output(self, item_id: str, call_id: str, output: str, *, synthetic: bool) -> None:
        await self._emit(
            ToolOutputAdded(
                t=self._clock.now(),
                gen=self._scope.current,
                session=self._id,
                item_id=item_id,
                previous_item_id=self._history.previous_id(item_id),
                call_id=call_id,
                output=output,
                synthetic=synthetic,
            )
        )
        await self._trim_history()  # at most server.max_history_items, calls and outputs included

    async def _release(self, reply: Reply) -> None:
        """``reply`` is the turn's answer: into the history, to the client, and audible."""
        assert self._play_in is not None, "connect() first"
        prev_id = None if reply.out_of_band else self._history.last_id
        reply.released = True
        if reply.out_of_band:
            reply.item = AssistantItem(id=reply.item_id, gen=reply.gen)  # kept for the reply only
        else:
            reply.item = self._history.add_assistant(reply.gen, reply.item_id)
            await self._trim_history()
        self._playing = reply
        self._note_activity()
        await self._emit(
            ResponseCreated(
                t=self._clock.now(),
                gen=reply.gen,
                session=self._id,
                response_id=reply.id,
                item_id=reply.item_id,
                previous_item_id=prev_id,
                audio=self.speaks(reply.gen),
                in_conversation=not reply.out_of_band,
                metadata=reply.metadata,
            )
        )
        await self._play_in.put(
            ReleaseReply(
                t=self._clock.now(), gen=reply.gen, session=self._id, response_id=reply.id, item_id=reply.item_id, listener=reply.listener
            )
        )
        held, reply.held = reply.held, []
        for ev in held:
            await self._tool_event(reply, ev)

    async def _tool_event(self, reply: Reply, ev: ToolCallMade | ToolCallRejected) -> None:
        """A call the LLM made for ``reply``: into the history and to the client, once released."""
        if not reply.released:
            reply.held.append(ev)
            return
        now = self._clock.now()
        if isinstance(ev, ToolCallRejected):
            await self._emit(
                ErrorEvent(
                    t=now,
                    gen=ev.gen,
                    session=self._id,
                    code="invalid_tool_call",
                    message=f"the model's call of {ev.name!r} was not usable and was not sent ({ev.problem})",
                    kind="server_error",
                )
            )
            return
        if reply.out_of_band:
            # Reported with the response only: the conversation never sees it, so no output is
            # expected for it and no built-in tool runs.
            call = CallSummary(new_id("item"), ev.call_id, ev.name, ev.arguments)
            reply.calls.append(call)
            await self._call_added(reply, ev, now, call.item_id, None, in_conversation=False)
            return
        mcp_tool = self._mcp_tool(reply, ev.name)
        if mcp_tool is not None:
            await self._start_mcp_call(reply, ev, mcp_tool)
            return
        prev = self._history.last_id
        item = self._history.add_call(ev.gen, ev.call_id, ev.name, ev.arguments)
        reply.calls.append(CallSummary(item.id, ev.call_id, ev.name, ev.arguments))
        await self._call_added(reply, ev, now, item.id, prev)
        await self._trim_history()
        if self._runs_here(reply, ev.name):
            await self._run_builtin(reply, ev)

    def _client_tools(self, reply: Reply | None) -> tuple[Tool, ...]:
        """The tools the client offers for ``reply``: its own (``response.create``), else the session's."""
        return reply.tools if reply is not None and reply.tools is not None else self._settings().tools

    def _mcp_tool(self, reply: Reply, name: str) -> McpTool | None:
        """The MCP tool a call of ``name`` is for: one the client did not define a function of."""
        if any(t.name == name for t in self._client_tools(reply)):
            return None
        return self.mcp.find(name)

    async def _call_added(
        self, reply: Reply, ev: ToolCallMade, now: float, item_id: str, previous: str | None, *, in_conversation: bool = True
    ) -> None:
        """Announce the model's call ``ev`` (the reply's latest) as item ``item_id``."""
        await self._emit(
            FunctionCallAdded(
                t=now,
                gen=ev.gen,
                session=self._id,
                response_id=reply.id,
                item_id=item_id,
                previous_item_id=previous,
                output_index=len(reply.calls),
                call_id=ev.call_id,
                name=ev.name,
                arguments=ev.arguments,
                in_conversation=in_conversation,
            )
        )

    async def _start_mcp_call(self, reply: Reply, ev: ToolCallMade, tool: McpTool) -> None:
        """Into the history and to the client, then run it in a task of its own."""
        prev = self._history.last_id
        item = self._history.add_mcp_call(ev.gen, ev.call_id, ev.name, ev.arguments, tool.server_label)
        reply.calls.append(CallSummary(item.id, ev.call_id, ev.name, ev.arguments, tool.server_label))
        index = len(reply.calls)
        reply.mcp_items.append(item)
        await self._emit(
            McpCallAdded(
                t=self._clock.now(),
                gen=ev.gen,
                session=self._id,
                response_id=reply.id,
                item_id=item.id,
                previous_item_id=prev,
                output_index=index,
                server_label=tool.server_label,
                name=ev.name,
                arguments=ev.arguments,
            )
        )
        await self._trim_history()
        task = asyncio.create_task(self._run_mcp_call(reply, item, tool), name=f"{self._id}.mcp.call")
        self._mcp_tasks.add(task)
        task.add_done_callback(self._mcp_tasks.discard)
        reply.mcp_calls[item.id] = (task, item, index)

    async def _run_mcp_call(self, reply: Reply, item: McpCallItem, tool: McpTool) -> None:
        """Call ``tool``; then, once it is the reply's last call and its generation has ended,
        finish the reply (which answers from the results)."""
        arguments = loads_lenient(item.arguments) if item.arguments.strip() else {}
        try:
            item.output = await self.mcp.call(tool, arguments if isinstance(arguments, dict) else {})
        except McpError as exc:
            item.error = exc.error_object()
        entry = reply.mcp_calls.pop(item.id, None)
        if entry is None:
            return  # the reply was closed meanwhile; whoever closed it told the client
        await self._mcp_call_done(reply, item, entry[2])
        if not reply.mcp_calls and reply.ended is not None and not reply.done:
            await self._finish(reply, *reply.ended)

    async def _mcp_call_done(self, reply: Reply, item: McpCallItem, index: int) -> None:
        """Tell the client how MCP call ``item`` ended; a failure is an ``error`` too, and the
        answer after the reply apologises."""
        now = self._clock.now()
        reply.answer_after = True
        if item.error is not None and not item.cancelled:
            reply.mcp_failed.append(item.name)
            await self._emit(
                ErrorEvent(
                    t=now,
                    gen=item.gen,
                    session=self._id,
                    code="mcp_call_failed",
                    message=f"MCP tool {item.name!r} on server {item.server_label!r} failed: {item.error.get('message')}",
                    kind="server_error",
                )
            )
        await self._emit(
            McpCallDone(
                t=now,
                gen=item.gen,
                session=self._id,
                response_id=reply.id,
                item_id=item.id,
                previous_item_id=self._history.previous_id(item.id),
                output_index=index,
                server_label=item.server_label,
                name=item.name,
                arguments=item.arguments,
                output=item.output,
                error=item.error,
            )
        )

    async def _cancel_mcp_calls(self, reply: Reply) -> None:
        """Cancel ``reply``'s MCP calls still running, wait for them, and close their items."""
        calls, reply.mcp_calls = reply.mcp_calls, {}
        for task, _, _ in calls.values():
            task.cancel()
        await asyncio.wait([task for task, _, _ in calls.values()])
        for _, item, index in calls.values():
            if item.output is None and item.error is None:
                item.error = {"type": "tool_execution_error", "message": "cancelled: the response ended first"}
                item.cancelled = True
            await self._mcp_call_done(reply, item, index)

    def _runs_here(self, reply: Reply, name: str) -> bool:
        """Whether the server itself runs tool ``name`` (a built-in the client did not define)."""
        return self._builtin is not None and self._builtin.runs(name, self._client_tools(reply))

    async def _run_builtin(self, reply: Reply, ev: ToolCallMade) -> None:
        assert self._builtin is not None
        output, timer = self._builtin.call(ev.name, ev.arguments)
        item = self._history.add_output(ev.call_id, output)
        await self._emit_output(item.id, ev.call_id, output, synthetic=False)
        reply.answer_after = True
        if timer is not None:
            task = asyncio.create_task(self._timer(timer), name=f"{self._id}.timer")
            self._timers.add(task)
            task.add_done_callback(self._timers.discard)

    async def _timer(self, timer: TimerRequest) -> None:
        """Speak up when ``timer`` is due (on the session's clock), once no answer is under way.
        Given up (logged) when the session can no longer answer: it became a transcription
        session, or the response is refused for any reason but another one being active."""
        await self._clock.sleep_until(self._clock.now() + timer.seconds)
        note = f" A timer the user set ({timer.label}, {timer.seconds} s) has just gone off: tell them so now, in one short sentence."
        while True:
            await self.quiet()
            if self._settings().kind != "realtime":
                log.info("session %s: timer %r went off in a transcription session: not announced", self._id, timer.label)
                return
            try:
                await self.create_response(self._settings().instructions + note, tool_choice="none")
                return
            except ProtocolError as exc:
                if exc.code != "conversation_already_has_active_response":
                    log.warning("session %s: timer %r not announced: %s (%s)", self._id, timer.label, exc, exc.code)
                    return
            # An answer started in between: wait for it.  quiet() returns without yielding when
            # the session looks quiet, so yield here: never a loop that starves the event loop.
            await asyncio.sleep(0)

    # ------------------------------------------------------------------ the idle timeout

    @property
    def idle_armed(self) -> bool:
        """Whether an idle timeout is waiting to trigger (for tests and diagnostics)."""
        return self._idle is not None

    def _disarm_idle(self) -> None:
        """Cancel the idle timeout still waiting, if any.  One that has fired is no longer armed
        (it may be the caller: its own response disarms): it finishes, tracked until it ends."""
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None

    def settings_changed(self) -> None:
        """The session's settings changed: an ``idle_timeout_ms`` set while the conversation is
        quiet (no response, no user speech) starts counting at once, from the end of the last
        reply's audio (a session that has not spoken yet: from now); one turned off is disarmed."""
        td = self._settings().turn_detection
        if not self._idle_wanted() or td is None:
            self._disarm_idle()
        elif (self._idle is None or td.idle_timeout_ms != self._idle_ms) and self.active_response_id is None and self._user_item is None:
            self._arm_idle()  # a new value counts at once, from the same start

    def _idle_wanted(self) -> bool:
        settings = self._settings()
        td = settings.turn_detection
        return settings.kind == "realtime" and td is not None and td.type == "server_vad" and td.idle_timeout_ms is not None

    def _arm_idle(self) -> None:
        """With ``server_vad``'s ``idle_timeout_ms``: once the last reply's audio has finished
        playing (its heard clock's end), that much more silence triggers the timeout.  Speech, a
        new response or another reply's end disarms it first."""
        self._disarm_idle()
        td = self._settings().turn_detection
        if not self._idle_wanted() or td is None or td.idle_timeout_ms is None:
            return
        if self._history.unanswered_calls():
            return  # the client is running a tool: its output, then its response.create, come next
        end = max(self._clock.now(), self._heard_end)
        self._idle_ms = td.idle_timeout_ms
        task = asyncio.create_task(self._idle_timeout(end + td.idle_timeout_ms / 1000.0), name=f"{self._id}.idle")
        self._idle = task
        self._idle_tasks.add(task)
        task.add_done_callback(self._idle_tasks.discard)

    async def _idle_timeout(self, deadline: float) -> None:
        """At ``deadline`` (the session's clock): ``input_audio_buffer.timeout_triggered``, the
        silence committed as an empty user item, and a response that asks the user to go on
        (as OpenAI's documentation describes).  Nothing when the user is speaking, a response
        is active, or the session no longer asks for it (idle_timeout_ms or server_vad turned
        off, or it became a transcription session) meanwhile.  Once fired it is no longer armed
        (:meth:`_disarm_idle` leaves it alone) but stays in the set :meth:`aclose` cancels."""
        await self._clock.sleep_until(deadline)
        if self._idle is asyncio.current_task():
            self._idle = None  # fired: no longer armed
        settings = self._settings()
        td = settings.turn_detection
        if (
            settings.kind != "realtime"
            or td is None
            or td.type != "server_vad"
            or td.idle_timeout_ms is None
            or self._user_item is not None
            or self.active_response_id is not None
            or self._history.unanswered_calls()
        ):
            return
        now = self._clock.now()
        end_ms = self._input_ms()
        item_id = new_id("item")
        prev = self._history.last_id
        await self._emit(
            InputTimeoutTriggered(
                t=now,
                gen=self._scope.current,
                session=self._id,
                item_id=item_id,
                audio_start_ms=max(0.0, end_ms - td.idle_timeout_ms),
                audio_end_ms=end_ms,
            )
        )
        self._history.add_user("", -1, item_id)
        await self._emit(InputCommitted(t=now, gen=self._scope.current, session=self._id, item_id=item_id, previous_item_id=prev))
        await self._trim_history()
        with contextlib.suppress(ProtocolError):  # a response started in between: it answers instead
            await self.create_response(self._settings().instructions + IDLE_PROMPT)

    async def _interrupt(self, reason: str) -> None:
        reply = self._playing
        self._move_on()
        self._playing = None
        self._note_activity()
        if reply is None or reply.item is None:
            return
        now = self._clock.now()
        if reply.audible(now):
            heard = reply.listener.heard_ms(now)
            reply.item.cut(heard)
            self._metrics.barge_in()
            await self._emit(
                PlaybackCleared(t=now, gen=reply.gen, session=self._id, response_id=reply.id, item_id=reply.item_id, heard_ms=heard)
            )
        if not reply.done:
            await self._finish(reply, ResponseStatus.CANCELLED, reason)

    async def _finish(self, reply: Reply, status: ResponseStatus, reason: str | None) -> None:
        """Close ``reply`` (exactly once): ``response.done``, metrics, the turn's log line.  Its MCP
        calls still running are cancelled first (their items closed before ``response.done``)."""
        reply.done = True
        self._note_activity()
        if reply.mcp_calls:
            await self._cancel_mcp_calls(reply)
        item = reply.item
        if item is not None:
            item.status = "completed" if status is ResponseStatus.COMPLETED else "incomplete"
        now = self._clock.now()
        await self._emit(
            ResponseDone(
                t=now,
                gen=reply.gen,
                session=self._id,
                response_id=reply.id,
                item_id=reply.item_id,
                status=status,
                text=item.text if item else "",
                reason=reason,
                audio_ms=item.audio_ms if item else 0.0,
                calls=tuple(self._summary(c, reply) for c in reply.calls),
                metadata=reply.metadata,
            )
        )
        self._replies.pop(reply.gen, None)
        await self._observe(reply, status, reason, now)
        if not reply.out_of_band:
            end = reply.listener.end_t or 0.0
            # A reply that did not complete was cut (or never sent the rest): nothing plays past now.
            self._heard_end = max(self._heard_end, end if status is ResponseStatus.COMPLETED else min(end, now))
        # Any end of a reply (cancelled or failed too; an out-of-band one counts from the last
        # reply heard) starts the idle count again, unless the user is speaking (a barge-in) or
        # another response is under way.
        if self._user_item is None and self.active_response_id is None:
            self._arm_idle()
        if status is ResponseStatus.COMPLETED and not reply.out_of_band and self.on_completed is not None:
            self.on_completed(reply.gen)
        if reply.answer_after and status is ResponseStatus.COMPLETED and self.active_response_id is None:
            # A built-in or MCP tool has answered: say what it found (as a client would ask,
            # response.create).  No further calls in that answer: a small model may call the same
            # tool again and again.
            instructions = reply.instructions
            if reply.mcp_failed:
                apology = MCP_APOLOGY.format(tools=", ".join(dict.fromkeys(reply.mcp_failed)))
                instructions = (instructions or self._settings().instructions) + apology
            # The answer is the same response's sequel: its metadata and token limit, and (a
            # response with its own ``input``) that input with the calls and results it made.
            await self.create_response(
                instructions,
                tools=reply.tools,
                tool_choice="none",
                audio=reply.audio,
                input=None if reply.input is None else (*reply.input, *self._made_items(reply)),
                metadata=reply.metadata,
                max_output_tokens=reply.max_tokens,
            )

    def _made_items(self, reply: Reply) -> tuple[InputItem, ...]:
        """References to the calls ``reply`` made and their outputs, as they stand in the history."""
        refs: list[InputItem] = []
        for call in reply.calls:
            if self._history.find(call.item_id) is None:
                continue  # trimmed away since
            refs.append(InputItem(ref=call.item_id))
            output = self._history.output_of(call.call_id)
            if output is not None:
                refs.append(InputItem(ref=output.id))
        return tuple(refs)

    @staticmethod
    def _summary(call: CallSummary, reply: Reply) -> CallSummary:
        """``call`` as ``response.done`` lists it: an MCP call with its result."""
        item = next((i for i in reply.mcp_items if i.id == call.item_id), None)
        if item is None:
            return call
        return dataclasses.replace(call, output=item.output, error=item.error)

    async def _observe(self, reply: Reply, status: ResponseStatus, reason: str | None, now: float) -> None:
        """Metrics, the client's ``TurnMetrics``, the log line and the trace of a closed reply."""
        spans = reply.timeline.spans_ms()
        queue_ms = reply.timeline.between_ms("llm_request", "llm_admitted")
        active = self._metrics.sessions_active
        engine, route = reply.llm_route or (None, None)
        usage = reply.usage
        self._metrics.observe_turn(status.value, spans, queue_ms)
        if reply.llm_route is not None:
            self._metrics.observe_llm_route(reply.llm_route)
        if usage is not None:
            self._metrics.observe_tokens(usage.engine, usage.prompt_tokens, usage.reused_tokens, usage.generated_tokens, usage.decode_s)
        if spans or reply.llm_route is not None:  # a text turn has no speech timeline, but an engine
            await self._emit(
                TurnMetrics(
                    t=now,
                    gen=reply.gen,
                    session=self._id,
                    response_id=reply.id,
                    spans=spans,
                    sessions_active=active,
                    llm_queue_ms=queue_ms,
                    llm_engine=engine,
                    llm_route=route,
                    playback_gap_ms=round(reply.listener.gaps_ms, 1),
                )
            )
        settings = self._settings()
        record = turn_record(self._config, self._id, settings.voice, reply, status, reason, spans, queue_ms, active, settings.tracing)
        turn_log.info(json.dumps(record))
        tracing.record_turn(
            reply.timeline.marks,
            now,
            {k: v for k, v in record.items() if isinstance(v, str | int | float) and k != "event"}
            | ({f"tokens_{k}": v for k, v in record["tokens"].items()} if record["tokens"] else {})
            | {f"model_{k}": v for k, v in record["models"].items()}
            | (settings.tracing.attributes() if settings.tracing is not None else {}),
        )

    async def _on_generation_note(self, ev: Mark | LlmRoute | LlmUsage | ToolCallMade | ToolCallRejected) -> None:
        """What a stage noted about a live generation: timeline, engine, usage, tool calls."""
        reply = self._reply(ev.gen)
        if isinstance(ev, Mark):
            reply.timeline.mark(ev.name, ev.t)
        elif isinstance(ev, LlmRoute):
            reply.llm_route = (ev.engine, ev.reason)
        elif isinstance(ev, LlmUsage):
            reply.usage = ev
        else:
            await self._tool_event(reply, ev)

    async def _confirm(self, ev: TurnConfirmed) -> None:
        now = self._clock.now()
        item_id = self._user_item or new_id("item")
        # The turn's audio: from its speech start, or (a manual commit, no VAD) from the end of
        # the turn before.
        start_ms = self._user_start_ms if self._user_start_ms is not None else self._input_end_ms
        audio_s = max(0.0, ev.audio_end_ms - start_ms) / 1000.0
        self._input_end_ms = max(self._input_end_ms, ev.audio_end_ms)
        self._user_item, self._user_start_ms = None, None
        prev = self._history.last_id
        if self._settings().turn_detection is not None:
            await self._emit(InputSpeechStopped(t=now, gen=ev.gen, session=self._id, item_id=item_id, audio_ms=ev.audio_end_ms))
        self._history.add_user(ev.text, ev.gen if ev.respond else -1, item_id)
        await self._emit(InputCommitted(t=now, gen=ev.gen, session=self._id, item_id=item_id, previous_item_id=prev))
        await self._emit(InputTranscriptDone(t=now, gen=ev.gen, session=self._id, item_id=item_id, text=ev.text, audio_s=audio_s))
        await self._trim_history()
        if not ev.respond or self._scope.is_stale(ev.gen):
            return
        previous = self._playing
        if previous is not None and not previous.done:
            # Already stale (this turn's generation superseded it); close it for the client.
            await self._finish(previous, ResponseStatus.CANCELLED, "turn_detected")
        reply = self._reply(ev.gen)
        tl = reply.timeline
        tl.mark("speech_end", self._arrival_time(ev.audio_end_ms))
        for name, t in ev.marks.items():
            tl.mark(name, t)
        tl.mark("turn_confirmed", ev.t)
        await self._release(reply)
