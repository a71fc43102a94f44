#!/usr/bin/env python3
"""Generate the spoken test fixtures with espeak-ng (and sox), into a cache folder.

Fixtures are generated rather than committed: each is a 16 kHz mono WAV with leading silence,
the utterance(s), and trailing silence.  A fixture with several turns separates them by
``gap_s`` of silence; ``pause`` splits an utterance with a mid-sentence pause.

Usage: python scripts/make_fixtures.py [OUT_DIR]   (default .cache/fixtures)
"""

from __future__ import annotations

import array
import hashlib
import shutil
import subprocess
import sys
import tempfile
import wave
from dataclasses import dataclass, field
from pathlib import Path

RATE = 16000


@dataclass(frozen=True)
class Fixture:
    name: str
    parts: tuple[str, ...]  # each part is spoken; between parts: `gaps` seconds of silence
    gaps: tuple[float, ...] = ()
    voice: str = "en-us"
    wpm: int = 160
    lead_s: float = 0.6
    tail_s: float = 1.5
    keywords: tuple[tuple[str, ...], ...] = field(default=())  # per turn, words the transcript must contain


FIXTURES: dict[str, Fixture] = {
    f.name: f
    for f in (
        Fixture("capital", ("What is the capital of France?",), wpm=140, keywords=(("capital", "france"),)),
        Fixture("weather", ("Tell me a fun fact about the moon.",), voice="en-us+m3", keywords=(("moon",),)),
        Fixture("colour", ("What colour is the sky on a clear day?",), voice="en-gb", wpm=150, keywords=(("sky",),)),
        Fixture("count", ("Please count from one to five.",), keywords=(("count",),)),
        Fixture(
            "two_turns",
            ("What is the capital of Italy?", "And what about Spain?"),
            gaps=(6.0,),
            keywords=(("capital", "italy"), ("spain",)),
        ),
        Fixture(
            "pause_mid",
            ("I would like to know", "the largest planet in our solar system."),
            gaps=(0.35,),
            keywords=(("largest", "planet"),),
        ),
        Fixture(
            "long_story",
            ("Tell me a long story about a dragon who lives in a castle by the sea and loves to read books.",),
            keywords=(("dragon",),),
        ),
    )
}


def _espeak(text: str, voice: str, wpm: int, out: Path) -> None:
    raw = out.with_suffix(".raw.wav")
    subprocess.run(["espeak-ng", "-v", voice, "-s", str(wpm), "-w", str(raw), text], check=True)
    subprocess.run(["sox", str(raw), "-r", str(RATE), "-c", "1", "-b", "16", str(out)], check=True)
    raw.unlink()


def _read(path: Path) -> bytes:
    """The samples of ``path`` without espeak's own leading/trailing digital silence, so that the
    gaps and pauses of a fixture are exactly the declared ones."""
    with wave.open(str(path), "rb") as w:
        data = w.readframes(w.getnframes())
    samples = array.array("h", data)
    loud = [i for i, v in enumerate(samples) if abs(v) > 16]
    if not loud:
        return data
    return samples[loud[0] : loud[-1] + 1].tobytes()


def _silence(seconds: float) -> bytes:
    return b"\x00\x00" * int(seconds * RATE)


def make(fixture: Fixture, out_dir: Path) -> Path:
    """Write ``out_dir/<name>.wav`` (skipped when an identical one exists); returns its path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / f"{fixture.name}.wav"
    stamp = out_dir / f"{fixture.name}.key"
    key = hashlib.sha256(repr(fixture).encode()).hexdigest()
    if target.exists() and stamp.exists() and stamp.read_text() == key:
        return target
    if shutil.which("espeak-ng") is None or shutil.which("sox") is None:
        raise RuntimeError("espeak-ng and sox are needed to make test speech (scripts/setup.sh installs them)")
    with tempfile.TemporaryDirectory() as tmp:
        frames = _silence(fixture.lead_s)
        for i, text in enumerate(fixture.parts):
            part = Path(tmp) / f"p{i}.wav"
            _espeak(text, fixture.voice, fixture.wpm, part)
            frames += _read(part)
            if i < len(fixture.gaps):
                frames += _silence(fixture.gaps[i])
        frames += _silence(fixture.tail_s)
    with wave.open(str(target), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(RATE)
        w.writeframes(frames)
    stamp.write_text(key)
    return target


def make_all(out_dir: Path) -> dict[str, Path]:
    return {name: make(f, out_dir) for name, f in FIXTURES.items()}


if __name__ == "__main__":
    out = Path(sys.argv[1] if len(sys.argv) > 1 else ".cache/fixtures")
    for name, path in make_all(out).items():
        print(f"{name}: {path}")
