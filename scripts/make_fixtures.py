#!/usr/bin/env python3
"""Generate the spoken test fixtures with espeak-ng (and sox), into a cache folder.

Fixtures are generated rather than committed: each is a 16 kHz mono WAV with leading silence,
the utterance(s), and trailing silence.  A fixture with several turns separates them by
``gap_s`` of silence; ``pause`` splits an utterance with a mid-sentence pause.

Usage: python scripts/make_fixtures.py [OUT_DIR]   (default .cache/fixtures)
"""

from __future__ import annotations

import argparse
import array
import hashlib
import shutil
import subprocess
import tempfile
import wave
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
    engine: str = "espeak"  # or "piper": read by the Piper joe voice (needs the voiceagent models)
    bench: bool = True  # part of the latency benchmark set
    pauses: int = 0  # mid-sentence pauses inside the turn(s): false cut-off candidates


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
            pauses=1,
        ),
        Fixture(
            "long_story",
            ("Tell me a long story about a dragon who lives in a castle by the sea and loves to read books.",),
            keywords=(("dragon",),),
            bench=False,
        ),
        Fixture(
            "pause_sun", ("Can you tell me", "how far away the sun is?"), gaps=(0.3,), voice="en-us+f3", keywords=(("sun",),), pauses=1
        ),
        Fixture(
            "pause_animal",
            ("My favourite animal is", "the elephant, what is yours?"),
            gaps=(0.4,),
            voice="en-gb",
            keywords=(("elephant",),),
            pauses=1,
        ),
        Fixture(
            "three_turns",
            ("Hello there.", "What is two plus two?", "Thank you very much."),
            # 9 s: the replay test takes an answer only before the next question; on three test
            # workers sharing two cores a first answer once took more than 5 s
            gaps=(9.0, 9.0),
            voice="en-us+m7",
            keywords=(("hello",), ("plus",), ("thank",)),  # Whisper writes "2 plus 2"
        ),
        Fixture("short", ("Good morning.",), voice="en-gb", keywords=(("morning",),)),
        # a listener's backchannel over the agent's reply: it must not cut it (turn.interruption)
        Fixture("backchannel", ("Yeah, yeah. Right.",), voice="en-gb", lead_s=0.3, tail_s=0.5, keywords=(("yeah",),), bench=False),
        # tool calls (tests/integration/test_tools.py)
        Fixture("paris_weather", ("What's the weather in Paris?",), wpm=150, keywords=(("weather", "paris"),), bench=False),
        Fixture("what_time", ("What time is it?",), wpm=150, keywords=(("time",),), bench=False),
        Fixture("piper_book", ("Can you recommend a good book to read on holiday?",), engine="piper", keywords=(("book",),)),
        Fixture(
            "long_question",
            ("If I travel from London to Paris by train, how long does the journey usually take?",),
            keywords=(("london", "paris"),),
        ),
        Fixture("piper_egg", ("How do I boil an egg?",), engine="piper", keywords=(("egg",),)),
        Fixture("piper_song", ("Who wrote the song called Yesterday?",), engine="piper", keywords=(("song",),)),
        Fixture(
            "piper_two_turns",
            ("What is the tallest mountain in the world?", "How high is it?"),
            gaps=(6.0,),
            engine="piper",
            keywords=(("mountain",), ("high",)),
        ),
        Fixture("piper_pause", ("I need a good name for", "my new puppy."), gaps=(0.35,), engine="piper", keywords=(("puppy",),), pauses=1),
        # a follow-up that needs the turn before it (issue #12; tests/integration/test_followups.py)
        Fixture(
            "piper_rome",
            ("What is the capital of Italy?", "And how many people live there?"),
            gaps=(6.0,),
            engine="piper",
            keywords=(("capital", "italy"), ("people",)),
            bench=False,
        ),
        # a pause longer than the silence fallback, after a word a sentence cannot end on
        # (tests/integration/test_pauses.py)
        Fixture(
            "pause_unfinished",
            ("What is the capital of", "Germany?"),
            gaps=(0.8,),
            wpm=140,
            keywords=(("capital", "germany"),),
            bench=False,
            pauses=1,
        ),
        # the same pause after words a sentence could end on, but a listener knows it has not
        # (turn.text_threshold, tests/integration/test_pauses.py)
        Fixture(
            "pause_wheels",
            ("How many wheels", "does a bicycle have?"),
            gaps=(0.8,),
            wpm=140,
            keywords=(("wheels",),),
            bench=False,
            pauses=1,
        ),
    )
}


def _espeak(text: str, voice: str, wpm: int, out: Path) -> None:
    raw = out.with_suffix(".raw.wav")
    subprocess.run(["espeak-ng", "-v", voice, "-s", str(wpm), "-w", str(raw), text], check=True)
    subprocess.run(["sox", str(raw), "-r", str(RATE), "-c", "1", "-b", "16", str(out)], check=True)
    raw.unlink()


def _piper(text: str, out: Path) -> None:
    # Imported here: only Piper-read fixtures need the voiceagent models installed.
    import numpy as np

    from voiceagent.audio import resample, write_wav
    from voiceagent.backends.piper_tts import PiperTts

    global _VOICE
    if _VOICE is None:
        _VOICE = PiperTts("joe")
    pcm = np.concatenate(list(_VOICE.synthesize(text, 1.0)))
    write_wav(out, resample(pcm, _VOICE.sample_rate, RATE), RATE)


_VOICE: Any = None


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
            if fixture.engine == "piper":
                _piper(text, part)
            else:
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


def make_all(out_dir: Path, *, engines: tuple[str, ...] = ("espeak",)) -> dict[str, Path]:
    """Make every fixture spoken by one of ``engines`` (Piper-read ones need the models)."""
    return {name: make(f, out_dir) for name, f in FIXTURES.items() if f.engine in engines}


if __name__ == "__main__":
    # A parser, so that ``--help`` answers instead of becoming the output folder.
    parser = argparse.ArgumentParser(description="Generate the spoken test fixtures (espeak-ng and Piper speech).")
    parser.add_argument("out", nargs="?", default=".cache/fixtures", type=Path, help="output folder (default: .cache/fixtures)")
    for name, path in make_all(parser.parse_args().out, engines=("espeak", "piper")).items():
        print(f"{name}: {path}")
