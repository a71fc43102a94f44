"""Noisy speech for the noise benchmark: a recording with a noise bed mixed in at a stated SNR.

Three noises, all generated here and said to be so (no packaged set of recorded babble, music
or street noise exists in Debian or on PyPI that this project could find):

* ``babble``: six espeak-ng voices (other accents and pitches than the eval's own) reading a
  news-like text at once, each starting at another point: a crowd of talkers, the hardest case
  for a VAD, since it *is* speech;
* ``music``: a plucked-string chord progression over a bass line and a hi-hat (sox's ``synth``),
  120 beats a minute;
* ``street``: brown noise (traffic's rumble) swelling as cars pass every few seconds, with a
  horn now and then.

The SNR is the speech's level against the noise's, both as RMS: the speech over its voiced
20 ms frames only (those within 30 dB of its loudest), so the silence between questions does not
lower it; the noise over its whole length.  The noise runs through the whole recording, the
gaps included: while the agent answers it hears noise alone, which is where a false
interruption comes from.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from voiceagent.audio import Int16Array, read_wav, resample, write_wav

__all__ = ["NOISES", "mix", "noisy", "parse", "voiced_rms"]

NOISES = ("babble", "music", "street")
RATE = 16000
_SPEC = re.compile(r"^(babble|music|street)(-?\d+)$")

_BABBLE_VOICES = ("en-gb-scotland", "en-029", "en-gb-x-gbclan", "en+f4", "en-us+m7", "en-gb-x-gbcwmd")
_BABBLE_TEXT = (
    "The council met on Thursday evening to discuss the new bus routes through the old town, and several "
    "residents spoke about the noise from the works near the station. A spokesman for the rail company said "
    "the repairs would finish before the summer, while traders on the high street asked for more parking. "
    "Later the meeting turned to the library, whose roof has leaked since the storms in the autumn, and to "
    "the plans for a market on Saturdays in the square beside the church."
)


def parse(spec: str) -> tuple[str, float] | None:
    """``babble5`` → ("babble", 5.0); None when ``spec`` is not a noise (a phone band, say)."""
    m = _SPEC.match(spec)
    return (m.group(1), float(m.group(2))) if m else None


def voiced_rms(pcm: Int16Array, rate: int) -> float:
    """RMS of ``pcm``'s 20 ms frames within 30 dB of its loudest (its speech, not its pauses)."""
    n = rate // 50
    frames = pcm[: len(pcm) // n * n].astype(np.float64).reshape(-1, n)
    rms = np.sqrt(np.mean(frames**2, axis=1))
    voiced = rms[rms >= rms.max() * 10 ** (-30 / 20)]
    return float(np.sqrt(np.mean(voiced**2)))


def mix(speech: Int16Array, noise: Int16Array, rate: int, snr_db: float) -> Int16Array:
    """``speech`` with ``noise`` (looped to its length) at ``snr_db``; clipped to 16 bits."""
    reps = -(-len(speech) // len(noise))
    bed = np.tile(noise.astype(np.float64), reps)[: len(speech)]
    bed *= voiced_rms(speech, rate) / max(float(np.sqrt(np.mean(bed**2))), 1e-9) / 10 ** (snr_db / 20)
    return np.clip(speech.astype(np.float64) + bed, -32768, 32767).astype(np.int16)


def noisy(spec: str, src: Path, dst: Path, cache: Path) -> Path:
    """``src`` with ``spec``'s noise (``babble5``…) mixed in, written to ``dst`` (kept while newer
    than ``src``)."""
    parsed = parse(spec)
    if parsed is None:
        raise ValueError(f"not a noise: {spec!r} (one of {', '.join(NOISES)} followed by an SNR in dB)")
    kind, snr = parsed
    if dst.exists() and dst.stat().st_mtime >= src.stat().st_mtime:
        return dst
    pcm, rate = read_wav(src)
    bed = resample(noise(kind, cache), RATE, rate) if rate != RATE else noise(kind, cache)
    dst.parent.mkdir(parents=True, exist_ok=True)
    write_wav(dst, mix(pcm, bed, rate, snr), rate)
    return dst


def noise(kind: str, cache: Path) -> Int16Array:
    """30 s of ``kind`` at 16 kHz, made once into ``cache``."""
    path = cache / f"noise-{kind}.wav"
    if not path.exists():
        cache.mkdir(parents=True, exist_ok=True)
        pcm = {"babble": _babble, "music": _music, "street": _street}[kind]()
        write_wav(path, pcm, RATE)
    pcm, _ = read_wav(path)
    return pcm


def _babble() -> Int16Array:
    espeak = shutil.which("espeak-ng")
    if espeak is None:
        raise RuntimeError("babble noise needs espeak-ng (apt-get install espeak-ng)")
    total = np.zeros(RATE * 30, dtype=np.float64)
    with tempfile.TemporaryDirectory() as tmp:
        for i, voice in enumerate(_BABBLE_VOICES):
            out = Path(tmp) / f"{i}.wav"
            subprocess.run([espeak, "-v", voice, "-s", str(150 + 12 * i), "-w", str(out), _BABBLE_TEXT], check=True, capture_output=True)
            pcm, rate = read_wav(out)
            talker = resample(pcm, rate, RATE).astype(np.float64)
            talker = np.roll(np.tile(talker, -(-len(total) // len(talker)))[: len(total)], i * RATE * 4)
            total += talker / max(float(np.sqrt(np.mean(talker**2))), 1e-9)
    return _normalized(total)


def _music() -> Int16Array:
    sox = shutil.which("sox")
    if sox is None:
        raise RuntimeError("music noise needs sox (apt-get install sox)")
    with tempfile.TemporaryDirectory() as tmp:
        parts = []
        chords = (("C4", "E4", "G4"), ("A3", "C4", "E4"), ("F3", "A3", "C4"), ("G3", "B3", "D4"))
        for bar in range(15):  # 15 bars of 2 s: 30 s
            notes = chords[bar % len(chords)]
            out = Path(tmp) / f"bar{bar}.wav"
            cmd = [sox, "-n", "-r", str(RATE), "-c", "1", "-b", "16", str(out), "synth", "0.5"]
            cmd += [f"pluck {n}" for n in notes] + ["pluck " + notes[0].replace("4", "2").replace("3", "2")]
            cmd += ["repeat", "3", "gain", "-n", "-6"]
            subprocess.run(" ".join(cmd).split(), check=True, capture_output=True)
            parts.append(read_wav(out)[0].astype(np.float64))
    music = np.concatenate(parts)[: RATE * 30]
    rng = np.random.default_rng(7)
    hat = np.zeros_like(music)
    for start in range(RATE // 4, len(hat) - 800, RATE // 4):  # eighth notes at 120 bpm
        hat[start : start + 800] = rng.standard_normal(800) * np.exp(-np.arange(800) / 120.0)
    return _normalized(music / max(float(np.abs(music).max()), 1e-9) + 0.15 * np.diff(hat, prepend=0.0))


def _street() -> Int16Array:
    rng = np.random.default_rng(11)
    n = RATE * 30
    brown = np.cumsum(rng.standard_normal(n))
    brown -= np.convolve(brown, np.ones(RATE // 10) / (RATE // 10), mode="same")  # no drift: a rumble, not a slope
    t = np.arange(n) / RATE
    swell = np.full(n, 0.3)
    for passing in np.arange(1.5, 30, 4.3):  # a car every few seconds
        swell += np.exp(-(((t - passing) / 0.9) ** 2))
    street = brown / max(float(np.std(brown)), 1e-9) * swell
    for honk in (7.2, 21.8):  # a horn now and then: two square tones, half a second
        k = slice(int(honk * RATE), int((honk + 0.5) * RATE))
        street[k] += 0.8 * (np.sign(np.sin(2 * np.pi * 400 * t[k])) + np.sign(np.sin(2 * np.pi * 500 * t[k])))
    return _normalized(street)


def _normalized(x: np.ndarray) -> Int16Array:  # type: ignore[type-arg]
    return (x / max(float(np.abs(x).max()), 1e-9) * 0.7 * 32767).astype(np.int16)
