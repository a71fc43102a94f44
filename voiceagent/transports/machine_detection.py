"""Answering-machine detection for the calls the server places: a person or a machine answered?

A person picks up and says a word or two ("Hello?", "Hi, it's Ann."), then waits for the
caller.  A machine plays a greeting: longer than that, with words a person does not say when
answering ("you've reached", "leave a message", "after the tone"), and often a beep before it
records.  :class:`MachineDetector` reads those three things from what the call already gives
the session, and so costs no extra model:

- the **greeting's length and words**, from the session's own turns (its VAD and endpointing:
  when the callee's speech started and stopped) and their transcripts;
- a **beep**, from the call's audio: a pure tone (one frequency holding nearly all of a
  frame's energy, 300-3,000 Hz) for at least ``beep_ms``, which speech never is, even a hum
  (its harmonics spread the energy);
- **silence**: nobody says anything within ``initial_silence_ms`` (``unknown``).

The rules, in order (the first that holds decides; each verdict says which in ``reasons``):

1. a beep: ``machine``;
2. words of a recorded greeting in any transcript: ``machine``;
3. a greeting longer than ``greeting_max_ms`` (from its first speech to its last, pauses
   under ``after_greeting_ms`` inside it), or more than ``words_max`` words: ``machine``;
4. a greeting within both, transcribed, then ``after_greeting_ms`` of silence: ``human``;
5. no speech at all for ``initial_silence_ms``, or no verdict by ``total_ms``: ``unknown``.

Sans-I/O: the call's audio is the clock (``audio`` advances it by the samples fed; a phone line
sends silence as audio too), and speech times are on the same input timeline as the session's
events.  A verdict is given once (the call that decided returns it; :attr:`verdict` keeps it).
After a ``machine`` verdict, :meth:`message_due` says when a message may be left: once the beep
has ended, or the greeting has been followed by ``message_silence_ms`` of silence.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

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
    words_max: int = 4
    after_greeting_ms: float = 800.0
    """Silence after a short greeting that makes it a person's (who now waits for the caller)."""
    initial_silence_ms: float = 5000.0
    total_ms: float = 8000.0
    beep_ms: float = 200.0
    message_silence_ms: float = 2000.0
    """After a machine's greeting with no beep: the silence that says it is recording."""


@dataclass(frozen=True)
class Answered:
    """A verdict: ``by`` ``human``, ``machine`` or ``unknown``, ``at_ms`` of the call's audio."""

    by: str
    at_ms: float
    reasons: tuple[str, ...]


class ToneDetector:
    """A beep in 16-bit audio at ``rate``: ``feed`` returns True at the frame that completes one
    of at least ``min_ms``; :attr:`ended_ms` is set once a beep so found stops (the audio time
    after its last tone frame)."""

    FRAME_MS = 20.0

    def __init__(self, rate: int, min_ms: float) -> None:
        self.rate = rate
        self._frame = int(rate * self.FRAME_MS / 1000.0)
        self._window = np.hanning(2 * self._frame).astype(np.float32)
        self._need = max(1, round(min_ms / self.FRAME_MS))
        self._tail = np.zeros(0, dtype=np.float32)  # samples not yet a whole frame
        self._last = np.zeros(self._frame, dtype=np.float32)  # the previous frame, for a 40 ms window
        self._run = 0  # consecutive tone frames at about one frequency
        self._freq = 0.0
        self._ms = 0.0  # audio time at the end of the last whole frame
        self.found_hz = 0.0
        """The beep's frequency, once one was found."""
        self.found_ms: float | None = None
        """When the beep found began."""
        self.ended_ms: float | None = None

    def feed(self, pcm: Int16Array) -> bool:
        samples = np.concatenate([self._tail, pcm.astype(np.float32) / 32768.0])
        found = False
        whole = len(samples) // self._frame
        for i in range(whole):
            frame = samples[i * self._frame : (i + 1) * self._frame]
            found |= self._frame_done(frame)
        self._tail = samples[whole * self._frame :]
        return found

    def _frame_done(self, frame: np.ndarray) -> bool:
        both = np.concatenate([self._last, frame])
        self._last = frame
        self._ms += self.FRAME_MS
        hz = self._tone_hz(both)
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

    def _tone_hz(self, samples: np.ndarray) -> float | None:
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

    def __init__(self, rules: MachineRules | None = None, rate: int = 16000) -> None:
        self.rules = rules or MachineRules()
        self.rate = rate
        self.now_ms = 0.0
        self.verdict: Answered | None = None
        self._tone = ToneDetector(rate, self.rules.beep_ms)
        self._start: float | None = None  # the greeting's first speech
        self._stop: float | None = None  # its last speech's end (None while speaking)
        self._speaking = False
        self._words: list[str] = []
        self._transcribed = True  # every turn so far has its transcript
        self._reasons: list[str] = []

    # ------------------------------------------------------------------ inputs

    def audio(self, pcm: Int16Array) -> Answered | None:
        """The call's next audio (16-bit at ``rate``): the clock, and where a beep is heard."""
        self.now_ms += len(pcm) * 1000.0 / self.rate
        if self._tone.feed(pcm):
            self._reasons.append(f"a beep ({self._tone.found_hz:.0f} Hz) at {self._tone.found_ms or 0.0:.0f} ms")
        return self._judge()

    def speech_started(self, at_ms: float) -> Answered | None:
        self._speaking = True
        self._transcribed = False
        if self._start is None:
            self._start = at_ms
        return self._judge()

    def speech_stopped(self, at_ms: float) -> Answered | None:
        self._speaking = False
        self._stop = at_ms
        return self._judge()

    def transcript(self, text: str) -> Answered | None:
        self._words += re.findall(r"[\w']+", text)
        self._transcribed = True
        if (m := MACHINE_WORDS.search(text)) is not None:
            self._reasons.append(f"the words {m.group(0)!r}")
        return self._judge()

    # ------------------------------------------------------------------ outputs

    @property
    def beep_ended_ms(self) -> float | None:
        """When the beep ended (None: no beep, or it still sounds)."""
        return self._tone.ended_ms

    def message_due(self) -> bool:
        """After a ``machine`` verdict: the machine records now (its beep ended, or its greeting
        was followed by ``message_silence_ms`` of silence)."""
        if self.verdict is None or self.verdict.by != "machine":
            return False
        if self._tone.ended_ms is not None:
            return True
        if self._tone.found_ms is not None:
            return False  # the beep still sounds
        return not self._speaking and self._stop is not None and self.now_ms - self._stop >= self.rules.message_silence_ms

    # ------------------------------------------------------------------ the rules

    def _judge(self) -> Answered | None:
        if self.verdict is not None:
            return None
        by = self._decide()
        if by is None:
            return None
        self.verdict = Answered(by, round(self.now_ms, 1), tuple(self._reasons))
        return self.verdict

    def _decide(self) -> str | None:
        r = self.rules
        if self._reasons:  # a beep, or a machine's words
            return "machine"
        if self._start is not None:
            end = self.now_ms if self._speaking or self._stop is None else self._stop
            length = end - self._start
            if length > r.greeting_max_ms:
                self._reasons.append(f"a greeting longer than {r.greeting_max_ms / 1000:g} s")
                return "machine"
            if len(self._words) > r.words_max:
                self._reasons.append(f"a greeting of {len(self._words)} words")
                return "machine"
            if not self._speaking and self._stop is not None and self._transcribed and self.now_ms - self._stop >= r.after_greeting_ms:
                said = " ".join(self._words)
                self._reasons.append(f"a short greeting ({length / 1000:.1f} s, {said!r}), then silence")
                return "human"
        elif self.now_ms >= r.initial_silence_ms:
            self._reasons.append(f"nothing said for {r.initial_silence_ms / 1000:g} s")
            return "unknown"
        if self.now_ms >= r.total_ms:
            self._reasons.append(f"no verdict after {r.total_ms / 1000:g} s")
            return "unknown"
        return None
