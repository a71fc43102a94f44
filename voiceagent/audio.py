"""Pure PCM helpers: sample formats, resampling, G.711 μ-law and A-law, framing, WAV files.

All functions are free of I/O except :func:`read_wav` / :func:`write_wav`.  Inside the pipeline,
audio is mono **int16 at 16 kHz** (``PIPELINE_RATE``) on the way in; TTS output keeps the voice's
own rate and each transport converts to its wire format.
"""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np
import numpy.typing as npt
import soxr

__all__ = [
    "PIPELINE_RATE",
    "Int16Array",
    "Float32Array",
    "StreamResampler",
    "alaw_decode",
    "alaw_encode",
    "duration_ms",
    "float_to_int16",
    "int16_to_float",
    "mulaw_decode",
    "mulaw_encode",
    "pcm16_from_bytes",
    "read_wav",
    "resample",
    "speech_level_db",
    "write_wav",
]

PIPELINE_RATE = 16_000

Int16Array = npt.NDArray[np.int16]
Float32Array = npt.NDArray[np.float32]


def pcm16_from_bytes(data: bytes) -> Int16Array:
    """Little-endian 16-bit PCM bytes to int16 samples.  Raises ``ValueError`` on an odd length."""
    if len(data) % 2:
        raise ValueError(f"16-bit PCM needs an even number of bytes, got {len(data)}")
    return np.frombuffer(data, dtype="<i2").astype(np.int16)


def int16_to_float(pcm: Int16Array) -> Float32Array:
    """int16 samples to float32 in [-1, 1)."""
    return (pcm.astype(np.float32) / 32768.0).astype(np.float32)


def float_to_int16(x: Float32Array) -> Int16Array:
    """float32 samples (clipped to [-1, 1]) to int16."""
    return (np.clip(x, -1.0, 1.0) * 32767.0).astype(np.int16)


def duration_ms(samples: int, rate: int) -> float:
    """Length of ``samples`` samples at ``rate`` Hz, in milliseconds."""
    return samples * 1000.0 / rate


def speech_level_db(audio: Float32Array, rate: int = PIPELINE_RATE) -> float | None:
    """The level of the loudest part of ``audio`` (float, full scale 1.0) in dBFS: the 90th
    percentile of its 20 ms frames' RMS, so the silence padding a speech segment carries does
    not lower it.  None when ``audio`` is shorter than one frame."""
    frame = rate // 50
    n = len(audio) // frame
    if n == 0:
        return None
    rms = np.sqrt(np.mean(np.square(audio[: n * frame].reshape(n, frame).astype(np.float64)), axis=1))
    return float(20.0 * np.log10(max(float(np.percentile(rms, 90)), 1e-6)))


def resample(pcm: Int16Array, src_rate: int, dst_rate: int) -> Int16Array:
    """Resample a whole int16 clip with soxr (band-limited, not interpolation)."""
    if src_rate == dst_rate or len(pcm) == 0:
        return pcm
    out = soxr.resample(pcm, src_rate, dst_rate, quality="HQ")
    return np.asarray(out, dtype=np.int16)


class StreamResampler:
    """Chunk-by-chunk resampling with state carried between chunks (soxr's streaming mode).

    Feeding a clip in pieces yields the same samples as resampling it whole, minus a short delay
    that :meth:`flush` releases at the end of a stream.  The output is a function of the input
    alone: the same samples however they are cut into chunks, in every run.  soxr's own int16
    stream does not give that: it adds TPDF dither from a generator seeded per stream, a few LSB
    that differ from run to run and are enough to change what Whisper hears in a borderline
    clip (docs/operations.md).  The stream therefore runs in float32 and this class rounds.
    """

    def __init__(self, src_rate: int, dst_rate: int, quality: str = "HQ") -> None:
        """``quality``: soxr's ``"HQ"`` for audio people hear; ``"LQ"`` (still band-limited) for
        microphone input, where HQ's filter holds back 40-100 ms per chunk and that delay adds
        straight to the time before the end of speech is noticed."""
        self.src_rate = src_rate
        self.dst_rate = dst_rate
        self._rs: soxr.ResampleStream | None = (
            None if src_rate == dst_rate else soxr.ResampleStream(src_rate, dst_rate, 1, dtype="float32", quality=quality)
        )

    def process(self, pcm: Int16Array, *, last: bool = False) -> Int16Array:
        """The resampled samples ``pcm`` completes (possibly none while the filter fills); with
        ``last``, the stream's tail too."""
        if self._rs is None:
            return pcm
        # The filter is linear: int16 values as floats need no scaling, and rounding back is exact
        # for every sample that was not clipped.
        out = self._rs.resample_chunk(pcm.astype(np.float32), last=last)
        rounded: Int16Array = np.clip(np.rint(out), -32768, 32767).astype(np.int16)
        return rounded

    def flush(self) -> Int16Array:
        return self.process(np.zeros(0, dtype=np.int16), last=True)


# G.711 μ-law, computed rather than tabulated from a library: ``audioop`` left the standard
# library in Python 3.13.  The formulas follow ITU-T G.711 (bias 0x84, clip 32635).
_MULAW_BIAS = 0x84
_MULAW_CLIP = 32635


def _build_mulaw_decode_table() -> Int16Array:
    u = ~np.arange(256, dtype=np.int32) & 0xFF
    sign = u & 0x80
    exponent = (u >> 4) & 0x07
    mantissa = u & 0x0F
    magnitude = (((mantissa << 3) + _MULAW_BIAS) << exponent) - _MULAW_BIAS
    return np.where(sign != 0, -magnitude, magnitude).astype(np.int16)


_MULAW_DECODE = _build_mulaw_decode_table()


def mulaw_decode(data: bytes) -> Int16Array:
    """G.711 μ-law bytes to int16 samples."""
    return _MULAW_DECODE[np.frombuffer(data, dtype=np.uint8)]


def mulaw_encode(pcm: Int16Array) -> bytes:
    """int16 samples to G.711 μ-law bytes."""
    x = pcm.astype(np.int32)
    sign = np.where(x < 0, 0x80, 0)
    mag = np.minimum(np.abs(x), _MULAW_CLIP) + _MULAW_BIAS
    # exponent = position of the highest set bit above bit 7, 0..7
    exponent = np.clip(np.floor(np.log2(mag)).astype(np.int32) - 7, 0, 7)
    mantissa = (mag >> (exponent + 3)) & 0x0F
    byte = ~(sign | (exponent << 4) | mantissa) & 0xFF
    out: bytes = byte.astype(np.uint8).tobytes()
    return out


# G.711 A-law (ITU-T G.711, as the reference implementation and the old ``audioop`` compute
# it): 13-bit magnitudes in eight segments, even bits inverted on the wire (the XOR with 0x55).
_ALAW_SEG_END = np.array([0x1F, 0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF], dtype=np.int32)


def _build_alaw_decode_table() -> Int16Array:
    a = np.arange(256, dtype=np.int32) ^ 0x55
    seg = (a & 0x70) >> 4
    t = ((a & 0x0F) << 4) + np.where(seg == 0, 8, 0x108)
    t = np.where(seg > 1, t << np.maximum(seg - 1, 0), t)
    return np.where(a & 0x80, t, -t).astype(np.int16)


_ALAW_DECODE = _build_alaw_decode_table()


def alaw_decode(data: bytes) -> Int16Array:
    """G.711 A-law bytes to int16 samples."""
    return _ALAW_DECODE[np.frombuffer(data, dtype=np.uint8)]


def alaw_encode(pcm: Int16Array) -> bytes:
    """int16 samples to G.711 A-law bytes."""
    x = pcm.astype(np.int32) >> 3  # 13 bits, rounding toward minus infinity as G.711 does
    mask = np.where(x >= 0, 0xD5, 0x55)
    mag = np.where(x >= 0, x, -x - 1)
    seg = np.searchsorted(_ALAW_SEG_END, mag, side="left").astype(np.int32)  # 0..7: int16 >> 3 fits 0xFFF
    quant = np.where(seg < 2, mag >> 1, mag >> np.maximum(seg, 1)) & 0x0F
    aval = (seg << 4) | quant
    out: bytes = (aval ^ mask).astype(np.uint8).tobytes()
    return out


def read_wav(path: str | Path) -> tuple[Int16Array, int]:
    """Read a 16-bit PCM WAV file, mixing stereo down to mono.  Returns (samples, rate)."""
    with wave.open(str(path), "rb") as w:
        if w.getsampwidth() != 2:
            raise ValueError(f"{path}: only 16-bit PCM WAV is supported (got {8 * w.getsampwidth()}-bit)")
        rate = w.getframerate()
        channels = w.getnchannels()
        data = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.int16)
    if channels > 1:
        data = data.reshape(-1, channels).mean(axis=1).astype(np.int16)
    return data, rate


def write_wav(path: str | Path, pcm: Int16Array, rate: int) -> None:
    """Write mono int16 samples as a 16-bit PCM WAV file."""
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm.astype("<i2").tobytes())
