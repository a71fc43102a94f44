"""voiceagent.audio: μ-law, PCM parsing, resampling (whole clip and streamed)."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

from tests.unit.signals import peak_hz, sine
from voiceagent.audio import (
    Int16Array,
    StreamResampler,
    alaw_decode,
    alaw_encode,
    duration_ms,
    float_to_int16,
    int16_to_float,
    mulaw_decode,
    mulaw_encode,
    pcm16_from_bytes,
    read_wav,
    resample,
    write_wav,
)

ALL_INT16: Int16Array = np.arange(-32768, 32768, dtype=np.int32).astype(np.int16)


# --------------------------------------------------------------------------- μ-law


def test_mulaw_known_values() -> None:
    # G.711: silence is 0xFF (positive zero) and 0x7F (negative zero); full scale is 0x80 / 0x00.
    assert mulaw_encode(np.array([0], dtype=np.int16)) == b"\xff"
    assert mulaw_decode(b"\xff").tolist() == [0]
    assert mulaw_decode(b"\x7f").tolist() == [0]
    assert mulaw_decode(b"\x80\x00").tolist() == [32124, -32124]
    assert mulaw_encode(np.array([32767, -32768], dtype=np.int16)) == b"\x80\x00"


def test_mulaw_decode_matches_reference_table() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        audioop = pytest.importorskip("audioop")  # the standard library's G.711, until Python 3.13
    every_byte = bytes(range(256))
    reference = np.frombuffer(audioop.ulaw2lin(every_byte, 2), dtype="<i2")
    np.testing.assert_array_equal(mulaw_decode(every_byte), reference)


def test_mulaw_encode_matches_reference_for_non_negative_samples() -> None:
    # audioop works on 14-bit values, which rounds negative samples differently by one step;
    # for non-negative samples both follow G.711 exactly.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        audioop = pytest.importorskip("audioop")
    pcm = np.arange(0, 32768, dtype=np.int16)
    assert mulaw_encode(pcm) == audioop.lin2ulaw(pcm.astype("<i2").tobytes(), 2)


def test_mulaw_round_trip_error_is_bounded() -> None:
    decoded = mulaw_decode(mulaw_encode(ALL_INT16)).astype(np.int64)
    x = ALL_INT16.astype(np.int64)
    mid = np.abs(x) >= 1000
    rel = np.abs(decoded[mid] - x[mid]) / np.abs(x[mid])
    assert rel.max() <= 0.035  # half a step of a 4-bit mantissa (~1/32), plus clipping at the top
    assert rel.mean() <= 0.015
    # Near zero the error is absolute: the first segment's step is 8.
    small = np.abs(x) < 1000
    assert np.abs(decoded[small] - x[small]).max() <= 32
    # The sign is kept and the mapping is monotonic.
    assert np.all(np.sign(decoded[np.abs(x) >= 8]) == np.sign(x[np.abs(x) >= 8]))
    assert np.all(np.diff(decoded) >= 0)


# --------------------------------------------------------------------------- A-law


def test_alaw_known_values() -> None:
    # G.711 A-law: zero is 0xD5 (positive) and 0x55 (negative), decoded to the middle of the first
    # step (±8); full scale is 0xAA / 0x2A (±32256); even bits are inverted on the wire.
    assert alaw_encode(np.array([0, -1, 32767, -32768], dtype=np.int16)) == b"\xd5\x55\xaa\x2a"
    assert alaw_decode(b"\xd5\x55\xaa\x2a").tolist() == [8, -8, 32256, -32256]
    assert alaw_decode(b"\x80").tolist() == [5504]  # sign set, segment 5 after the XOR with 0x55


def test_alaw_matches_the_reference_implementation_exactly() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        audioop = pytest.importorskip("audioop")  # the standard library's G.711, until Python 3.13
    every_byte = bytes(range(256))
    np.testing.assert_array_equal(alaw_decode(every_byte), np.frombuffer(audioop.alaw2lin(every_byte, 2), dtype="<i2"))
    assert alaw_encode(ALL_INT16) == audioop.lin2alaw(ALL_INT16.astype("<i2").tobytes(), 2)


def test_alaw_round_trip_error_is_bounded() -> None:
    decoded = alaw_decode(alaw_encode(ALL_INT16)).astype(np.int64)
    x = ALL_INT16.astype(np.int64)
    mid = np.abs(x) >= 1000
    rel = np.abs(decoded[mid] - x[mid]) / np.abs(x[mid])
    assert rel.max() <= 0.035
    assert np.abs(decoded[~mid] - x[~mid]).max() <= 32  # the first segments' step is 16: half a step, plus rounding
    assert np.all(np.diff(decoded) >= 0)  # monotonic
    # Every code decodes to a value that encodes back to the same code.
    codes = bytes(range(256))
    assert alaw_encode(alaw_decode(codes)) == codes


def test_alaw_differs_from_mulaw() -> None:
    pcm = sine(440, 8000, 0.1)
    assert len(alaw_encode(pcm)) == len(pcm)
    assert alaw_encode(pcm) != mulaw_encode(pcm)


def test_mulaw_encode_is_one_byte_per_sample() -> None:
    pcm = sine(440, 8000, 0.1)
    encoded = mulaw_encode(pcm)
    assert isinstance(encoded, bytes)
    assert len(encoded) == len(pcm)
    assert len(mulaw_decode(encoded)) == len(pcm)


# --------------------------------------------------------------------------- PCM


def test_pcm16_from_bytes_is_little_endian() -> None:
    pcm = pcm16_from_bytes(b"\x01\x00\xff\xff\x00\x80\xff\x7f")
    assert pcm.dtype == np.int16
    assert pcm.tolist() == [1, -1, -32768, 32767]


@pytest.mark.parametrize("length", [1, 3, 641])
def test_pcm16_from_bytes_odd_length_raises(length: int) -> None:
    with pytest.raises(ValueError, match="even number of bytes"):
        pcm16_from_bytes(b"\x00" * length)


def test_float_conversions() -> None:
    pcm = np.array([0, 16384, -32768, 32767], dtype=np.int16)
    x = int16_to_float(pcm)
    assert x.dtype == np.float32
    assert x.tolist() == [0.0, 0.5, -1.0, 32767 / 32768]
    clipped = float_to_int16(np.array([2.0, -2.0, 0.5], dtype=np.float32))
    assert clipped.tolist() == [32767, -32767, 16383]
    assert duration_ms(480, 24000) == 20.0


def test_wav_round_trip(tmp_path: Path) -> None:
    pcm = sine(440, 16000, 0.05)
    path = tmp_path / "x.wav"
    write_wav(path, pcm, 16000)
    back, rate = read_wav(path)
    assert rate == 16000
    np.testing.assert_array_equal(back, pcm)


# --------------------------------------------------------------------------- resampling


@pytest.mark.parametrize(("src", "dst"), [(16000, 24000), (24000, 16000), (8000, 16000), (22050, 24000), (24000, 8000)])
def test_resample_length_and_pitch(src: int, dst: int) -> None:
    pcm = sine(440, src, 1.0)
    out = resample(pcm, src, dst)
    assert out.dtype == np.int16
    assert abs(len(out) - len(pcm) * dst / src) <= 1
    assert peak_hz(out, dst) == pytest.approx(440, abs=2)


def test_resample_same_rate_or_empty_is_identity() -> None:
    pcm = sine(440, 16000, 0.01)
    assert resample(pcm, 16000, 16000) is pcm
    assert len(resample(np.zeros(0, dtype=np.int16), 16000, 24000)) == 0


@pytest.mark.parametrize(("src", "dst", "chunk"), [(16000, 24000, 320), (24000, 16000, 480), (8000, 16000, 160), (22050, 24000, 441)])
def test_stream_resampler_chunked_matches_whole_clip(src: int, dst: int, chunk: int) -> None:
    pcm = sine(440, src, 1.0)
    rs = StreamResampler(src, dst)
    pieces = [rs.process(pcm[i : i + chunk]) for i in range(0, len(pcm), chunk)]
    streamed = np.concatenate([*pieces, rs.flush()])
    whole = resample(pcm, src, dst)
    assert abs(len(streamed) - len(whole)) <= 1
    n = min(len(streamed), len(whole))
    diff = np.abs(streamed[:n].astype(np.int32) - whole[:n].astype(np.int32))
    assert diff.max() <= 4  # a few LSB of rounding; a lost or repeated chunk would be thousands


@pytest.mark.parametrize(("src", "dst"), [(24000, 16000), (8000, 16000), (22050, 24000)])
def test_stream_resampler_output_depends_on_the_input_alone(src: int, dst: int) -> None:
    # soxr's int16 stream dithers from a seed of its own: two streams over the same samples
    # differed by up to 2 LSB, and Whisper read a borderline clip two ways (docs/operations.md).
    rng = np.random.default_rng(7)
    pcm = (rng.standard_normal(src) * 3000).astype(np.int16)

    def stream(sizes: list[int]) -> Int16Array:
        rs = StreamResampler(src, dst, quality="LQ")
        out, i, k = [], 0, 0
        while i < len(pcm):
            n = sizes[k % len(sizes)]
            out.append(rs.process(pcm[i : i + n]))
            i, k = i + n, k + 1
        return np.concatenate([*out, rs.flush()])

    first = stream([src // 50])
    assert np.array_equal(first, stream([src // 50]))  # a second stream, the same cut
    assert np.array_equal(first, stream([src // 50, 3 * src // 50, 7]))  # cut another way


def test_stream_resampler_same_rate_passes_through() -> None:
    rs = StreamResampler(24000, 24000)
    pcm = sine(440, 24000, 0.02)
    assert rs.process(pcm) is pcm
    assert len(rs.flush()) == 0
