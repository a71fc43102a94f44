"""The shell of a session's conversation core: it carries out the core's effects and runs its tasks.

:class:`ReplyController` owns a :class:`~voiceagent.conversation.core.ConversationCore` and is
what the session and its stages talk to.  Every input goes to the core, which answers with
effects; the shell carries them out in order (send an event, start an answer, release a reply to
playout, prefill, arm the idle timeout, run or cancel an MCP call, start a timer, report a turn)
and feeds back what its tasks observe (an MCP result, a timer or the idle timeout due).  The
core's state is consistent once it answers, before any effect is carried out.

MCP tools (:mod:`voiceagent.conversation.mcp_servers`): a call runs in a task of its own while its
response stays open; a response that ends otherwise (barge-in, ``response.cancel``, a new turn)
cancels its calls and waits for them before its ``response.done``.

Cancellation: :meth:`ReplyController.aclose` cancels the timers, the idle timeout and the MCP
calls, waits for them and closes the MCP connections.  A task is told its result only after it is
no longer cancellable, so an effect list is never cut short by its own cancellation; every other
method lets ``CancelledError`` through untouched.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from voiceagent.clock import Clock
from voiceagent.config import Config
from voiceagent.conversation.catalog import ToolBox
from voiceagent.conversation.core import ConversationCore
from voiceagent.conversation.effects import (
    ArmIdle,
    ArmResume,
    CancelMcpCalls,
    Completed,
    CountBargeIn,
    DisarmIdle,
    Effect,
    Emit,
    FirstAudio,
    PausePlayout,
    Prefill,
    Release,
    Report,
    ResumePlayout,
    RunMcpCall,
    StartAnswer,
    StartTimer,
    TurnEnded,
)
from voiceagent.conversation.history import History
from voiceagent.conversation.mcp_servers import McpServers
from voiceagent.conversation.prompt_fit import PromptFitter
from voiceagent.conversation.prompting import Prompter, keeps_conversation
from voiceagent.conversation.reply import ResponseOptions
from voiceagent.conversation.report import Reporter
from voiceagent.events import Event, TranscriptSegment, TurnConfirmed, UserTurn
from voiceagent.observability.metrics import Metrics
from voiceagent.pipeline import Channel, Generations, GenerationScope
from voiceagent.pipeline.hold import PlayoutHold
from voiceagent.settings import SessionSettings
from voiceagent.stages.llm import LlmPrompt
from voiceagent.tools.builtin import BuiltinTools, TimerRequest
from voiceagent.tools.mcp import McpError
from voiceagent.tools.phone import PhoneTools
from voiceagent.tools.spec import Tool

__all__ = ["ConversationHost", "ReplyController"]

log = logging.getLogger(__name__)


class ConversationHost(Protocol):
    """What the conversation needs of its session."""

    @property
    def settings(self) -> SessionSettings:
        """The session's settings as they are now."""
        ...

    @property
    def input_ms(self) -> float:
        """Milliseconds of user audio received so far."""
        ...

    async def emit(self, event: Event) -> None:
        """Send ``event`` to the client (waits while the outbox is full)."""
        ...

    def arrival_time(self, audio_ms: float) -> float:
        """When the input audio up to ``audio_ms`` arrived (the session's clock)."""
        ...


class ReplyController:
    """The conversation of one session, as its stages and transport use it.

    Wiring (the session's): :meth:`connect` hands it the LLM and playout inboxes once they exist;
    stages read :attr:`generations`, report through :meth:`on_event` and take prompts from
    :meth:`prompt`; what they ask of the conversation's state (the modality, whether the agent is
    audible, whether to speculate; the turn stage's ``begin`` and ``retract``) they ask
    :attr:`core` directly."""

    def __init__(
        self,
        session_id: str,
        clock: Clock,
        config: Config,
        metrics: Metrics,
        history: History,
        host: ConversationHost,
        wall_clock: Callable[[], dt.datetime] | None = None,
        fitter: PromptFitter | None = None,
        phone: PhoneTools | None = None,
    ) -> None:
        """``wall_clock``: the local time the built-in tools report; ``fitter``: cuts the history
        to the LLM's window before each prompt (None: never cut); ``phone``: the call-control
        tools of a phone session (None: not one)."""
        self._id = session_id
        self._clock = clock
        self._metrics = metrics
        self._host = host
        builtin = BuiltinTools(wall_clock) if config.tools.builtin else None
        scope = GenerationScope()
        self.mcp = McpServers(session_id, clock, scope, host.emit, config.tools.mcp_timeout_s, config.tools.mcp_allowed)
        """The session's MCP servers (``session.update`` names them)."""
        toolbox = self._toolbox = ToolBox(self.mcp, builtin, phone)
        self.core = ConversationCore(session_id, clock, config, history, host, toolbox, scope)
        self._prompter = Prompter(session_id, clock, scope, history, toolbox, fitter, metrics)
        self._reporter = Reporter(session_id, config, metrics)
        self.hold = PlayoutHold()
        """Paused while speech over a reply is judged; the playout stage waits on it."""
        self._llm_in: Channel[Event] | None = None
        self._play_in: Channel[Event] | None = None
        self._prefill: Callable[[str], None] | None = None
        self._completed: Callable[[int], None] | None = None
        self._quiet = asyncio.Event()  # set while no response is active
        self._quiet.set()
        self._idle: asyncio.Task[None] | None = None  # the idle timeout armed now
        self._mcp_running: dict[str, asyncio.Task[None]] = {}  # MCP calls that may still be cancelled
        self._tasks: set[asyncio.Task[None]] = set()  # every task started, until it ends

    # ------------------------------------------------------------------ wiring

    @property
    def generations(self) -> Generations:
        """The counter, read-only: what stages, channels and gates get."""
        return self.core.generations

    def connect(
        self,
        llm_in: Channel[Event],
        play_in: Channel[Event],
        prefill: Callable[[str], None] | None = None,
        completed: Callable[[int], None] | None = None,
    ) -> None:
        """The inboxes a reply is started (``response.create``) and released into; ``prefill`` is
        told each partial transcript of the user's speech, ``completed`` each generation heard to
        its end (not out of band: the semantic cache stores only those)."""
        self._llm_in, self._play_in = llm_in, play_in
        self._prefill, self._completed = prefill, completed

    async def aclose(self) -> None:
        """Cancel the timers, the idle timeout and the MCP calls, wait for them, close the MCP
        connections.  Every task, not only the cancellable ones: one that has its result may be
        finishing its reply (and starting the answer) right now."""
        tasks = tuple(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.mcp.aclose()

    # ------------------------------------------------------------------ queries

    def offered_tools(self, client_tools: tuple[Tool, ...]) -> tuple[Tool, ...]:
        """``client_tools``, the MCP servers' tools, then the built-in ones (names not repeated)."""
        return self._toolbox.offered(client_tools)

    def running(self, kind: str) -> tuple[asyncio.Task[None], ...]:
        """The tasks of one kind not yet ended: ``"idle"``, ``"timer"``, ``"mcp.call"`` or
        ``"resume"`` (for tests and diagnostics)."""
        return tuple(t for t in self._tasks if t.get_name() == f"{self._id}.{kind}")

    async def quiet(self) -> None:
        """Return once no response is active (at once if none is)."""
        await self._quiet.wait()

    # ------------------------------------------------------------------ inputs

    async def on_event(self, ev: Event) -> None:
        """What a stage notifies: turns, transcripts, timeline marks, calls, audio, ends."""
        if isinstance(ev, TurnConfirmed):
            await self._apply(self.core.handle(TurnEnded(ev, self._host.arrival_time(ev.audio_end_ms))))
        else:
            await self._apply(self.core.handle(ev))

    async def segment_heard(self, seg: TranscriptSegment) -> bool:
        """A speech segment's final transcript, before the turn stage uses it (its
        ``takes_turn`` port): False when it is speech over a paused reply that is no
        interruption, which the turn stage then drops (see :meth:`ConversationCore.segment_heard`)."""
        takes, effects = self.core.segment_heard(seg.text, seg.level_db, seg.confidence, seg.sound_margin, seg.end_ms, seg.heard)
        await self._apply(effects)
        return takes

    async def respond(self, options: ResponseOptions) -> str:
        """Answer now from the history (``response.create``) as ``options`` ask; returns the
        response id.  Refused (``ProtocolError``) as :meth:`ConversationCore.create_response` says."""
        response_id, effects = self.core.create_response(options)
        await self._apply(effects)
        return response_id

    async def cancel_response(self, reason: str = "client_cancelled") -> bool:
        """Stop the response being spoken (``response.cancel``); False when there is none."""
        stopped, effects = self.core.cancel_response(reason)
        await self._apply(effects)
        return stopped

    async def stop_item(self, item_id: str) -> bool:
        """The rest of item ``item_id`` is unheard: its reply stops (see :meth:`ConversationCore.stop_item`)."""
        stopped, effects = self.core.stop_item(item_id)
        await self._apply(effects)
        return stopped

    async def clear_output(self) -> None:
        """``output_audio_buffer.clear`` (see :meth:`ConversationCore.clear_output`)."""
        await self._apply(self.core.clear_output())

    async def add_tool_output(self, call_id: str, output: str) -> str:
        """The client's result of call ``call_id``; returns the item's id (see :meth:`ConversationCore.add_tool_output`)."""
        item_id, effects = self.core.add_tool_output(call_id, output)
        await self._apply(effects)
        return item_id

    async def trim_history(self) -> None:
        """Keep at most ``server.max_history_items`` items; the client is told which left."""
        await self._apply(self.core.trim())

    def transcription_failed(self) -> str | None:
        """The STT failed: the user item it was for, forgotten (None: no speech was under way)."""
        return self.core.transcription_failed()

    def settings_changed(self) -> None:
        """The session's settings changed: the idle timeout may start or stop counting (the only
        effects a change has, carried out at once)."""
        for fx in self.core.settings_changed():
            assert isinstance(fx, ArmIdle | DisarmIdle), fx
            self._set_idle(fx)

    async def prompt(self, turn: UserTurn) -> LlmPrompt:
        """The prompt of the answer of ``turn`` (the LLM stage asks).  A confirmed answer goes
        ahead whatever the client sends now: calls still without output are closed first."""
        await self.mcp.ready()  # an MCP server named just now: offer its tools (bounded by the timeout)
        options = self.core.options(turn.gen)
        if not turn.speculative and not keeps_conversation(options):
            await self._apply(self.core.close_unanswered_calls())
        prompt, dropped = await self._prompter.prompt(turn, options, self._host.settings)
        if dropped is not None:
            await self._host.emit(dropped)
        return prompt

    # ------------------------------------------------------------------ carrying out effects

    async def _apply(self, effects: Sequence[Effect]) -> None:
        """Carry out ``effects`` in order.  The core's state is already the one after them."""
        if self.core.active_response_id is None:
            self._quiet.set()
        else:
            self._quiet.clear()
        for fx in effects:
            if isinstance(fx, Emit):
                await self._host.emit(fx.event)
            elif isinstance(fx, StartAnswer):
                assert self._llm_in is not None, "connect() first"
                await self._llm_in.put(fx.turn)
            elif isinstance(fx, Release):
                assert self._play_in is not None, "connect() first"
                await self._play_in.put(fx.release)
            elif isinstance(fx, Prefill):
                if self._prefill is not None:
                    self._prefill(fx.text)
            elif isinstance(fx, ArmIdle | DisarmIdle):
                self._set_idle(fx)
            elif isinstance(fx, RunMcpCall):
                self._mcp_running[fx.item.id] = self._start(self._mcp_call(fx), "mcp.call")
            elif isinstance(fx, CancelMcpCalls):
                await self._cancel_mcp(fx.item_ids)
            elif isinstance(fx, StartTimer):
                self._start(self._timer(fx.timer), "timer")
            elif isinstance(fx, Report):
                metrics = self._reporter.report(fx.reply, fx.status, fx.reason, fx.t, self._host.settings)
                if metrics is not None:
                    await self._host.emit(metrics)
            elif isinstance(fx, Completed):
                if self._completed is not None:
                    self._completed(fx.gen)
            elif isinstance(fx, FirstAudio):
                self._metrics.first_audio(self._id, fx.latency_ms)
            elif isinstance(fx, CountBargeIn):
                self._metrics.barge_in()
            elif isinstance(fx, PausePlayout | ResumePlayout | ArmResume):
                self._pause(fx)

    def _pause(self, fx: PausePlayout | ResumePlayout | ArmResume) -> None:
        """Speech over a reply: its playout paused, resumed, or a resume timeout armed."""
        if isinstance(fx, PausePlayout):
            self.hold.pause(fx.gen)
        elif isinstance(fx, ResumePlayout):
            self.hold.resume(fx.gen)
            if fx.resumed:
                self._metrics.interruption_resumed()
        else:
            self._start(self._resume_after(fx.token, fx.deadline), "resume")

    def _start(self, coro: Awaitable[None], name: str) -> asyncio.Task[None]:
        task = asyncio.ensure_future(coro)
        task.set_name(f"{self._id}.{name}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _set_idle(self, fx: ArmIdle | DisarmIdle) -> None:
        """Forget the idle timeout armed before; start the one ``fx`` arms, if it does."""
        # A fired timeout carrying out its own effects is no longer armed: they do not cancel it.
        if self._idle is not None and self._idle is not asyncio.current_task():
            self._idle.cancel()
        self._idle = self._start(self._idle_timeout(fx.token, fx.deadline), "idle") if isinstance(fx, ArmIdle) else None

    async def _idle_timeout(self, token: int, deadline: float) -> None:
        await self._clock.sleep_until(deadline)
        if self._idle is asyncio.current_task():
            self._idle = None  # fired: no longer cancellable by a disarm
        await self._apply(self.core.idle_due(token, self._host.input_ms))

    async def _resume_after(self, token: int, deadline: float) -> None:
        await self._clock.sleep_until(deadline)
        await self._apply(self.core.resume_due(token))

    async def _timer(self, timer: TimerRequest) -> None:
        await self._clock.sleep_until(self._clock.now() + timer.seconds)
        await self._apply(self.core.timer_due(timer))

    async def _mcp_call(self, fx: RunMcpCall) -> None:
        """Run one MCP call; its result goes to the core once it can no longer be cancelled."""
        output: str | None = None
        error: dict[str, object] | None = None
        try:
            output = await self.mcp.call(fx.tool, fx.arguments)
        except McpError as exc:
            error = exc.error_object()
        self._mcp_running.pop(fx.item.id, None)
        await self._apply(self.core.mcp_call_ended(fx.item.id, output, error))

    async def _cancel_mcp(self, item_ids: tuple[str, ...]) -> None:
        tasks = [t for t in (self._mcp_running.pop(i, None) for i in item_ids) if t is not None]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)
