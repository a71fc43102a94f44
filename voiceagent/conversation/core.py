"""The conversation's control, sans I/O: one session's generation, replies, user items and idle timeout.

:class:`ConversationCore` is told what happens (stage events through :meth:`~ConversationCore.handle`,
the client's requests through their own methods, the shell's timers and MCP results) and answers
with :mod:`effects <voiceagent.conversation.effects>` in the order they must happen.  It never
awaits, starts a task or sleeps; it reads only its injected clock.  Its shell,
:class:`~voiceagent.conversation.replies.ReplyController`, carries the effects out.

Every move of the generation goes through the core: a speculative answer or a confirmed turn
(:meth:`~ConversationCore.begin`), a withdrawn speculation (:meth:`~ConversationCore.retract`),
``response.create``, barge-in and ``response.cancel``.  Each generation that answers has one
:class:`~voiceagent.conversation.reply.Reply`, made when a stage first notes something about it
and dropped exactly once: at its ``response.done``, when its speculation is withdrawn, or when a
newer generation supersedes it before release.

Barge-in: speech that starts while a reply is audible moves the generation on (which cancels
LLM, TTS and playout work in flight); the assistant item is cut to the audio the listener heard,
the client is told to clear its playback (:class:`~voiceagent.events.PlaybackCleared`) and the
response ends ``cancelled``.  With ``turn.interruption = "words"`` (the default) the speech first
pauses the reply and its words decide (:mod:`~voiceagent.conversation.interruption`): a barge-in
as above, or the reply resumes where it paused and the speech leaves no trace.

Errors: a client's request the conversation cannot honour raises
:class:`~voiceagent.errors.ProtocolError` before any state changes.
"""

from __future__ import annotations

import logging

from voiceagent.clock import Clock
from voiceagent.config import Config
from voiceagent.config.prompts import IDLE_PROMPT
from voiceagent.conversation.calls import ToolCalls
from voiceagent.conversation.catalog import ToolBox
from voiceagent.conversation.context import CoreContext
from voiceagent.conversation.effects import Completed, Effect, Sink, StartAnswer, TurnEnded
from voiceagent.conversation.history import History
from voiceagent.conversation.idle import IdleTimeout
from voiceagent.conversation.interruption import Interruptions
from voiceagent.conversation.lifecycle import Replies
from voiceagent.conversation.reply import Reply, ResponseOptions
from voiceagent.conversation.user import UserInput
from voiceagent.conversation.verdict import InterruptionPolicy, Verdict
from voiceagent.errors import ProtocolError
from voiceagent.events import (
    AudioDelta,
    Event,
    GenerationEnd,
    LlmRoute,
    LlmUsage,
    Mark,
    OutputTranscriptDelta,
    PlaybackCleared,
    ResponseStatus,
    SoundHeard,
    SpeechStarted,
    SpeechStopped,
    ToolCallMade,
    ToolCallRejected,
    TranscriptDelta,
    UserTurn,
)
from voiceagent.pipeline import Generations, GenerationScope
from voiceagent.settings import SettingsSource
from voiceagent.tools.builtin import TimerRequest

__all__ = ["ConversationCore"]

log = logging.getLogger(__name__)


class ConversationCore:
    """The control of one conversation: inputs in, effects out (see the module's docstring).

    ``host`` holds the session's settings as they are now; ``toolbox`` names the MCP and
    built-in tools that run on the server; ``scope`` is the generation counter the core alone moves."""

    def __init__(
        self,
        session_id: str,
        clock: Clock,
        config: Config,
        history: History,
        host: SettingsSource,
        toolbox: ToolBox,
        scope: GenerationScope,
    ) -> None:
        self._id = session_id
        self._sink = Sink()
        self._ctx = CoreContext(session_id, clock, scope, history, host, self._sink, config.server.max_history_items)
        self._scope, self._clock, self._history, self._host = scope, clock, history, host  # read on every event
        self._calls = ToolCalls(self._ctx, toolbox)
        self._replies = Replies(self._ctx, self._calls)
        self._user = UserInput(self._ctx)
        self._idle = IdleTimeout(self._ctx)
        self.floor = Interruptions(self._ctx, InterruptionPolicy.from_config(config.turn), self._user)
        """Speech over a reply and its judging: the STT and turn stages ask it (``judging``, ``reads_segment_again``)."""

    # ------------------------------------------------------------------ queries

    @property
    def generations(self) -> Generations:
        """The counter, read-only: what stages, channels and gates get."""
        return self._scope

    @property
    def active_response_id(self) -> str | None:
        """The response being generated or spoken, if any."""
        active = self._replies.active
        return active.id if active is not None else None

    @property
    def idle_armed(self) -> bool:
        """Whether an idle timeout is counting."""
        return self._idle.armed

    @property
    def spoke(self) -> bool:
        """True once any reply's audio went to the client (the voice is fixed from then on)."""
        return self._replies.spoke

    def live(self) -> dict[int, Reply]:
        """The replies kept now, by generation (for tests and diagnostics)."""
        return self._replies.live()

    def options(self, gen: int) -> ResponseOptions | None:
        """What generation ``gen``'s response was asked with; None: no reply is kept for it."""
        reply = self._replies.get(gen)
        return None if reply is None else reply.options

    def speaks(self, gen: int) -> bool:
        """Whether generation ``gen`` is spoken (else its text goes to the client as text)."""
        reply = self._replies.get(gen)
        return self._speaks(reply) if reply is not None else self._host.settings.audio

    def agent_audible(self) -> bool:
        """Whether the listener may be hearing the agent now (the VAD asks, for barge-in)."""
        playing = self._replies.playing
        return playing is not None and playing.audible(self._clock.now())

    def may_speculate(self) -> bool:
        """No speculative answer while a call waits for its output: its prompt is not known yet."""
        return not self._history.unanswered_calls()

    # ------------------------------------------------------------------ the generation

    def begin(self) -> int:
        """Open a new generation for an answer; every earlier one goes stale (turn stage)."""
        return self._move_on()

    def retract(self, gen: int) -> None:
        """Speculative answer ``gen`` is withdrawn: it goes stale and its reply is dropped."""
        self._move_on()

    def _move_on(self) -> int:
        """The one place the generation moves: every earlier one goes stale, and a reply of theirs
        that was never released (nobody will see it) is dropped with it.  Released replies stay
        until their ``response.done``."""
        gen = self._scope.next()
        self._replies.drop_unreleased(gen)
        if self.floor.pending is not None:
            # The paused reply is superseded (a cancel, a response.create): the speech being judged
            # is the user's as any other.
            self.floor.hand_over()
        self.floor.forget_late()
        return gen

    # ------------------------------------------------------------------ what stages observe

    def handle(self, ev: Event | TurnEnded) -> list[Effect]:
        """What a stage observed: speech, transcripts, a confirmed turn, timeline marks, the
        engine, calls, the reply's words and audio, the end of a generation."""
        if isinstance(ev, SpeechStarted):
            self._speech_started(ev)
        elif isinstance(ev, SpeechStopped):
            if self.floor.pending is not None:
                self.floor.speech_stopped()
        elif isinstance(ev, TranscriptDelta):
            if self.floor.partial(ev):
                self._take_turn()
        elif isinstance(ev, TurnEnded):
            self._confirm(ev)
        elif isinstance(ev, Mark | LlmRoute | LlmUsage | ToolCallMade | ToolCallRejected):
            if not self._scope.is_stale(ev.gen):
                self._replies.note(ev)
        elif isinstance(ev, OutputTranscriptDelta | AudioDelta):
            if not self._scope.is_stale(ev.gen):  # stopped (truncated, cleared, barged in): not one more word
                self._replies.content(ev)
        elif isinstance(ev, GenerationEnd):
            if (reply := self._replies.generation_ended(ev)) is not None:
                self._finish(reply, ev.status, ev.error)
        else:  # pragma: no cover - every notified type is handled above
            log.debug("unhandled event %s", type(ev).__name__)
        return self._sink.take()

    def _speech_started(self, ev: SpeechStarted) -> None:
        self._idle.disarm()
        if self.floor.pending is not None:
            self.floor.speech_started(ev)  # still being judged: no resume while the user speaks
            return
        detection = self._host.settings.turn_detection
        playing = self._replies.playing
        if playing is not None and self.agent_audible() and (detection is None or detection.interrupt_response):
            if self.floor.policy.judges:
                self.floor.open(ev, playing)
                return
            self._user.speech_started(ev)  # speech_started first, then the interrupted response's done (OpenAI's order)
            self._interrupt("turn_detected")
        else:
            self._user.speech_started(ev)

    def segment_heard(
        self, text: str, level_db: float | None, confidence: float | None = None, margin: float | None = None, end_ms: float | None = None,
        heard: SoundHeard | None = None,
    ) -> tuple[bool, list[Effect]]:  # fmt: skip
        """A segment's final transcript, its readings and its audio's end (:meth:`Interruptions.segment`), before the
        turn stage uses it.  False: speech over a paused reply that is no interruption (a backchannel, a sound), to drop."""
        verdict = self.floor.segment(text, level_db, confidence, margin, end_ms, heard)
        if verdict is Verdict.INTERRUPT:
            self._take_turn()
        return verdict in (None, Verdict.INTERRUPT), self._sink.take()

    def resume_due(self, token: int) -> list[Effect]:
        """Resume timeout ``token`` is due: the paused reply goes on if nothing decided since."""
        self.floor.resume_due(token)
        return self._sink.take()

    def _take_turn(self) -> None:
        """The speech over the paused reply is an interruption: the client hears of it now (its
        start, its partial transcripts), then the reply is cut as in a barge-in."""
        if not self._scope.is_stale(self.floor.hand_over()):
            self._interrupt("turn_detected")

    def _confirm(self, ended: TurnEnded) -> None:
        ev = ended.turn
        self._user.commit(ended)
        if not ev.respond or self._scope.is_stale(ev.gen):
            return
        if (previous := self._replies.active) is not None:
            # Already stale (this turn's generation superseded it): cut if still playing, then closed.
            self._replies.stop_playing(previous)
            self._finish(previous, ResponseStatus.CANCELLED, "turn_detected")
        self._release(self._replies.confirmed(ended))

    # ------------------------------------------------------------------ the client's requests

    def create_response(self, options: ResponseOptions) -> tuple[str, list[Effect]]:
        """Answer now from the history (``response.create``): the response's id and effects.
        ``options`` replace the session's for this response only; refused (:class:`ProtocolError`)
        as :meth:`Replies.check_start <voiceagent.conversation.lifecycle.Replies.check_start>` says."""
        return self._start_response(options).id, self._sink.take()

    def _start_response(self, options: ResponseOptions) -> Reply:
        self._replies.check_start(options)
        self._idle.disarm()
        gen = self.begin()
        reply = self._replies.of(gen)
        reply.options = options
        self._release(reply)
        self._sink.add(StartAnswer(UserTurn(t=self._clock.now(), gen=gen, session=self._id, text=None, speculative=False)))
        return reply

    def cancel_response(self, reason: str = "client_cancelled") -> tuple[bool, list[Effect]]:
        """Stop the response being generated or spoken (``response.cancel``); False: none is."""
        if self._replies.active is None:
            return False, []
        self._interrupt(reason)
        return True, self._sink.take()

    def stop_item(self, item_id: str) -> tuple[bool, list[Effect]]:
        """The client declared the rest of item ``item_id`` unheard (``conversation.item.truncate``)
        while its reply is still paced out: nothing more of it is sent, and it ends ``cancelled``
        (``client_cancelled``); the caller cuts the item.  False: not the active reply's item."""
        reply = self._replies.active
        if reply is None or reply.item_id != item_id:
            return False, []
        self._move_on()
        self._replies.playing = None
        self._finish(reply, ResponseStatus.CANCELLED, "client_cancelled")
        return True, self._sink.take()

    def clear_output(self) -> list[Effect]:
        """``output_audio_buffer.clear``: as a barge-in, a spoken reply still generated or heard
        stops, keeping what the listener heard; the client is told (:class:`PlaybackCleared`) in
        every case, with an empty ``response_id`` when nothing was cut.  A text-only reply goes on."""
        reply, now = self._replies.playing, self._clock.now()
        if reply is not None and reply.item is not None and self._speaks(reply) and reply.audible(now):
            self._interrupt("client_cancelled")  # tells the client PlaybackCleared itself
        else:
            self._sink.emit(PlaybackCleared(t=now, gen=self._scope.current, session=self._id, response_id="", item_id="", heard_ms=0.0))
        return self._sink.take()

    def add_tool_output(self, call_id: str, output: str) -> tuple[str, list[Effect]]:
        """The client's result of call ``call_id`` (see :meth:`ToolCalls.add_output`): its item id.
        It starts no response (the client asks with ``response.create``)."""
        return self._calls.add_output(call_id, output), self._sink.take()

    def close_unanswered_calls(self) -> list[Effect]:
        """An answer goes ahead: calls still without output are closed as cancelled."""
        self._calls.close_unanswered()
        return self._sink.take()

    def transcription_failed(self) -> str | None:
        """The STT failed on the user's speech: the id of the user item it was for (None when no
        speech was under way), which is forgotten, so the next speech starts a new item."""
        return self._user.forget()

    def trim(self) -> list[Effect]:
        """Keep at most ``server.max_history_items`` items (after the session added one)."""
        self._ctx.trim()
        return self._sink.take()

    # ------------------------------------------------------------------ what the shell's tasks report

    def mcp_call_ended(self, item_id: str, output: str | None, error: dict[str, object] | None) -> list[Effect]:
        """An MCP call returned or failed; its reply ends if it was its last and its generation ended."""
        if (reply := self._calls.mcp_ended(item_id, output, error)) is not None and reply.ended is not None:
            self._finish(reply, *reply.ended)
        return self._sink.take()

    def timer_due(self, timer: TimerRequest) -> list[Effect]:
        """A built-in timer went off: announced now, or once the active response has ended.
        Given up (logged) when the session can no longer answer (a transcription session, or a
        refusal for another reason than an active response)."""
        self._calls.timer_went_off(timer)
        self._announce_timers()
        return self._sink.take()

    def _announce_timers(self) -> None:
        while self.active_response_id is None and (due := self._calls.next_timer()) is not None:
            self._try_start(due[1], f"timer {due[0]!r} not announced")

    def idle_due(self, token: int, input_ms: float) -> list[Effect]:
        """Idle timeout ``token`` is due (``input_ms``: the user audio received so far):
        ``input_audio_buffer.timeout_triggered``, the silence committed as an empty user item,
        and a response that asks the user to go on (as OpenAI describes).  Nothing when it was
        disarmed or re-armed since, the user is speaking, a response is active, a client tool
        call waits for its output, or the session no longer asks for it."""
        td = self._idle.fire(token)
        if td is None or td.idle_timeout_ms is None or not self._quiet() or self._history.unanswered_calls():
            return []
        self._user.commit_silence(input_ms, td.idle_timeout_ms)
        self._start_response(ResponseOptions(instructions=self._host.settings.instructions + IDLE_PROMPT))
        return self._sink.take()

    def settings_changed(self) -> list[Effect]:
        """The session's settings changed: an ``idle_timeout_ms`` set while the conversation is
        quiet (no response, no user speech) starts counting at once, from the end of the last
        reply's audio (or from now); one turned off is disarmed."""
        self._idle.changed(quiet=self._quiet())
        return self._sink.take()

    # ------------------------------------------------------------------ internals

    def _quiet(self) -> bool:
        """No user speech (being judged or not) and no response under way."""
        return self.active_response_id is None and not self._user.speaking and not self.floor.judging()

    def _speaks(self, reply: Reply) -> bool:
        return reply.options.audio if reply.options.audio is not None else self._host.settings.audio

    def _release(self, reply: Reply) -> None:
        self._replies.release(reply, audio=self._speaks(reply))

    def _interrupt(self, reason: str) -> None:
        """A barge-in or a cancel: the generation moves on, the reply playing is cut to what was
        heard and, unless it was done, ends ``cancelled`` for ``reason``."""
        reply = self._replies.playing
        self._move_on()
        self._replies.playing = None
        if reply is None or reply.item is None:
            return
        self._replies.cut(reply)
        if not reply.done:
            self._finish(reply, ResponseStatus.CANCELLED, reason)

    def _finish(self, reply: Reply, status: ResponseStatus, reason: str | None) -> None:
        """Close ``reply`` (exactly once): its MCP calls still running are cancelled first, then
        ``response.done``, the report; then the idle count, the cache, and the answer after a
        tool it ran or a timer that went off meanwhile."""
        self._replies.close(reply, status, reason)
        if not reply.options.out_of_band:  # one out of band leaves the count to the last reply heard
            self._idle.reply_heard(reply.listener.end_t or 0.0, completed=status is ResponseStatus.COMPLETED)
        if self._quiet():  # any end of a reply restarts the count, unless the user speaks or another answers
            self._idle.arm()
        if status is ResponseStatus.COMPLETED and not reply.options.out_of_band:
            self._sink.add(Completed(reply.gen))
        if reply.answer_after and status is ResponseStatus.COMPLETED and self.active_response_id is None:
            # A built-in or MCP tool has answered: say what it found.
            self._try_start(self._calls.sequel(reply), f"no answer after the tools of {reply.id}")
        self._announce_timers()

    def _try_start(self, options: ResponseOptions, failure: str) -> None:
        """Start a response of the server's own (after tools, for a timer); one the session can
        no longer give (it became a transcription one, an item it read is gone) is logged."""
        try:
            self._start_response(options)
        except ProtocolError as exc:
            log.warning("session %s: %s: %s (%s)", self._id, failure, exc, exc.code)
