"""Answering-machine detection for the calls the server places: a person or a machine answered?

A person picks up and says a word or two ("Hello?", "Hi, it's Ann."), then waits for the
caller.  A machine plays a greeting: longer than that, with words a person does not say when
answering ("you've reached", "leave a message", "after the tone"), and often a beep before it
records.  :class:`MachineDetector` reads those three things from the call's audio and the
session's transcripts, and so costs no extra model:

- the **greeting's length**, from the call's audio as it comes: 20 ms frames louder than the
  line's noise floor (by 10 dB, and above -40 dBFS) are voice.  Not the session's turns: those
  end only once the endpointer has decided (0.5-1.5 s after the voice stops), and a short
  "Hello, who's calling?" would grow past the limit while it waits;
- the greeting's **words**, from the session's transcripts of it;
- a **beep**: a pure tone (one frequency holding nearly all of a frame's energy, 300-3,000 Hz)
  for at least ``beep_ms``, which speech never is, even a hum (its harmonics spread the
  energy); tone frames are not voice;
- **silence**: nobody says anything within ``initial_silence_ms`` (``unknown``).

The rules, in order (the first that holds decides; each verdict says which in ``reasons``):

1. a beep: ``machine``;
2. words of a recorded greeting in any transcript: ``machine``;
3. a greeting longer than ``greeting_max_ms`` (from its first voice to its last, pauses under
   ``after_greeting_ms`` inside it), or of more than ``words_max`` words: ``machine``;
4. a greeting within both followed by ``after_greeting_ms`` of silence, once its words are
   known (or ``words_wait_ms`` later without them): ``human``;
5. no speech at all for ``initial_silence_ms``, or no verdict by ``total_ms``: ``unknown``.

Sans-I/O: the call's audio is the clock (``audio`` advances it by the samples fed; a phone line
sends silence as audio too).  A verdict is given once (the call that decided returns it; :attr:`verdict` keeps it), with one
exception: a ``human`` verdict becomes ``machine`` when a beep or a machine's words come within
``revise_ms`` of it (a greeting that paused after "Hello." or after a short first sentence);
that call returns the new verdict.
After a ``machine`` verdict, :meth:`message_due` says when a message may be left: once the beep
has ended, or the greeting has been followed by ``message_silence_ms`` of silence.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from voiceagent.audio import Int16Array

__all__ = ["MACHINE_WORDS", "Answered", "MachineDetector", "MachineRules", "ToneDetector"]

MACHINE_WORDS = re.compile(
    r"\b(?:voice ?mail|mail ?box|leave (?:a |your |me a )?(?:message|name|number)|after the (?:tone|beep)|at the (?:tone|beep)"
    r"|you(?:'ve| have) reached|is not available|isn't available|are not available|aren't available|unavailable"
    r"|can(?:'t|not) (?:take|come to|answer)|record your|get back to you|call you back|not here right now)\b",
    re.IGNORECASE,
)
"""Words of a recorded greeting that a person answering a call does not say."""


@dataclass(frozen=True)
class MachineRules:
    """The thresholds of the rules (module docstring); times in ms of the call's audio."""

    greeting_max_ms: float = 2000.0
    """A person's first words are shorter: "Hello?" is about 0.5 s, "Hi, this is Ann Smith." 1.5 s."""
    words_max: int = 5
    after_greeting_ms: float = 800.0
    """Silence after a short greeting that makes it a person's (who now waits for the caller)."""
    words_wait_ms: float = 1500.0
    """How much longer a person's verdict waits for the words of their greeting."""
    initial_silence_ms: float = 5000.0
    total_ms: float = 8000.0
    beep_ms: float = 200.0
    message_silence_ms: float = 2000.0
    """After a machine's greeting with no beep: the silence that says it is recording."""
    message_wait_ms: float = 30000.0
    """After a ``machine`` verdict, the message is due by then whatever plays (music on a loop)."""
    revise_ms: float = 4000.0
    """How long after a ``human`` verdict a beep or a machine's words still make it ``machine``."""


@dataclass(frozen=True)
class Answered:
    """A verdict: ``by`` ``human``, ``machine`` or ``unknown``, ``at_ms`` of the call's audio."""

    by: str
    at_ms: float
    reasons: tuple[str, ...]


class ToneDetector:
    """A beep in 16-bit audio at ``rate``, fed 20 ms frames (:meth:`frame`): :attr:`found_ms`
    once one of at least ``min_ms`` has been heard, :attr:`ended_ms` once it stopped (the audio
    time after its last tone frame)."""

    FRAME_MS = 20.0

    def __init__(self, rate: int, min_ms: float) -> None:
        self.rate = rate
        self.frame_len = int(rate * self.FRAME_MS / 1000.0)
        self._window = np.hanning(2 * self.frame_len).astype(np.float32)
        self._need = max(1, round(min_ms / self.FRAME_MS))
        self._last = np.zeros(self.frame_len, dtype=np.float32)  # the previous frame, for a 40 ms window
        self._run = 0  # consecutive tone frames at about one frequency
        self._freq = 0.0
        self._ms = 0.0  # audio time at the end of the last frame
        self.tonal = False
        """Whether the last frame was a tone."""
        self.found_hz = 0.0
        """The beep's frequency, once one was found."""
        self.found_ms: float | None = None
        """When the beep found began."""
        self.ended_ms: float | None = None

    def feed(self, pcm: Int16Array) -> bool:
        """Whole 20 ms frames of ``pcm`` (a remainder is dropped): True when a beep was found."""
        samples = pcm.astype(np.float32) / 32768.0
        found = False
        for i in range(len(samples) // self.frame_len):
            found |= self.frame(samples[i * self.frame_len : (i + 1) * self.frame_len])
        return found

    def frame(self, frame: np.ndarray[Any, np.dtype[np.float32]]) -> bool:
        """The next 20 ms (float, full scale 1.0): True at the frame that completes a beep."""
        both = np.concatenate([self._last, frame])
        self._last = frame
        self._ms += self.FRAME_MS
        hz = self._tone_hz(both)
        self.tonal = hz is not None
        if hz is not None and self._run > 0 and abs(hz - self._freq) <= 60.0:
            self._run += 1
        else:
            if self.found_ms is not None and self.ended_ms is None:
                self.ended_ms = self._ms - self.FRAME_MS  # the beep's last frame ended one frame ago
            self._run = 1 if hz is not None else 0
            self._freq = hz or 0.0
        if self._run == self._need and self.found_ms is None:
            self.found_ms = self._ms - self._run * self.FRAME_MS
            self.found_hz = self._freq
            return True
        return False

    def _tone_hz(self, samples: np.ndarray[Any, np.dtype[np.float32]]) -> float | None:
        """The frequency of a pure tone filling this window, or None."""
        if float(np.sqrt(np.mean(samples**2))) < 10 ** (-45 / 20):  # quieter than -45 dBFS: no beep
            return None
        power = np.abs(np.fft.rfft(samples * self._window)) ** 2
        peak = int(np.argmax(power))
        hz = peak * self.rate / len(samples)
        if not 300.0 <= hz <= 3000.0:
            return None
        near = float(power[max(0, peak - 2) : peak + 3].sum())
        return hz if near >= 0.85 * float(power.sum()) else None


class MachineDetector:
    """Who answered a placed call (rules and clock: module docstring).  Not thread-safe: one
    call's transport feeds it from its event loop."""

    VOICE_DB = -40.0
    """The quietest frame that may be voice (dBFS)."""
    ABOVE_NOISE_DB = 10.0

    def __init__(self, rules: MachineRules | None = None, rate: int = 16000) -> None:
        self.rules = rules or MachineRules()
        self.rate = rate
        self.now_ms = 0.0
        self.verdict: Answered | None = None
        self._tone = ToneDetector(rate, self.rules.beep_ms)
        self._tail = np.zeros(0, dtype=np.float32)  # samples not yet a whole frame
        # The line's noise floor: from a quiet line's, falling at once to a quieter frame and
        # rising 5 dB a second through frames that are not voice.
        self._noise_db = -60.0
        self._run = 0  # consecutive voiced frames
        self._first: float | None = None  # the greeting's first voice
        self._last: float | None = None  # its last voice's end
        self._words: list[str] = []
        self._transcripts = 0
        self._reasons: list[str] = []

    # ------------------------------------------------------------------ inputs

    def audio(self, pcm: Int16Array) -> Answered | None:
        """The call's next audio (16-bit at ``rate``): the clock, the voice and any beep."""
        samples = np.concatenate([self._tail, pcm.astype(np.float32) / 32768.0])
        n = self._tone.frame_len
        whole = len(samples) // n
        for i in range(whole):
            self._frame(samples[i * n : (i + 1) * n])
        self._tail = samples[whole * n :]
        return self._judge()

    def transcript(self, text: str) -> Answered | None:
        """The session's transcript of one of the callee's turns."""
        self._words += re.findall(r"[\w']+", text)
        self._transcripts += 1
        if (m := MACHINE_WORDS.search(text)) is not None:
            self._reasons.append(f"the words {m.group(0)!r}")
        return self._judge()

    def _frame(self, frame: np.ndarray[Any, np.dtype[np.float32]]) -> None:
        start = self.now_ms
        self.now_ms += ToneDetector.FRAME_MS
        if self._tone.frame(frame):
            self._reasons.append(f"a beep ({self._tone.found_hz:.0f} Hz) at {self._tone.found_ms or 0.0:.0f} ms")
        level = 20.0 * float(np.log10(float(np.sqrt(np.mean(frame**2))) + 1e-9))
        noise = self._noise_db
        voiced = not self._tone.tonal and level > max(self.VOICE_DB, noise + self.ABOVE_NOISE_DB)
        if voiced:
            self._run += 1
            if self._run >= 2:  # 40 ms: a click is not a voice
                if self._first is None:
                    self._first = start - ToneDetector.FRAME_MS
                self._last = self.now_ms
        else:
            self._run = 0
            self._noise_db = level if level < noise else min(level, noise + 0.1)

    # ------------------------------------------------------------------ outputs

    @property
    def voice_heard(self) -> bool:
        """Whether any voice has been heard on the call (its words may not be transcribed yet)."""
        return self._first is not None

    @property
    def beep_ended_ms(self) -> float | None:
        """When the beep ended (None: no beep, or it still sounds)."""
        return self._tone.ended_ms

    def message_due(self) -> bool:
        """After a ``machine`` verdict: the machine records now (its beep ended, or its greeting
        was followed by ``message_silence_ms`` of silence), or ``message_wait_ms`` have passed."""
        if self.verdict is None or self.verdict.by != "machine":
            return False
        if self._tone.ended_ms is not None or self.now_ms - self.verdict.at_ms >= self.rules.message_wait_ms:
            return True
        if self._tone.found_ms is not None:
            return False  # the beep still sounds
        return self._last is not None and self.now_ms - self._last >= self.rules.message_silence_ms

    # ------------------------------------------------------------------ the rules

    def _judge(self) -> Answered | None:
        if self.verdict is not None:
            return self._revise()
        by = self._decide()
        if by is None:
            return None
        self.verdict = Answered(by, round(self.now_ms, 1), tuple(self._reasons))
        return self.verdict

    def _revise(self) -> Answered | None:
        """A ``human`` verdict turned ``machine`` by a beep or a machine's words within
        ``revise_ms`` of it: a greeting that paused after its first words."""
        verdict = self.verdict
        if verdict is None or verdict.by != "human" or self.now_ms - verdict.at_ms > self.rules.revise_ms:
            return None
        late = [r for r in self._reasons if r not in verdict.reasons and not r.startswith("a short greeting")]
        if not late:
            return None
        self.verdict = Answered("machine", round(self.now_ms, 1), (*late, f"after a person's verdict at {verdict.at_ms:.0f} ms"))
        return self.verdict

    def listening(self) -> bool:
        """Whether the call's audio and words may still change the verdict (none yet, or a
        person's within ``revise_ms``)."""
        v = self.verdict
        return v is None or (v.by == "human" and self.now_ms - v.at_ms <= self.rules.revise_ms)

    def _decide(self) -> str | None:
        r = self.rules
        if self._reasons:  # a beep, or a machine's words
            return "machine"
        if self._first is not None and self._last is not None:
            length = self._last - self._first
            if length > r.greeting_max_ms:
                self._reasons.append(f"a greeting longer than {r.greeting_max_ms / 1000:g} s")
                return "machine"
            if len(self._words) > r.words_max:
                self._reasons.append(f"a greeting of {len(self._words)} words")
                return "machine"
            quiet = self.now_ms - self._last
            if quiet >= r.after_greeting_ms and (self._transcripts or quiet >= r.after_greeting_ms + r.words_wait_ms):
                said = repr(" ".join(self._words)) if self._transcripts else "its words not heard in time"
                self._reasons.append(f"a short greeting ({length / 1000:.1f} s, {said}), then silence")
                return "human"
        elif self.now_ms >= r.initial_silence_ms:
            self._reasons.append(f"nothing said for {r.initial_silence_ms / 1000:g} s")
            return "unknown"
        if self.now_ms >= r.total_ms:
            self._reasons.append(f"no verdict after {r.total_ms / 1000:g} s")
            return "unknown"
        return None
