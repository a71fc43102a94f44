"""Speech over the agent's audio, judged by its words before it cuts the reply (sans I/O).

With ``turn.interruption = "words"`` (the default), voice that starts while a reply is audible
does not cut the reply at once.  :class:`Interruptions` pauses the reply's audio
(:class:`~voiceagent.conversation.effects.PausePlayout`) and keeps the speech to itself: the
client is told nothing of it yet.  Then the words decide (:meth:`~voiceagent.conversation.verdict.InterruptionPolicy.verdict`):

* a transcript with ``interruption_min_words`` words that are not backchannels: an
  **interruption**.  The core tells the client of the speech, with its real start, and cuts the
  reply as a barge-in does (the history keeps what was heard).  The segment's final transcript
  decides; a partial does only once the user has spoken for :data:`PARTIAL_AFTER_S` (the first
  partials of short speech are Whisper's guesses at a fragment: "Got it" heard as "Garden", a
  sneeze as "2.").  The agent is paused meanwhile, so waiting for the words costs the listener
  nothing;
* a final transcript of backchannels only ("yeah, right"), of nothing (a cough, a door), of
  words the transcriber doubts (under ``interruption_min_confidence``: a hum written "BAM", an
  "ooh" "OO", a growl written as a sentence; never a word that takes the floor, such as "stop", "wait" or "hey":
  :data:`~voiceagent.text.backchannel.FLOOR_WORDS`), of words that a second reading in
  backchannels and sounds only explains within ``interruption_sound_margin`` (the turn stage asks
  for that reading when :meth:`InterruptionPolicy.reads_again`; "Mm-hmm, sure." heard as "and
  mamam"; never floor words either, nor a question word: "Okay, but why?"), of words in whose
  audio the sound-event model hears speech less likely than ``interruption_min_speech`` (the turn
  stage asks for that reading when :meth:`InterruptionPolicy.hears_again`; a tongue click written
  "Just..."; the same exceptions), or of speech
  ``interruption_margin_db`` quieter than the user's own voice (a second voice in the room):
  the reply **resumes** where it paused, once the user has been silent for
  :data:`RESUME_SILENCE_S` after their speech ended (a "Yeah, ... but" goes on after the comma),
  and stays whole.  The speech leaves no trace in the conversation: no item, no event;
* nothing decided ``false_interruption_timeout_ms`` after the speech stopped: the reply resumes.

Every stretch of speech over the pause is judged, however late its words come.  A dismissed
segment resumes the reply only when no later speech over the pause still waits for its
transcript (:meth:`Pending.awaits_words`); if the timeout resumed the reply first (a busy
transcriber), that speech is judged when its words come all the same, and an interruption then
cuts the reply that went on.  Otherwise "Yeah, yeah. Right." over a slow machine made "Right." a
turn of its own that ended the reply without clearing what the listener still had to play.

A segment that starts within a second of a dismissed one is judged joined with it, transcribed
again as one clip (the turn stage does it: :mod:`~voiceagent.stages.dismissed`): a short
interruption cut at its comma ("Hey, wait.") is heard whole, not as two doubted words.

The user's voice level is learnt from the segments that were turns.  A pause is never resumed
while the user speaks: each new stretch of speech is judged again.

``turn.interruption = "immediate"`` and ``interrupt_response: false`` keep their meanings: this
module is not asked then.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field

from voiceagent.conversation.context import CoreContext
from voiceagent.conversation.effects import ArmResume, PausePlayout, ResumePlayout
from voiceagent.conversation.reply import Reply
from voiceagent.conversation.user import UserInput
from voiceagent.conversation.verdict import InterruptionPolicy, Verdict
from voiceagent.errors import excerpt
from voiceagent.events import SoundHeard, SpeechStarted, TranscriptDelta, TranscriptSegment

__all__ = ["PARTIAL_AFTER_S", "RESUME_SILENCE_S", "Interruptions", "Pending"]

log = logging.getLogger(__name__)

_LEVEL_WEIGHT = 0.3  # how much each new turn moves the user's learnt voice level
PARTIAL_AFTER_S = 1.0
"""Speech that lasts this long is judged by its partial transcripts too (else by the final one)."""
RESUME_SILENCE_S = 0.3
"""Silence after the VAD's end of speech (itself ``vad.stop_ms`` of silence) before a judged
reply resumes: a listener who says "yeah," and goes on ("but what about...") keeps it paused."""


@dataclass
class Pending:
    """Speech over generation ``gen``'s audio, not judged yet."""

    gen: int
    started: SpeechStarted
    """Its first ``speech_started``: told to the client only if it proves an interruption."""
    partials: list[TranscriptDelta] = field(default_factory=list)
    """Partial transcripts held back meanwhile, for the same reason."""
    speaking: bool = True
    token: int | None = None
    """The resume armed since the speech stopped, if any."""
    stopped_t: float = 0.0
    """When the VAD last reported the end of the speech (the session's clock)."""
    latest_ms: float = -math.inf
    """Where the latest speech over the pause began (input-stream time)."""
    judged_to_ms: float = -math.inf
    """Where the last segment judged ended (input-stream time)."""

    def __post_init__(self) -> None:
        self.latest_ms = self.started.audio_ms

    def awaits_words(self) -> bool:
        """Whether speech over the pause began after every segment judged so far ended: its
        transcript is still to come (a segment ends after its speech, a later one begins
        ``vad.stop_ms`` of silence later)."""
        return self.latest_ms > self.judged_to_ms


class Interruptions:
    """The pending interruption of one session, if any; its effects go to the context's sink.
    Speech found to be the user's goes to ``user`` (with its real start and held partials); the
    core cuts the reply when a method says the user takes the turn."""

    def __init__(self, ctx: CoreContext, policy: InterruptionPolicy, user: UserInput) -> None:
        self._ctx = ctx
        self._user = user
        self.policy = policy
        self.pending: Pending | None = None
        self.late: Pending | None = None
        """A pause the timeout resumed while speech over it still awaited its words: judged when
        they come (:meth:`segment`, :meth:`partial`), then forgotten."""
        self.user_db: float | None = None
        """The user's voice level, learnt from their turns (dBFS; None: no turn yet)."""
        self._tokens = 0

    def open(self, ev: SpeechStarted, reply: Reply) -> None:
        """Voice started over ``reply``'s audio: pause it and wait for the words."""
        self.pending, self.late = Pending(reply.gen, ev), None
        self._ctx.sink.add(PausePlayout(reply.gen))
        tl = reply.listener
        heard = tl.heard_ms(self._ctx.clock.now())
        log.info("session %s: speech over the reply: paused, %.0f of %.0f ms sent heard", self._ctx.session, heard, tl.sent_ms)

    def partial(self, ev: TranscriptDelta) -> bool:
        """A partial transcript: the user's when nothing is judged; else held back, and True
        when it decides an interruption (:meth:`_trusts`), which the core then carries out
        (:meth:`hand_over`, then the cut).  Words that a second reading in backchannels and sounds
        could dismiss (:meth:`InterruptionPolicy.reads_again`) wait for the final transcript,
        which gets that reading: the reply is paused meanwhile, so the wait costs no stop time."""
        pending = self.pending or self.late
        if pending is None:
            self._user.transcript(ev)
            return False
        pending.partials.append(ev)
        if (
            self._trusts(ev)
            and self._judge(ev.text, ev.level_db, ev.confidence) is Verdict.INTERRUPT
            and not self.reads_again(ev.text, ev.level_db, ev.confidence)
        ):
            self._log(Verdict.INTERRUPT, ev.text, ev.level_db, ev.confidence)
            return True
        return False

    def reads_again(self, text: str, level_db: float | None, confidence: float | None, joined: bool = False) -> bool:
        """Whether a segment over the paused reply with this transcript (``joined`` with dismissed
        speech before it) is worth a second reading in backchannels and sounds before it is judged
        (:meth:`InterruptionPolicy.reads_again`); False when nothing is judged."""
        if self.pending is None and self.late is None:
            return False
        return self.policy.reads_again(text, level_db, self.user_db, self._ctx.host.settings.language, confidence, joined)

    def judging(self) -> bool:
        """Whether a reply is paused while speech over it is judged (the STT stage asks, to
        transcribe that speech sooner; the turn stage, to rejoin dismissed speech)."""
        return self.pending is not None

    def reads_segment_again(self, seg: TranscriptSegment) -> bool:
        """:meth:`reads_again` of a final segment (the turn stage's ``reads_again`` port)."""
        return self.reads_again(seg.text, seg.level_db, seg.confidence, seg.joined)

    def hears_segment_again(self, seg: TranscriptSegment) -> bool:
        """Whether a final segment over the paused reply is worth the sound model's reading
        (:meth:`InterruptionPolicy.hears_again`, its second reading's margin known); False when
        nothing is judged (the turn stage's ``hears_again`` port)."""
        if self.pending is None and self.late is None:
            return False
        language = self._ctx.host.settings.language
        return self.policy.hears_again(seg.text, seg.level_db, self.user_db, language, seg.confidence, seg.sound_margin)

    def segment(
        self,
        text: str,
        level_db: float | None,
        confidence: float | None = None,
        sound_margin: float | None = None,
        end_ms: float | None = None,
        heard: SoundHeard | None = None,
    ) -> Verdict | None:
        """A speech segment's final transcript (heard at ``level_db``, transcribed with
        ``confidence``, its second reading ``sound_margin``, the sound model's reading ``heard``;
        its audio ends at ``end_ms`` of the
        input stream, None: it is the latest speech's): None when nothing is judged (the user's
        own turn, whose level is learnt); else its verdict.  A verdict other than
        :attr:`Verdict.INTERRUPT` resumes the reply now or arms its resume (:meth:`_dismissed`);
        an interruption is the core's to carry out (:meth:`hand_over`).  The late words of a
        pause the timeout ended (:attr:`late`) are judged too: dismissed, they are dropped and the
        reply plays on."""
        pending, late = self.pending, self.late
        if pending is None and (late is None or (end_ms is not None and end_ms < late.latest_ms)):
            if text.strip():
                self._heard_user(level_db)
            return None
        judged = pending or late
        assert judged is not None
        judged.judged_to_ms = max(judged.judged_to_ms, math.inf if end_ms is None else end_ms)
        verdict = self._judge(text, level_db, confidence, sound_margin, heard)
        self._log(verdict, text, level_db, confidence, sound_margin, heard, late=pending is None)
        if verdict is Verdict.INTERRUPT:
            self._heard_user(level_db)
        elif pending is None:
            self.late = None  # the late words were no interruption: the reply plays on
        elif self._dismissed():
            self.close(resumed=True)
        return verdict

    def _log(
        self,
        verdict: Verdict,
        text: str,
        level_db: float | None,
        confidence: float | None,
        sound_margin: float | None = None,
        heard: SoundHeard | None = None,
        *,
        late: bool = False,
    ) -> None:
        level = "?" if level_db is None else f"{level_db:.1f}"
        sure = "?" if confidence is None else f"{confidence:.2f}"
        read = "" if sound_margin is None else f", as sounds {sound_margin:+.2f}"
        if heard is not None:
            read += f", speech {heard.speech:.2f} (else {heard.sound} {heard.sound_p:.2f})"
        log.info(
            "session %s: speech over the reply%s is %s: %s at %s dBFS, confidence %s%s",
            self._ctx.session,
            " (its words after the resume)" if late else "",
            verdict.value,
            excerpt(text),
            level,
            sure,
            read,
        )

    def hand_over(self) -> int:
        """The speech being judged is the user's after all (an interruption, or its reply was
        superseded): the pause ends without a resume, the client hears of the speech now (its
        start, its partials), and the paused generation is returned.  For :attr:`late` words the
        pause had already ended: only the client is told."""
        if self.pending is not None:
            pending = self.close(resumed=False)
        else:
            assert self.late is not None
            pending, self.late = self.late, None
        self._user.speech_started(pending.started)
        for partial in pending.partials:
            self._user.transcript(partial)
        return pending.gen

    def resume_due(self, token: int) -> None:
        """Resume timeout ``token`` is due: the paused reply goes on if nothing decided since."""
        if self._due(token):
            log.info("session %s: the paused reply resumes (no interruption, or no words within the timeout)", self._ctx.session)
            pending = self.close(resumed=True)
            if pending.awaits_words():
                self.late = pending

    def forget_late(self) -> None:
        """The generation moved on: speech whose words are late is the user's as any other."""
        self.late = None

    def speech_started(self, ev: SpeechStarted) -> None:
        """The user speaks again while the pause lasts: no resume while they do."""
        assert self.pending is not None
        self.pending.speaking, self.pending.token, self.pending.latest_ms = True, None, ev.audio_ms

    def speech_stopped(self) -> None:
        """The user fell silent: resume after the timeout unless a transcript decides first."""
        assert self.pending is not None
        now = self._ctx.clock.now()
        self.pending.speaking, self.pending.stopped_t = False, now
        self._arm(now + self.policy.timeout_ms / 1000.0)

    def _dismissed(self) -> bool:
        """A transcript found no interruption: True when the reply resumes now (the user has been
        silent :data:`RESUME_SILENCE_S` since their speech ended); otherwise a resume is armed
        for then, or (the user speaks) waits for the end of their speech."""
        pending = self.pending
        assert pending is not None
        if pending.speaking or pending.awaits_words():
            return False  # more speech to judge: the resume armed when it stopped stands meanwhile
        due = pending.stopped_t + RESUME_SILENCE_S
        if self._ctx.clock.now() >= due:
            return True
        self._arm(due)
        return False

    def _arm(self, deadline: float) -> None:
        assert self.pending is not None
        self._tokens += 1
        self.pending.token = self._tokens
        self._ctx.sink.add(ArmResume(self._tokens, deadline))

    def _trusts(self, partial: TranscriptDelta) -> bool:
        """Whether ``partial`` may decide: it transcribes :data:`PARTIAL_AFTER_S` of the speech
        or more (by the input stream's time)."""
        if self.pending is not None:
            began = self.pending.started.audio_ms
        elif self.late is not None:
            began = self.late.latest_ms  # the speech whose words are late
        else:
            return False
        return partial.audio_ms - began >= PARTIAL_AFTER_S * 1000.0

    def _judge(
        self,
        text: str,
        level_db: float | None,
        confidence: float | None,
        sound_margin: float | None = None,
        heard: SoundHeard | None = None,
    ) -> Verdict:
        speech = None if heard is None else heard.speech
        return self.policy.verdict(text, level_db, self.user_db, self._ctx.host.settings.language, confidence, sound_margin, speech)

    def _due(self, token: int) -> bool:
        """Resume timeout ``token`` is due: True when it still stands (the user is silent)."""
        pending = self.pending
        return pending is not None and pending.token == token and not pending.speaking

    def close(self, *, resumed: bool) -> Pending:
        """The pause ends: the reply goes on (``resumed``) or was cut; playout is told."""
        pending = self.pending
        assert pending is not None
        self.pending = None
        self._ctx.sink.add(ResumePlayout(pending.gen, resumed))
        return pending

    def _heard_user(self, level_db: float | None) -> None:
        """A segment of the user's that is a turn, at ``level_db``: learn their voice's level."""
        if level_db is None:
            return
        self.user_db = level_db if self.user_db is None else (1 - _LEVEL_WEIGHT) * self.user_db + _LEVEL_WEIGHT * level_db
