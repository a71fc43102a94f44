"""The voices the spoken evals speak in, and their speech (eval_quality.py, eval_stt.py,
eval_end_of_turn.py): espeak-ng variants, the packaged Piper voice, and Debian's flite or
festival when installed (else one more espeak-ng variant, with a note saying so), synthesized as
16 kHz mono int16 and cached as WAV files."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
import wave
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common.questions import Question
from scripts import make_fixtures

__all__ = ["DEFAULT_VOICES", "RATE", "Speaker", "Voice", "question_speech", "resolve_voices", "silence"]

RATE = 16000
DEFAULT_VOICES = ("espeak:en-us+m3", "espeak:en+f2", "espeak:en-gb-x-rp", "piper:joe", "flite:slt")
ENGINES = ("espeak", "piper", "flite", "festival")
# Stand-ins, in order, for a flite or festival voice whose program is not installed.
ESPEAK_STAND_INS = ("en-us+f4", "en-us+m7", "en-gb-scotland", "en-029")
ESPEAK_WPM = 160


@dataclass(frozen=True)
class Voice:
    """A voice: its engine (``espeak``, ``piper``, ``flite``, ``festival``) and the engine's name for it."""

    engine: str
    name: str
    asked: str = ""
    """The voice asked for, when this one stands in for it (its program is not installed)."""

    @property
    def label(self) -> str:
        """``ENGINE:NAME``, as ``--voices`` names it."""
        return f"{self.engine}:{self.name}"


def resolve_voices(specs: list[str], which: Any = shutil.which) -> tuple[list[Voice], list[str]]:
    """The voices to speak in (``specs``: ``ENGINE:NAME``), and a note for each one that had to
    stand in for another (``which``: how a program is found, :func:`shutil.which`).  Raises
    :class:`ValueError` for an unknown engine or a missing name."""
    voices: list[Voice] = []
    notes: list[str] = []
    for spec in specs:
        engine, _, name = spec.partition(":")
        if engine not in ENGINES or not name:
            raise ValueError(f"voice {spec!r}: expected ENGINE:NAME, ENGINE one of {', '.join(ENGINES)}")
        voice = Voice(engine, name)
        if engine == "flite" and which("flite") is None and which("text2wave") is not None:
            voice = Voice("festival", "kal_diphone", asked=spec)
            notes.append(f"{spec}: flite is not installed; Debian's festival (kal_diphone) speaks instead")
        elif (engine == "flite" and which("flite") is None) or (engine == "festival" and which("text2wave") is None):
            taken = {v.label for v in voices} | set(specs)
            name = next((s for s in ESPEAK_STAND_INS if f"espeak:{s}" not in taken), ESPEAK_STAND_INS[0])
            voice = Voice("espeak", name, asked=spec)
            notes.append(f"{spec}: flite and festival are not installed (apt-get install flite); espeak-ng {name} speaks instead")
        voices.append(voice)
    return voices, notes


class Speaker:
    """Speech for a text in a voice: 16 kHz mono int16 without leading/trailing silence, cached as
    WAV files under ``cache`` (keyed by voice and text)."""

    def __init__(self, cache: Path) -> None:
        self.cache = cache
        self._piper: dict[str, Any] = {}

    def speak(self, text: str, voice: Voice) -> bytes:
        """``text`` spoken in ``voice``: 16 kHz mono int16 frames, synthesized on the first call
        and read from the cache after."""
        key = hashlib.sha256(f"{voice.label}|{ESPEAK_WPM}|{text}".encode()).hexdigest()[:20]
        target = self.cache / "speech" / voice.label.replace(":", "_").replace("+", "_") / f"{key}.wav"
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory() as tmp:
                raw = Path(tmp) / "speech.wav"
                self._synthesize(text, voice, raw)
                frames = make_fixtures._read(raw)  # without the engine's own leading/trailing silence
            part = target.with_suffix(".part")
            with wave.open(str(part), "wb") as w:
                w.setnchannels(1)
                w.setsampwidth(2)
                w.setframerate(RATE)
                w.writeframes(frames)
            part.replace(target)
        with wave.open(str(target), "rb") as w:
            return w.readframes(w.getnframes())

    def _synthesize(self, text: str, voice: Voice, out: Path) -> None:
        if voice.engine == "espeak":
            make_fixtures._espeak(text, voice.name, ESPEAK_WPM, out)
        elif voice.engine == "piper":
            from voiceagent.audio import resample, write_wav
            from voiceagent.backends.piper_tts import PiperTts

            if voice.name not in self._piper:
                self._piper[voice.name] = PiperTts(voice.name, threads=1)
            tts = self._piper[voice.name]
            pcm = np.concatenate(list(tts.synthesize(text, 1.0)))
            write_wav(out, resample(pcm, tts.sample_rate, RATE), RATE)
        else:
            raw = out.with_suffix(".raw.wav")
            if voice.engine == "flite":
                subprocess.run(["flite", "-voice", voice.name, "-t", text, "-o", str(raw)], check=True, capture_output=True)
            else:
                cmd = ["text2wave", "-o", str(raw), "-eval", f"(voice_{voice.name})"]
                subprocess.run(cmd, input=text, text=True, check=True, capture_output=True)
            subprocess.run(["sox", str(raw), "-r", str(RATE), "-c", "1", "-b", "16", str(out)], check=True)


def silence(seconds: float) -> bytes:
    """``seconds`` of 16 kHz int16 silence."""
    return b"\x00\x00" * int(seconds * RATE)


def question_speech(q: Question, voice: Voice, speaker: Speaker) -> bytes:
    """The question spoken in ``voice`` (16 kHz int16), its mid-sentence pause as silence between its parts."""
    return silence(q.pause_ms / 1000).join(speaker.speak(part, voice) for part in q.parts)
