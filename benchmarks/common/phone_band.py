"""Speech as a phone line carries it: a recording passed through a call's codec and back.

``mulaw``: 8 kHz G.711 μ-law (what a PSTN call, a Twilio Media Stream and most SIP trunks carry);
``g722``: 16 kHz G.722 (the wideband codec of desk phones and many trunks, through ffmpeg's
encoder and decoder); ``narrow``: the 8 kHz band alone (no μ-law); ``wide``: the recording as it is.  The result is written back at the
recording's rate, as the server's phone paths hand it to the transcriber (μ-law decoded and
resampled to 16 kHz), so a replay of it over the WebSocket hears what a phone call would.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from voiceagent.audio import mulaw_decode, mulaw_encode, read_wav, resample, write_wav

BANDS = ("wide", "narrow", "mulaw", "g722")


def through(band: str, src: Path, dst: Path) -> Path:
    """``src`` through ``band``'s codec, written to ``dst`` (``src`` itself for ``wide``)."""
    if band == "wide":
        return src
    if band not in BANDS:
        raise ValueError(f"unknown band {band!r}: one of {', '.join(BANDS)}")
    if dst.exists() and dst.stat().st_mtime >= src.stat().st_mtime:
        return dst
    pcm, rate = read_wav(src)
    dst.parent.mkdir(parents=True, exist_ok=True)
    write_wav(dst, carry(band, pcm, rate), rate)
    return dst


def carry(band: str, pcm: np.ndarray, rate: int) -> np.ndarray:
    """16-bit ``pcm`` at ``rate`` as ``band`` carries it, at ``rate`` again.  ``narrow`` is the
    8 kHz band alone, without μ-law's quantization: it tells the two losses apart."""
    if band == "wide":
        return pcm
    if band in ("mulaw", "narrow"):
        narrow = resample(pcm, rate, 8000)
        if band == "mulaw":
            narrow = mulaw_decode(mulaw_encode(narrow))
        return resample(narrow, 8000, rate).astype(np.int16)
    if band == "g722":
        return _g722(pcm, rate).astype(np.int16)
    raise ValueError(f"unknown band {band!r}: one of {', '.join(BANDS)}")


def _g722(pcm: np.ndarray, rate: int) -> np.ndarray:
    """A round trip through ffmpeg's G.722 encoder and decoder (16 kHz)."""
    if shutil.which("ffmpeg") is None:
        raise RuntimeError("the g722 band needs ffmpeg (apt install ffmpeg)")
    with tempfile.TemporaryDirectory() as tmp:
        wav, coded, back = Path(tmp) / "in.wav", Path(tmp) / "coded.g722", Path(tmp) / "back.wav"
        write_wav(wav, resample(pcm, rate, 16000).astype(np.int16), 16000)
        quiet = ("ffmpeg", "-loglevel", "error", "-y")
        subprocess.run([*quiet, "-i", str(wav), "-ar", "16000", "-ac", "1", "-c:a", "g722", "-f", "g722", str(coded)], check=True)
        subprocess.run([*quiet, "-f", "g722", "-i", str(coded), "-ar", "16000", "-ac", "1", "-c:a", "pcm_s16le", str(back)], check=True)
        out, out_rate = read_wav(back)
    return resample(out, out_rate, rate)
