"""The user's side of the conversation as the core keeps it (sans I/O): the item being spoken,
its transcript, and its commit into the history.

A user item starts with the user's speech (``input_audio_buffer.speech_started``), gathers
partial transcripts, and is committed when the turn stage confirms the turn, or as silence when
the idle timeout triggers.  The core decides what follows (a barge-in, an answer)."""

from __future__ import annotations

from voiceagent.conversation.context import CoreContext
from voiceagent.conversation.effects import Prefill, TurnEnded
from voiceagent.conversation.history import new_id
from voiceagent.events import (
    InputCommitted,
    InputSpeechStarted,
    InputSpeechStopped,
    InputTimeoutTriggered,
    InputTranscriptDelta,
    InputTranscriptDone,
    SpeechStarted,
    TranscriptDelta,
)

__all__ = ["UserInput"]


class UserInput:
    """The user items of one session; their events go to ``sink``, ``trim`` keeps the history
    within its limit after each commit."""

    def __init__(self, ctx: CoreContext) -> None:
        self._ctx = ctx
        self._item: str | None = None  # the item being spoken
        self._start_ms: float | None = None  # where its speech began (input-stream ms)
        self._end_ms = 0.0  # where the last committed turn's audio ended

    @property
    def speaking(self) -> bool:
        """Whether a user item is open (speech started, its turn not yet committed)."""
        return self._item is not None

    def speech_started(self, ev: SpeechStarted) -> None:
        """Speech began: a new item, unless one is open (speech that resumed within the turn)."""
        if self._item is None:
            self._item, self._start_ms = new_id("item"), ev.audio_ms
            self._ctx.sink.emit(
                InputSpeechStarted(t=self._ctx.clock.now(), gen=ev.gen, session=self._ctx.session, item_id=self._item, audio_ms=ev.audio_ms)
            )

    def transcript(self, ev: TranscriptDelta) -> None:
        """A partial transcript: to the client, and to the LLM stage as a prefill in a realtime
        session that detects turns (a transcription session has no answer to prefill)."""
        if self._item is not None:
            self._ctx.sink.emit(
                InputTranscriptDelta(t=self._ctx.clock.now(), gen=ev.gen, session=self._ctx.session, item_id=self._item, text=ev.text)
            )
        settings = self._ctx.host.settings
        if settings.turn_detection is not None and settings.kind == "realtime":
            self._ctx.sink.add(Prefill(ev.text))

    def commit(self, ended: TurnEnded) -> None:
        """The turn is over: its item goes into the history (answered by the turn's generation
        when it responds), and the client is told."""
        ev, now = ended.turn, self._ctx.clock.now()
        item_id = self._item or new_id("item")
        # The turn's audio: from its speech start, or (a manual commit, no VAD) from the end of
        # the turn before.
        start_ms = self._start_ms if self._start_ms is not None else self._end_ms
        audio_s = max(0.0, ev.audio_end_ms - start_ms) / 1000.0
        self._end_ms = max(self._end_ms, ev.audio_end_ms)
        self._item, self._start_ms = None, None
        prev = self._ctx.history.last_id
        if self._ctx.host.settings.turn_detection is not None:
            self._ctx.sink.emit(InputSpeechStopped(t=now, gen=ev.gen, session=self._ctx.session, item_id=item_id, audio_ms=ev.audio_end_ms))
        self._ctx.history.add_user(ev.text, ev.gen if ev.respond else -1, item_id)
        self._ctx.sink.emit(InputCommitted(t=now, gen=ev.gen, session=self._ctx.session, item_id=item_id, previous_item_id=prev))
        self._ctx.sink.emit(
            InputTranscriptDone(t=now, gen=ev.gen, session=self._ctx.session, item_id=item_id, text=ev.text, audio_s=audio_s)
        )
        self._ctx.trim()

    def commit_silence(self, input_ms: float, idle_ms: int) -> None:
        """The idle timeout triggered after ``idle_ms`` of silence (``input_ms``: the user audio
        received so far): the silence is an empty user item."""
        now, gen = self._ctx.clock.now(), self._ctx.scope.current
        item_id, prev = new_id("item"), self._ctx.history.last_id
        start_ms = max(0.0, input_ms - idle_ms)
        self._ctx.sink.emit(
            InputTimeoutTriggered(
                t=now, gen=gen, session=self._ctx.session, item_id=item_id, audio_start_ms=start_ms, audio_end_ms=input_ms
            )
        )
        self._ctx.history.add_user("", -1, item_id)
        self._ctx.sink.emit(InputCommitted(t=now, gen=gen, session=self._ctx.session, item_id=item_id, previous_item_id=prev))
        self._ctx.trim()

    def forget(self) -> str | None:
        """The STT failed on the user's speech: the id of the item it was for (None when no
        speech was under way), which is forgotten, so the next speech starts a new item."""
        item_id = self._item
        self._item, self._start_ms = None, None
        return item_id
