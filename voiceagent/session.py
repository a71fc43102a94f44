"""One conversation: the pipeline of stages, the history and the per-turn timeline.

A transport drives a :class:`Session` through its methods (``append_audio``, ``commit_input``,
``add_text``, ``create_response``, ``cancel_response``, ``truncate``, ``update``) and reads what
to send to its client from :meth:`Session.events`.  The session is cheap: the models live in the
shared :class:`~voiceagent.backends.Engines`.

Barge-in: speech that starts while a response is audible (the VAD requires ``barge_in_ms`` of it
then) moves the generation on, which cancels LLM, TTS and playout work in flight; the assistant
item is cut to the audio the listener heard, the client is told to clear its playback buffer
(:class:`~voiceagent.events.PlaybackCleared`) and the response ends ``cancelled``.

Cancellation: ``aclose()`` (or leaving ``async with``) cancels every stage task and waits for
them; model calls already running in executors finish in their threads and are discarded.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import math
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from voiceagent import tracing
from voiceagent.audio import PIPELINE_RATE, Int16Array
from voiceagent.backends.protocols import Tool
from voiceagent.backends.registry import Engines
from voiceagent.builtin_tools import BuiltinTools, TimerRequest
from voiceagent.clock import Clock, MonotonicClock
from voiceagent.config import Config
from voiceagent.errors import ProtocolError, StageError
from voiceagent.events import (
    AudioDelta,
    AudioFrame,
    CallSummary,
    ErrorEvent,
    Event,
    FunctionCallAdded,
    GenerationEnd,
    InputClear,
    InputCleared,
    InputCommit,
    InputCommitted,
    InputSpeechStarted,
    InputSpeechStopped,
    InputTranscriptDelta,
    InputTranscriptDone,
    ItemsDropped,
    ItemTruncated,
    LlmRoute,
    LlmUsage,
    Mark,
    OutputTranscriptDelta,
    PlaybackCleared,
    ResponseCreated,
    ResponseDone,
    ResponseStatus,
    SpeechStarted,
    TextItemAdded,
    ToolCallMade,
    ToolCallRejected,
    ToolOutputAdded,
    TranscriptDelta,
    TurnConfirmed,
    TurnMetrics,
    TurnRetracted,
    UserTurn,
)
from voiceagent.history import CANCELLED_OUTPUT, AssistantItem, History, new_id
from voiceagent.metrics import Metrics, TurnTimeline
from voiceagent.pipeline import Channel, GenerationScope, StageContext
from voiceagent.pipeline.gate import GenerationGate
from voiceagent.settings import SessionSettings, settings_from_config
from voiceagent.stages.llm import LlmPrompt, LlmStage
from voiceagent.stages.playout import PlayoutStage
from voiceagent.stages.stt import SttStage
from voiceagent.stages.tts import TtsStage
from voiceagent.stages.turn import TurnStage
from voiceagent.stages.vad import VadStage

__all__ = ["QUEUES", "Session"]

log = logging.getLogger(__name__)

QUEUES = ("vad", "stt", "turn", "llm", "tts", "playout", "outbox")
"""The queues of a session in pipeline order: the inbox of each stage, then the outbox to the
client (:meth:`Session.queue_depths`, ``voiceagent_queue_depth``)."""
_INBOX = 256  # per stage; ~5 s of 20 ms audio frames before back-pressure reaches the transport
_OUTBOX = 1024
_CLOSED = object()
# Heard and sent audio are sums of different float terms: a finished reply may differ by 1e-12.
_AUDIBLE_EPS_MS = 1.0


@dataclass
class _Response:
    gen: int
    id: str
    item_id: str
    timeline: TurnTimeline = field(default_factory=TurnTimeline)
    released: bool = False
    done: bool = False
    item: AssistantItem | None = None
    instructions: str | None = None
    llm_route: tuple[str, str] | None = None
    """(engine, reason): which LLM engine answered and why."""
    usage: LlmUsage | None = None
    tools: tuple[Tool, ...] | None = None
    """This response's tools and choice (``response.create``); None: the session's."""
    tool_choice: str | None = None
    calls: list[CallSummary] = field(default_factory=list)
    held: list[ToolCallMade | ToolCallRejected] = field(default_factory=list)
    """Calls made before the response was released (a speculative answer): sent at release."""
    audio: bool | None = None
    """This response's output modality (``response.create``); None: the session's."""
    answer_after: bool = False
    """A built-in tool answered one of its calls: answer again with the result once it ends."""


class Session:
    """A conversation with one client.  Use ``async with Session(...) as s:``."""

    def __init__(
        self,
        engines: Engines,
        config: Config,
        *,
        clock: Clock | None = None,
        metrics: Metrics | None = None,
        session_id: str | None = None,
    ) -> None:
        self.id = session_id or new_id("sess")
        self.config = config
        self.clock: Clock = clock or MonotonicClock()
        self.metrics = metrics or Metrics()
        self.settings: SessionSettings = settings_from_config(config)
        self.history = History()
        self.scope = GenerationScope()
        self._engines = engines
        self._outbox: asyncio.Queue[object] = asyncio.Queue(maxsize=_OUTBOX)
        self._tasks: list[asyncio.Task[None]] = []
        self._channels: tuple[Channel[Event], ...] = ()
        self._responses: dict[int, _Response] = {}
        self._playing: _Response | None = None
        self._user_item: str | None = None
        self._audio_ms = 0.0
        self._arrivals: deque[tuple[float, float]] = deque(maxlen=3000)  # (end_ms, clock time)
        self._started = False
        self._closed = False
        self._quiet = asyncio.Event()  # set while no response is active
        self._quiet.set()
        self._builtin = BuiltinTools() if config.tools.builtin else None
        self._timers: set[asyncio.Task[None]] = set()

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> Session:
        await self.start()
        return self

    async def __aexit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        await self.aclose()

    async def start(self) -> None:
        """Build the stages and start their tasks."""
        if self._started:
            return
        self._started = True
        cfg = self.config
        ctx = StageContext(self.id, self.clock, self.scope, self._on_event, self._on_stage_error)

        def chan(name: str) -> Channel[Event]:
            return Channel(name, _INBOX, self.scope, on_wait=self.metrics.queue_wait, clock=self.clock.now)

        self._vad_in, stt_in, turn_in, llm_in, tts_in, play_in = (chan(n) for n in QUEUES[:-1])
        self._llm_in = llm_in
        gate = GenerationGate(enabled=cfg.llm.yield_to_tts, scope=self.scope)
        llm_started = GenerationGate(enabled=cfg.llm.yield_to_tts, timeout_s=0.5, scope=self.scope)
        self.vad = VadStage(
            ctx,
            self._vad_in,
            stt_in,
            self._engines.vad,
            lambda: self.settings,
            self._agent_audible,
            cfg.vad.stop_ms,
            cfg.vad.min_speech_ms,
            cfg.vad.barge_in_ms,
        )
        self.stt = SttStage(
            ctx,
            stt_in,
            turn_in,
            self._engines.stt,
            lambda: self.settings,
            cfg.stt.partials,
            cfg.stt.partial_interval_ms,
            cfg.stt.early_decode,
        )
        self.turn = TurnStage(
            ctx,
            turn_in,
            llm_in,
            self._engines.turn if cfg.turn.model != "none" else None,
            lambda: self.settings,
            cfg.turn.speculative,
            cfg.turn.complete_ms,
            cfg.turn.threshold,
            llm_started,
            cfg.vad.stop_ms,
            self._engines.turn_cost.audio_after_first_token_s * 1000.0 if self._engines.turn_cost else 0.0,
            may_speculate=lambda: not self.history.unanswered_calls(),
        )
        self.llm = LlmStage(
            ctx, llm_in, tts_in, self._engines.llm, self._prompt, lambda: self.settings, gate, llm_started, cfg.llm.first_clause_words
        )
        self.tts = TtsStage(ctx, tts_in, play_in, self._engines.tts, lambda: self.settings, gate, self._speaks)
        self.playout = PlayoutStage(ctx, play_in, cfg.playout.lead_ms, cfg.playout.chunk_ms)
        for stage in (self.vad, self.stt, self.turn, self.llm, self.tts, self.playout):
            self._tasks.append(asyncio.create_task(stage.run(), name=f"{self.id}.{stage.name}"))
        self._channels = (self._vad_in, stt_in, turn_in, llm_in, tts_in, play_in)
        self.metrics.session_opened()

    async def aclose(self) -> None:
        """Stop every stage.  Idempotent."""
        if self._closed:
            return
        self._closed = True
        for task in (*self._tasks, *self._timers):
            task.cancel()
        await asyncio.gather(*self._tasks, *self._timers, return_exceptions=True)
        if self._started:
            self.metrics.session_closed()
        if self._outbox.full():
            # Nobody is reading (the client is gone): make room so events() can still end.
            self._outbox.get_nowait()
        self._outbox.put_nowait(_CLOSED)

    async def events(self) -> AsyncIterator[Event]:
        """What to send to the client, in order, until the session closes."""
        while True:
            item = await self._outbox.get()
            if item is _CLOSED:
                return
            assert isinstance(item, Event)
            yield item

    def queue_depths(self) -> dict[str, int]:
        """Events waiting now in front of each stage, and in the outbox to the client."""
        depths = {ch.name: len(ch) for ch in self._channels}
        depths["outbox"] = self._outbox.qsize()
        return depths

    # ------------------------------------------------------------------ transport API

    def update(self, **changes: Any) -> SessionSettings:
        """Change session settings (fields of :class:`SessionSettings`); returns the new ones."""
        self.settings = dataclasses.replace(self.settings, **changes)
        return self.settings

    async def append_audio(self, pcm: Int16Array) -> None:
        """User audio at 16 kHz.  Waits (back-pressure) rather than dropping when stages lag."""
        now = self.clock.now()
        frame = AudioFrame(t=now, gen=self.scope.current, session=self.id, pcm=pcm, start_ms=self._audio_ms)
        self._audio_ms += len(pcm) * 1000.0 / PIPELINE_RATE
        self._arrivals.append((self._audio_ms, now))
        await self._vad_in.put(frame)

    @property
    def input_ms(self) -> float:
        """Milliseconds of user audio received so far."""
        return self._audio_ms

    async def commit_input(self) -> None:
        """Manual turn-taking: the buffered audio is a user turn (transcribed, added to history)."""
        await self._vad_in.put(InputCommit(t=self.clock.now(), gen=self.scope.current, session=self.id))

    async def clear_input(self) -> None:
        await self._vad_in.put(InputClear(t=self.clock.now(), gen=self.scope.current, session=self.id))
        await self._emit(InputCleared(t=self.clock.now(), gen=self.scope.current, session=self.id))

    async def add_text(self, text: str, role: str = "user") -> str:
        """Add a text item to the history (``conversation.item.create``); returns its id."""
        prev = self.history.last_id
        if role == "assistant":
            item = self.history.add_assistant(-1, new_id("item"))
            item.add_clause(text)
            item.status = "completed"
            item_id = item.id
        else:
            item_id = self.history.add_user(text).id
        await self._emit(
            TextItemAdded(
                t=self.clock.now(), gen=self.scope.current, session=self.id, item_id=item_id, previous_item_id=prev, role=role, text=text
            )
        )
        await self._trim_history()
        return item_id

    async def _trim_history(self) -> None:
        """Keep at most ``server.max_history_items`` items; the client is told which left."""
        dropped = self.history.trim(self.config.server.max_history_items)
        if dropped:
            await self._emit(ItemsDropped(t=self.clock.now(), gen=self.scope.current, session=self.id, item_ids=tuple(dropped)))

    async def create_response(
        self,
        instructions: str | None = None,
        *,
        tools: tuple[Tool, ...] | None = None,
        tool_choice: str | None = None,
        audio: bool | None = None,
    ) -> str:
        """Answer now from the history (``response.create``); returns the response id.  ``tools``,
        ``tool_choice`` and ``audio`` (False: text only) replace the session's for this response."""
        if self._playing is not None and not self._playing.done:
            raise ProtocolError(
                "conversation_already_has_active_response",
                f"response {self._playing.id} is still in progress; cancel it first",
            )
        gen = self.scope.next()
        resp = self._response(gen)
        resp.instructions = instructions
        resp.tools, resp.tool_choice, resp.audio = tools, tool_choice, audio
        await self._release(resp)
        await self._llm_in.put(UserTurn(t=self.clock.now(), gen=gen, session=self.id, text=None, speculative=False))
        return resp.id

    @property
    def active_response_id(self) -> str | None:
        """The response being generated or spoken, if any."""
        return self._playing.id if self._playing is not None and not self._playing.done else None

    async def quiet(self) -> None:
        """Return once no response is active (at once if none is)."""
        await self._quiet.wait()

    def _note_activity(self) -> None:
        if self.active_response_id is None:
            self._quiet.set()
        else:
            self._quiet.clear()

    async def cancel_response(self, reason: str = "client_cancelled") -> bool:
        """Stop the response being spoken (``response.cancel``); False when there is none."""
        if self._playing is None or self._playing.done:
            return False
        await self._interrupt(reason)
        return True

    async def truncate(self, item_id: str, audio_end_ms: float) -> None:
        """The client played only ``audio_end_ms`` of assistant item ``item_id``."""
        item = self.history.find(item_id)
        if item is None:
            raise ProtocolError("item_not_found", f"no item {item_id!r}", param="item_id")
        if not isinstance(item, AssistantItem):
            raise ProtocolError("invalid_item_type", "only assistant items can be truncated", param="item_id")
        if not math.isfinite(audio_end_ms) or audio_end_ms < 0 or audio_end_ms > item.audio_ms + 1.0:
            raise ProtocolError(
                "invalid_audio_end_ms",
                f"audio_end_ms {audio_end_ms} is outside the item's audio (0..{item.audio_ms:.0f} ms)",
                param="audio_end_ms",
            )
        item.cut(audio_end_ms, by_client=True)
        await self._emit(
            ItemTruncated(
                t=self.clock.now(), gen=self.scope.current, session=self.id, item_id=item_id, audio_end_ms=audio_end_ms, text=item.text
            )
        )

    async def add_tool_output(self, call_id: str, output: str) -> str:
        """The client's result of call ``call_id`` (a ``function_call_output`` item); returns the
        item's id.  Exactly once per call: an unknown call or a second output is refused, also
        when the call was already closed as cancelled because the conversation went on.  It
        does not start a response (the client asks with ``response.create``); an answer that
        starts later, spoken or created, uses it."""
        if self.history.call(call_id) is None:
            raise ProtocolError("call_not_found", f"no function call with call_id {call_id!r}", param="item.call_id")
        answered = self.history.output_of(call_id)
        if answered is not None:
            why = "was closed as cancelled: the conversation went on before it arrived" if answered.synthetic else "already has one"
            raise ProtocolError("tool_output_already_received", f"call {call_id!r} {why}", param="item.call_id")
        item = self.history.add_output(call_id, output)
        await self._emit_output(item.id, call_id, output, synthetic=False)
        return item.id

    async def _emit_output(self, item_id: str, call_id: str, output: str, *, synthetic: bool) -> None:
        await self._emit(
            ToolOutputAdded(
                t=self.clock.now(),
                gen=self.scope.current,
                session=self.id,
                item_id=item_id,
                previous_item_id=self.history.previous_id(item_id),
                call_id=call_id,
                output=output,
                synthetic=synthetic,
            )
        )

    def delete_item(self, item_id: str) -> None:
        if not self.history.delete(item_id):
            raise ProtocolError("item_not_found", f"no item {item_id!r}", param="item_id")

    # ------------------------------------------------------------------ internals

    async def _prompt(self, turn: UserTurn) -> LlmPrompt:
        resp = self._responses.get(turn.gen)
        instructions = (resp.instructions if resp and resp.instructions else None) or self.settings.instructions
        if not turn.speculative:
            # This answer goes ahead whatever the client sends now: a call still without its
            # output is closed as cancelled, in the history and for the client (exactly once).
            for call in self.history.unanswered_calls():
                item = self.history.add_output(call.call_id, CANCELLED_OUTPUT, synthetic=True)
                await self._emit_output(item.id, call.call_id, CANCELLED_OUTPUT, synthetic=True)
        tools = self._client_tools(resp)
        if self._builtin is not None:  # the server's own tools, unless the client defines the name
            tools = (*tools, *(t for t in self._builtin.tools if all(c.name != t.name for c in tools)))
        choice = resp.tool_choice if resp is not None and resp.tool_choice is not None else self.settings.tool_choice
        if choice not in ("auto", "none", "required") and all(t.name != choice for t in tools):
            choice = "auto"
        messages = self.history.messages(instructions, pending_user=turn.text, gen=turn.gen)
        return LlmPrompt(messages, tools, choice)

    def _speaks(self, gen: int) -> bool:
        """Whether generation ``gen`` is spoken (else its text goes to the client as text)."""
        resp = self._responses.get(gen)
        return resp.audio if resp is not None and resp.audio is not None else self.settings.audio

    def _agent_audible(self) -> bool:
        resp = self._playing
        if resp is None:
            return False
        if not resp.done:
            return True
        tl = self.playout.timeline(resp.gen)
        return tl.heard_ms(self.clock.now()) < tl.sent_ms - _AUDIBLE_EPS_MS

    def _response(self, gen: int) -> _Response:
        resp = self._responses.get(gen)
        if resp is None:
            resp = _Response(gen=gen, id=new_id("resp"), item_id=new_id("item"))
            self._responses[gen] = resp
        return resp

    def _arrival_time(self, audio_ms: float) -> float:
        for end_ms, t in self._arrivals:
            if end_ms >= audio_ms:
                return t
        return self.clock.now()

    async def _emit(self, event: Event) -> None:
        if isinstance(event, ErrorEvent):
            self.metrics.error(event.code)
        await self._outbox.put(event)

    async def _release(self, resp: _Response) -> None:
        previous = self._playing
        if previous is not None and previous.gen != resp.gen:
            self.playout.forget(previous.gen)
        prev_id = self.history.last_id
        resp.released = True
        resp.item = self.history.add_assistant(resp.gen, resp.item_id)
        await self._trim_history()
        self._playing = resp
        self._note_activity()
        await self._emit(
            ResponseCreated(
                t=self.clock.now(),
                gen=resp.gen,
                session=self.id,
                response_id=resp.id,
                item_id=resp.item_id,
                previous_item_id=prev_id,
                audio=self._speaks(resp.gen),
            )
        )
        self.playout.release(resp.gen, resp.id, resp.item_id)
        held, resp.held = resp.held, []
        for ev in held:
            await self._tool_event(resp, ev)

    async def _tool_event(self, resp: _Response, ev: ToolCallMade | ToolCallRejected) -> None:
        """A call the LLM made for ``resp``: into the history and to the client, once released."""
        if not resp.released:
            resp.held.append(ev)
            return
        now = self.clock.now()
        if isinstance(ev, ToolCallRejected):
            await self._emit(
                ErrorEvent(
                    t=now,
                    gen=ev.gen,
                    session=self.id,
                    code="invalid_tool_call",
                    message=f"the model's call of {ev.name!r} was not usable and was not sent ({ev.problem})",
                    kind="server_error",
                )
            )
            return
        prev = self.history.last_id
        item = self.history.add_call(ev.gen, ev.call_id, ev.name, ev.arguments)
        resp.calls.append(CallSummary(item.id, ev.call_id, ev.name, ev.arguments))
        await self._emit(
            FunctionCallAdded(
                t=now,
                gen=ev.gen,
                session=self.id,
                response_id=resp.id,
                item_id=item.id,
                previous_item_id=prev,
                output_index=len(resp.calls),
                call_id=ev.call_id,
                name=ev.name,
                arguments=ev.arguments,
            )
        )
        if self._runs_here(resp, ev.name):
            await self._run_builtin(resp, ev)

    def _client_tools(self, resp: _Response | None) -> tuple[Tool, ...]:
        """The tools the client offers for ``resp``: its own (``response.create``), else the session's."""
        return resp.tools if resp is not None and resp.tools is not None else self.settings.tools

    def _runs_here(self, resp: _Response, name: str) -> bool:
        """Whether the server itself runs tool ``name`` (a built-in the client did not define)."""
        return self._builtin is not None and self._builtin.handles(name) and all(t.name != name for t in self._client_tools(resp))

    async def _run_builtin(self, resp: _Response, ev: ToolCallMade) -> None:
        assert self._builtin is not None
        timer: TimerRequest | None = None
        try:
            output, timer = self._builtin.run(ev.name, ev.arguments)
        except (KeyError, ValueError, TypeError) as exc:
            output = json.dumps({"error": f"{type(exc).__name__}: {exc}"})
        item = self.history.add_output(ev.call_id, output)
        await self._emit_output(item.id, ev.call_id, output, synthetic=False)
        resp.answer_after = True
        if timer is not None:
            task = asyncio.create_task(self._timer(timer), name=f"{self.id}.timer")
            self._timers.add(task)
            task.add_done_callback(self._timers.discard)

    async def _timer(self, timer: TimerRequest) -> None:
        """Speak up when ``timer`` is due (on the session's clock), once no answer is under way."""
        await self.clock.sleep_until(self.clock.now() + timer.seconds)
        note = f" A timer the user set ({timer.label}, {timer.seconds} s) has just gone off: tell them so now, in one short sentence."
        while True:
            await self.quiet()
            with contextlib.suppress(ProtocolError):  # an answer started in between: wait for it
                await self.create_response(self.settings.instructions + note, tool_choice="none")
                return

    async def _interrupt(self, reason: str) -> None:
        resp = self._playing
        self.scope.cancel()
        self._playing = None
        self._note_activity()
        if resp is None or resp.item is None:
            return
        now = self.clock.now()
        tl = self.playout.timeline(resp.gen)
        heard = tl.heard_ms(now)
        if not resp.done or heard < tl.sent_ms - _AUDIBLE_EPS_MS:
            resp.item.cut(heard)
            self.metrics.barge_in()
            await self._emit(
                PlaybackCleared(t=now, gen=resp.gen, session=self.id, response_id=resp.id, item_id=resp.item_id, heard_ms=heard)
            )
        if not resp.done:
            await self._finish(resp, ResponseStatus.CANCELLED, reason)

    async def _finish(self, resp: _Response, status: ResponseStatus, reason: str | None) -> None:
        resp.done = True
        self._note_activity()
        item = resp.item
        if item is not None:
            item.status = "completed" if status is ResponseStatus.COMPLETED else "incomplete"
        now = self.clock.now()
        await self._emit(
            ResponseDone(
                t=now,
                gen=resp.gen,
                session=self.id,
                response_id=resp.id,
                item_id=resp.item_id,
                status=status,
                text=item.text if item else "",
                reason=reason,
                audio_ms=item.audio_ms if item else 0.0,
                calls=tuple(resp.calls),
            )
        )
        spans = resp.timeline.spans_ms()
        queue_ms = resp.timeline.between_ms("llm_request", "llm_admitted")
        active = self.metrics.sessions_active
        engine, route = resp.llm_route or (None, None)
        usage = resp.usage
        self.metrics.observe_turn(status.value, spans, queue_ms)
        if resp.llm_route is not None:
            self.metrics.observe_llm_route(resp.llm_route)
        if usage is not None:
            self.metrics.observe_tokens(usage.engine, usage.prompt_tokens, usage.reused_tokens, usage.generated_tokens, usage.decode_s)
        if spans or resp.llm_route is not None:  # a text turn has no speech timeline, but an engine
            await self._emit(
                TurnMetrics(
                    t=now,
                    gen=resp.gen,
                    session=self.id,
                    response_id=resp.id,
                    spans=spans,
                    sessions_active=active,
                    llm_queue_ms=queue_ms,
                    llm_engine=engine,
                    llm_route=route,
                )
            )
        record = self._turn_record(resp, status, reason, spans, queue_ms, active)
        log.info(json.dumps(record))
        tracing.record_turn(
            resp.timeline.marks,
            now,
            {k: v for k, v in record.items() if isinstance(v, str | int | float) and k != "event"}
            | ({f"tokens_{k}": v for k, v in record["tokens"].items()} if record["tokens"] else {})
            | {f"model_{k}": v for k, v in record["models"].items()},
        )
        self._responses.pop(resp.gen, None)
        if resp.answer_after and status is ResponseStatus.COMPLETED and self.active_response_id is None:
            # A built-in tool has answered: say what it found (as a client would ask, response.create).
            # No further calls in that answer: a small model may call the same tool again and again.
            await self.create_response(resp.instructions, tools=resp.tools, tool_choice="none", audio=resp.audio)

    def _turn_record(
        self, resp: _Response, status: ResponseStatus, reason: str | None, spans: dict[str, float], queue_ms: float | None, active: int
    ) -> dict[str, Any]:
        """The per-turn log line: what a dashboard or an incident needs, no transcript unless
        ``log_transcripts`` is on."""
        cfg = self.config
        usage = resp.usage
        engine, route = resp.llm_route or (None, None)
        record: dict[str, Any] = {
            "event": "turn",
            "session": self.id,
            "response": resp.id,
            "generation": resp.gen,
            "status": status.value,
            "reason": reason,
            "spans_ms": spans,
            "sessions_active": active,
            "llm_queue_ms": queue_ms,
            "llm_engine": engine,
            "llm_route": route,
            "tokens": None
            if usage is None
            else {"prompt": usage.prompt_tokens, "reused": usage.reused_tokens, "generated": usage.generated_tokens},
            "tokens_per_s": round((usage.generated_tokens - 1) / usage.decode_s, 1)
            if usage is not None and usage.decode_s > 0 and usage.generated_tokens > 1
            else None,
            "models": {
                "vad": cfg.vad.model,
                "stt": cfg.stt.model,
                "turn": cfg.turn.model,
                "llm": (usage.model if usage is not None and usage.model else cfg.llm.model),
                "tts": self.settings.voice or cfg.tts.model,
            },
            "audio_ms": round(resp.item.audio_ms, 1) if resp.item is not None else 0.0,
        }
        if cfg.log_transcripts and resp.item is not None:
            record["text"] = resp.item.text
        return record

    async def _on_stage_error(self, err: StageError, gen: int) -> None:
        await self._emit(
            ErrorEvent(t=self.clock.now(), gen=gen, session=self.id, code=f"{err.stage}_failed", message=err.message, kind="server_error")
        )

    async def _on_event(self, ev: Event) -> None:
        now = self.clock.now()
        if isinstance(ev, SpeechStarted):
            # speech_started goes first, then the interrupted response's done (OpenAI's order).
            if self._user_item is None:
                self._user_item = new_id("item")
                await self._emit(InputSpeechStarted(t=now, gen=ev.gen, session=self.id, item_id=self._user_item, audio_ms=ev.audio_ms))
            if self._agent_audible() and (self.settings.turn_detection is None or self.settings.turn_detection.interrupt_response):
                await self._interrupt("turn_detected")
        elif isinstance(ev, TranscriptDelta):
            if self._user_item is not None:
                await self._emit(InputTranscriptDelta(t=now, gen=ev.gen, session=self.id, item_id=self._user_item, text=ev.text))
        elif isinstance(ev, TurnRetracted):
            self._responses.pop(ev.gen, None)
        elif isinstance(ev, TurnConfirmed):
            await self._confirm(ev)
        elif isinstance(ev, Mark | LlmRoute | LlmUsage | ToolCallMade | ToolCallRejected):
            if not self.scope.is_stale(ev.gen):
                await self._on_generation_note(ev)
        elif isinstance(ev, OutputTranscriptDelta):
            resp = self._responses.get(ev.gen)
            if resp is not None and resp.item is not None:
                resp.item.add_clause(ev.text, ev.clause_ms)
                await self._emit(ev)
        elif isinstance(ev, AudioDelta):
            resp = self._responses.get(ev.gen)
            if resp is not None and resp.item is not None:
                resp.item.add_audio(len(ev.pcm) * 1000.0 / ev.rate)
                resp.timeline.mark("first_audio_sent", now)
                await self._emit(ev)
        elif isinstance(ev, GenerationEnd):
            resp = self._responses.get(ev.gen)
            if resp is not None and not resp.done:
                await self._finish(resp, ev.status, ev.error)
        else:  # pragma: no cover - every notified type is handled above
            log.debug("unhandled event %s", type(ev).__name__)

    async def _on_generation_note(self, ev: Mark | LlmRoute | LlmUsage | ToolCallMade | ToolCallRejected) -> None:
        """What a stage noted about a live generation: timeline, engine, usage, tool calls."""
        resp = self._response(ev.gen)
        if isinstance(ev, Mark):
            resp.timeline.mark(ev.name, ev.t)
        elif isinstance(ev, LlmRoute):
            resp.llm_route = (ev.engine, ev.reason)
        elif isinstance(ev, LlmUsage):
            resp.usage = ev
        else:
            await self._tool_event(resp, ev)

    async def _confirm(self, ev: TurnConfirmed) -> None:
        now = self.clock.now()
        item_id = self._user_item or new_id("item")
        self._user_item = None
        prev = self.history.last_id
        if self.settings.turn_detection is not None:
            await self._emit(InputSpeechStopped(t=now, gen=ev.gen, session=self.id, item_id=item_id, audio_ms=ev.audio_end_ms))
        self.history.add_user(ev.text, ev.gen if ev.respond else -1, item_id)
        await self._emit(InputCommitted(t=now, gen=ev.gen, session=self.id, item_id=item_id, previous_item_id=prev))
        await self._emit(InputTranscriptDone(t=now, gen=ev.gen, session=self.id, item_id=item_id, text=ev.text))
        await self._trim_history()
        if not ev.respond or self.scope.is_stale(ev.gen):
            return
        previous = self._playing
        if previous is not None and not previous.done:
            # Already stale (this turn's generation superseded it); close it for the client.
            await self._finish(previous, ResponseStatus.CANCELLED, "turn_detected")
        resp = self._response(ev.gen)
        tl = resp.timeline
        tl.mark("speech_end", self._arrival_time(ev.audio_end_ms))
        for name, t in ev.marks.items():
            tl.mark(name, t)
        tl.mark("turn_confirmed", ev.t)
        await self._release(resp)
