"""The replies of one conversation, kept by generation, from their start to their ``response.done``.

Sans I/O, like the core that owns it: each step changes the replies' state and adds its events
and effects to the core's :class:`~voiceagent.conversation.effects.Sink`.  Which step happens when
(a barge-in, a new turn, an answer after tools) is the core's decision."""

from __future__ import annotations

from voiceagent.conversation.calls import ToolCalls
from voiceagent.conversation.context import CoreContext
from voiceagent.conversation.effects import CountBargeIn, FirstAudio, Release, Report, TurnEnded
from voiceagent.conversation.history import AssistantItem
from voiceagent.conversation.reply import Reply, ReplyState, ResponseOptions
from voiceagent.errors import ProtocolError, excerpt
from voiceagent.events import (
    AudioDelta,
    GenerationEnd,
    LlmRoute,
    LlmUsage,
    Mark,
    OutputTranscriptDelta,
    PlaybackCleared,
    ResponseStatus,
    ToolCallMade,
    ToolCallRejected,
)

__all__ = ["Replies"]


class Replies:
    """Every live :class:`Reply` of one session and the one the client sees now (``playing``)."""

    def __init__(self, ctx: CoreContext, calls: ToolCalls) -> None:
        self._ctx = ctx
        self._calls = calls
        self._by_gen: dict[int, Reply] = {}
        self.playing: Reply | None = None
        """The reply released last: generated, spoken or still heard (None after a barge-in)."""
        self.spoke = False
        """True once any reply's audio went to the client (the voice is fixed from then on)."""

    @property
    def active(self) -> Reply | None:
        """The response being generated or spoken, if any."""
        return self.playing if self.playing is not None and not self.playing.done else None

    def get(self, gen: int) -> Reply | None:
        return self._by_gen.get(gen)

    def of(self, gen: int) -> Reply:
        """Generation ``gen``'s reply, made when first asked for."""
        reply = self._by_gen.get(gen)
        if reply is None:
            reply = self._by_gen[gen] = Reply(gen)
        return reply

    def live(self) -> dict[int, Reply]:
        return dict(self._by_gen)

    def drop_unreleased(self, below: int) -> None:
        """Replies of generations below ``below`` that were never released (superseded or
        withdrawn speculations, which nobody will see) are dropped."""
        for old in [g for g, r in self._by_gen.items() if g < below and not r.released]:
            del self._by_gen[old]

    def check_start(self, options: ResponseOptions) -> None:
        """Raise :class:`ProtocolError` unless a response with ``options`` may start now: not in
        a transcription session (``invalid_state``), not while one is active
        (``conversation_already_has_active_response``), and every ``item_reference`` in its
        ``input`` names an item of the history (``item_not_found``)."""
        if self._ctx.host.settings.kind != "realtime":
            raise ProtocolError("invalid_state", "a transcription session does not create responses (session.type is transcription)")
        if (active := self.active) is not None:
            raise ProtocolError("conversation_already_has_active_response", f"response {active.id} is still in progress; cancel it first")
        for n, entry in enumerate(options.input or ()):
            if entry.ref is not None and self._ctx.history.find(entry.ref) is None:
                raise ProtocolError("item_not_found", f"no item {excerpt(entry.ref)} to reference", param=f"response.input[{n}].id")

    def confirmed(self, ended: TurnEnded) -> Reply:
        """The turn ``ended`` that answers is confirmed: its reply, its timeline marked (the end
        of speech, the turn stage's marks, the confirmation)."""
        ev = ended.turn
        reply = self.of(ev.gen)
        reply.timeline.mark("speech_end", ended.speech_end_t)
        for name, t in ev.marks.items():
            reply.timeline.mark(name, t)
        reply.timeline.mark("turn_confirmed", ev.t)
        return reply

    def generation_ended(self, ev: GenerationEnd) -> Reply | None:
        """Generation ``ev.gen`` sent its last word: its reply, when it is to be closed now.  One
        that completed with MCP calls still running waits for the last of them (``ending``)."""
        reply = self._by_gen.get(ev.gen)
        if reply is None or reply.done:
            return None
        if reply.mcp_running and ev.status is ResponseStatus.COMPLETED:
            reply.state, reply.ended = ReplyState.ENDING, (ev.status, ev.error)
            return None
        return reply

    def note(self, ev: Mark | LlmRoute | LlmUsage | ToolCallMade | ToolCallRejected) -> None:
        """A stage's note about generation ``ev.gen``'s reply: a timeline mark, the engine that
        answers, its usage, a call its model made (:meth:`ToolCalls.on_call`)."""
        reply = self.of(ev.gen)
        if isinstance(ev, ToolCallMade | ToolCallRejected):
            self._calls.on_call(reply, ev)
        elif isinstance(ev, Mark):
            reply.timeline.mark(ev.name, ev.t)
        elif isinstance(ev, LlmRoute):
            reply.llm_route = (ev.engine, ev.reason)
        else:
            reply.usage = ev

    def content(self, ev: OutputTranscriptDelta | AudioDelta) -> None:
        """Words or audio of a live reply on their way to the client (stale ones are dropped
        before: a stopped reply sends not one more word or chunk)."""
        reply = self._by_gen.get(ev.gen)
        if reply is None or reply.item is None:
            return
        if isinstance(ev, OutputTranscriptDelta):
            reply.item.add_clause(ev.text, ev.clause_ms, ack=ev.ack)
            if not ev.ack:  # the answer's content starts (an acknowledgement is not an answer)
                reply.timeline.mark("content_audio_sent", self._ctx.clock.now())
        else:
            reply.item.add_audio(len(ev.pcm) * 1000.0 / ev.rate)
            self.spoke = self.spoke or len(ev.pcm) > 0
            if reply.timeline.mark("first_audio_sent", self._ctx.clock.now()):
                self._ctx.sink.add(FirstAudio(reply.gen, reply.timeline.between_ms("speech_end", "first_audio_sent")))
        self._ctx.sink.emit(ev)

    def release(self, reply: Reply, *, audio: bool) -> None:
        """``reply`` is the turn's answer: into the history (unless out of band), to the client
        (``audio``: it is spoken), audible, and the calls it made before are told."""
        out_of_band = reply.options.out_of_band
        prev_id = None if out_of_band else self._ctx.history.last_id
        reply.state = ReplyState.RELEASED
        if out_of_band:
            reply.item = AssistantItem(id=reply.item_id, gen=reply.gen)  # kept for the reply only
        else:
            reply.item = self._ctx.history.add_assistant(reply.gen, reply.item_id)
            self._ctx.trim()
        self.playing = reply
        now = self._ctx.clock.now()
        self._ctx.sink.emit(reply.created(self._ctx.session, now, prev_id, audio=audio))
        self._ctx.sink.add(Release(reply.release(self._ctx.session, now)))
        held, reply.held = reply.held, []
        for ev in held:
            self._calls.on_call(reply, ev)

    def cut(self, reply: Reply) -> None:
        """A barge-in: if the listener may still hear ``reply``, its item keeps what was heard by
        now and the client is told to clear its playback."""
        now = self._ctx.clock.now()
        if reply.item is None or not reply.audible(now):
            return
        heard = reply.listener.heard_ms(now)
        reply.item.cut(heard)
        self._ctx.sink.add(CountBargeIn())
        self._ctx.sink.emit(
            PlaybackCleared(t=now, gen=reply.gen, session=self._ctx.session, response_id=reply.id, item_id=reply.item_id, heard_ms=heard)
        )

    def stop_playing(self, reply: Reply) -> None:
        """``reply`` was superseded: if it is still the one playing (never cut), it stops and is
        :meth:`cut`, so the listener's buffer does not play on under the next answer."""
        if reply is self.playing:
            self.playing = None
            self.cut(reply)

    def close(self, reply: Reply, status: ResponseStatus, reason: str | None) -> None:
        """End ``reply`` (exactly once): its MCP calls still running are cancelled first, then
        its ``response.done`` and its report; it is no longer kept."""
        reply.state = ReplyState.DONE
        self._calls.cancel(reply)
        if reply.item is not None:
            reply.item.status = "completed" if status is ResponseStatus.COMPLETED else "incomplete"
        now = self._ctx.clock.now()
        self._ctx.sink.emit(reply.done_event(self._ctx.session, now, status, reason, self._calls.summaries(reply)))
        self._by_gen.pop(reply.gen, None)
        self._ctx.sink.add(Report(reply, status, reason, now))
