"""Small files with the shape of each kind of model, for the model layer's checks.

None of them holds weights: a GGUF header with the metadata asked for, an ONNX protobuf whose
graph names the inputs asked for, a CTranslate2 Whisper folder whose vocabulary has the size
asked for, a Piper voice's JSON.  The checks read only these parts (voiceagent.models.checks).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = ["ENGLISH_ONLY", "MULTILINGUAL", "write_gguf", "write_onnx", "write_piper_voice", "write_whisper_dir"]

ENGLISH_ONLY = 51864
MULTILINGUAL = 51865


def _gguf_string(text: str) -> bytes:
    data = text.encode()
    return struct.pack("<Q", len(data)) + data


def write_gguf(path: Path, metadata: Mapping[str, str | int], arrays: Mapping[str, Sequence[str]] | None = None) -> Path:
    """A GGUF v3 file with no tensors: ``metadata`` (strings as type 8, ints as uint32) after
    ``arrays`` of strings (as a vocabulary comes before the chat template in real files)."""
    kv = b""
    for key, items in (arrays or {}).items():
        kv += _gguf_string(key) + struct.pack("<IIQ", 9, 8, len(items)) + b"".join(_gguf_string(s) for s in items)
    for key, value in metadata.items():
        if isinstance(value, int):
            kv += _gguf_string(key) + struct.pack("<II", 4, value)
        else:
            kv += _gguf_string(key) + struct.pack("<I", 8) + _gguf_string(value)
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, len(metadata) + len(arrays or {})) + kv)
    return path


def _varint(n: int) -> bytes:
    out = b""
    while n >= 0x80:
        out += bytes([n & 0x7F | 0x80])
        n >>= 7
    return out + bytes([n])


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def write_onnx(path: Path, inputs: Sequence[str]) -> Path:
    """An ONNX ModelProto (ir_version 8) whose graph has ``inputs`` and nothing else."""
    graph = _field(2, b"g") + b"".join(_field(11, _field(1, name.encode())) for name in inputs)
    path.write_bytes(_varint(1 << 3) + _varint(8) + _field(7, graph))
    return path


def write_whisper_dir(path: Path, vocabulary: int = MULTILINGUAL, files: Sequence[str] = ("model.bin", "tokenizer.json")) -> Path:
    """A CTranslate2 Whisper folder's layout: Whisper's config.json, ``vocabulary`` tokens, ``files``."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps({"suppress_ids": [1, 2], "lang_ids": [50259]}))
    (path / "vocabulary.txt").write_text("".join(f"t{i}\n" for i in range(vocabulary)))
    for name in files:
        (path / name).write_bytes(b"x")
    return path


def write_piper_voice(path: Path, config: Mapping[str, object] | None = None) -> Path:
    """A Piper voice ``path`` (.onnx with Piper's inputs) and, unless ``config`` is ``{}``, its JSON."""
    write_onnx(path, ["input", "input_lengths", "scales"])
    if config != {}:
        body = config if config is not None else {"audio": {"sample_rate": 22050}, "phoneme_id_map": {"a": [1]}}
        path.with_name(path.name + ".json").write_text(json.dumps(body))
    return path
