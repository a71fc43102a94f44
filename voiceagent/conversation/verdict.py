"""What speech over the agent's audio is, judged by its words and level (sans I/O): the verdict
that :mod:`~voiceagent.conversation.interruption` acts on, and the server's settings for it."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from voiceagent.config import TurnConfig
from voiceagent.text.backchannel import asks, floor_words, phrases_for, real_words, takes_floor

__all__ = ["READ_AGAIN_JOINED_MAX_WORDS", "READ_AGAIN_MAX_WORDS", "InterruptionPolicy", "Verdict"]

READ_AGAIN_MAX_WORDS = 4
"""Speech over the agent with more real words than this is never read again as sounds.  Whisper
writes a sound as one to four words ("Guarded.", "On course.", "and mamam", "HMP8", a hummed
"Mm-hmm, sure." as "and then them" at +0.85), while the real requests of three to five words
that could be read (no floor word, no question word) read 7 nats or more worse in backchannels
("Make it funny" -7.1, offline; docs/decisions/interruptions.md)."""
READ_AGAIN_JOINED_MAX_WORDS = 2
"""The same bound for speech judged joined with dismissed speech before it: a reading of a
backchannel joined with a request can spell the backchannel and stop, and pay little for the
rest (a dismissed "Yeah, yeah, right." joined with "What is the capital of France?", heard
"... What in the capital and friends?", read as sounds at -0.14)."""


class Verdict(enum.Enum):
    """What a transcript of speech over the agent is."""

    INTERRUPT = "interrupt"
    """Real words: the user takes the turn."""
    BACKCHANNEL = "backchannel"
    """Only backchannels and fillers."""
    NOTHING = "nothing"
    """No words at all (a cough, a noise)."""
    BACKGROUND = "background"
    """A voice quieter than the user's by more than the margin (someone else, a radio)."""
    DOUBTED = "doubted"
    """Words the transcriber is not sure of: a sound it wrote as words ("BAM", or a growl as a
    whole sentence, "You are not a man." at 0.07)."""
    SOUNDS = "sounds"
    """Words that a second reading of the clip in backchannels and sounds only explains nearly
    as well (within ``interruption_sound_margin``): "Mm-hmm, sure." heard as "and mamam"."""
    SOUND = "a sound"
    """Words in which the sound-event model hears no speech (below ``interruption_min_speech``):
    a tongue click Whisper wrote as "Just..."."""


@dataclass(frozen=True)
class InterruptionPolicy:
    """The server's interruption settings (``[turn]``), fixed for the session."""

    mode: str = "words"
    min_words: int = 1
    timeout_ms: int = 1000
    margin_db: float = 10.0
    backchannels: str = ""
    min_confidence: float = 0.0
    sound_margin: float = -1.0
    """Negative: no second reading."""
    min_speech: float = 0.0
    """0: the sound model never dismisses."""

    @classmethod
    def from_config(cls, turn: TurnConfig) -> InterruptionPolicy:
        return cls(
            mode=turn.interruption,
            min_words=turn.interruption_min_words,
            timeout_ms=turn.false_interruption_timeout_ms,
            margin_db=turn.interruption_margin_db,
            backchannels=turn.backchannels,
            min_confidence=turn.interruption_min_confidence,
            sound_margin=turn.interruption_sound_margin,
            min_speech=turn.interruption_min_speech if turn.sound_model != "none" else 0.0,
        )

    @property
    def judges(self) -> bool:
        """Whether speech over the agent pauses it and is judged (else it cuts at once)."""
        return self.mode == "words"

    def verdict(
        self,
        text: str,
        level_db: float | None,
        user_db: float | None,
        language: str,
        confidence: float | None = None,
        sound_margin: float | None = None,
        speech: float | None = None,
    ) -> Verdict:
        """What ``text`` (heard at ``level_db``, transcribed with ``confidence``, read in
        backchannels and sounds ``sound_margin`` nats less likely, heard by the sound model as
        speech with probability ``speech``; None: not known) is, from a user whose voice is at
        ``user_db`` (None: not known yet, every level counts)."""
        if self.margin_db > 0 and level_db is not None and user_db is not None and level_db < user_db - self.margin_db:
            return Verdict.BACKGROUND
        words = real_words(text, phrases_for(language, self.backchannels), floor_words(language))
        if len(words) >= self.min_words:
            if takes_floor(words, language):
                return Verdict.INTERRUPT
            if confidence is not None and confidence < self.min_confidence:
                return Verdict.DOUBTED
            if sound_margin is not None and self.sound_margin >= 0 and sound_margin >= -self.sound_margin:
                return Verdict.SOUNDS
            if speech is not None and speech < self.min_speech and not asks(words, language):
                return Verdict.SOUND
            return Verdict.INTERRUPT
        return Verdict.BACKCHANNEL if text.strip(" .,!?") else Verdict.NOTHING

    def reads_again(
        self,
        text: str,
        level_db: float | None,
        user_db: float | None,
        language: str,
        confidence: float | None,
        joined: bool = False,
    ) -> bool:
        """Whether ``text`` would interrupt only for want of a second reading in backchannels and
        sounds (at most :data:`READ_AGAIN_MAX_WORDS` real words, :data:`READ_AGAIN_JOINED_MAX_WORDS`
        when ``joined`` with dismissed speech before it, none taking the floor nor asking a
        question: "Okay, but why?" read as sounds within the margin was a real question lost):
        the reading is then worth its decode (100-250 ms of Whisper tiny on two cores)."""
        if self.sound_margin < 0 or self.verdict(text, level_db, user_db, language, confidence) is not Verdict.INTERRUPT:
            return False
        words = real_words(text, phrases_for(language, self.backchannels), floor_words(language))
        most = READ_AGAIN_JOINED_MAX_WORDS if joined else READ_AGAIN_MAX_WORDS
        return len(words) <= most and not takes_floor(words, language) and not asks(words, language)

    def hears_again(
        self, text: str, level_db: float | None, user_db: float | None, language: str, confidence: float | None, sound_margin: float | None
    ) -> bool:
        """Whether ``text`` would interrupt, with no word that takes the floor or asks, so that
        the sound model's reading of its audio could still dismiss it (10-30 ms on one thread for
        a clip of one to three seconds; never asked of an ordinary turn)."""
        if self.min_speech <= 0 or self.verdict(text, level_db, user_db, language, confidence, sound_margin) is not Verdict.INTERRUPT:
            return False
        words = real_words(text, phrases_for(language, self.backchannels), floor_words(language))
        return not takes_floor(words, language) and not asks(words, language)
