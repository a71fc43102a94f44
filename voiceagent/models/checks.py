"""Is a model file or folder the kind its backend needs?  Cheap checks, before anything loads.

Each check reads only what it must (a folder's listing, a JSON file, a GGUF file's header) and
raises :class:`~voiceagent.errors.ModelError` with one line that starts with ``label`` (the
setting and its value, for example ``llm.model '/m/x.gguf'``) and says what is wrong and what the
backend wants instead.  A location that passes may still fail to load (a damaged file); the
loader reports that.

What each backend needs:

========  ===============================================================================
``stt``   a CTranslate2 Whisper folder: ``model.bin``, ``config.json`` (Whisper's, with its
          ``suppress_ids``), ``tokenizer.json`` (without it faster-whisper downloads one) and
          ``vocabulary.txt`` or ``.json``; English-only models (a vocabulary of 51 864 tokens,
          as CTranslate2 counts them) refuse any ``stt.language`` but ``en``
``llm``   a GGUF file (llama.cpp) whose metadata holds ``tokenizer.chat_template``: prompts are
          rendered with the model's own template, and llama-cpp-python's fallback without one
          is a format the model was not trained on
``tts``   a Piper voice: ``NAME.onnx`` with ``NAME.onnx.json`` beside it (the phonemes and the
          sample rate come from the JSON)
``vad``   an ``.onnx`` file whose graph takes Silero's inputs (``input``, ``state``, ``sr``)
``turn``  an ``.onnx`` file whose graph takes Smart Turn's ``input_features``
========  ===============================================================================

A Piper voice's graph is checked for Piper's inputs too (``input``, ``input_lengths``,
``scales``), so a VAD given as a voice is named as such rather than failing mid-synthesis.
"""

from __future__ import annotations

import json
import mmap
import struct
from pathlib import Path
from typing import Any

from voiceagent.errors import ModelError

__all__ = ["ONNX_INPUTS", "check", "check_language", "gguf_metadata", "onnx_inputs", "whisper_multilingual"]

_WHISPER_FILES = ("model.bin", "config.json", "tokenizer.json")
_MULTILINGUAL_VOCABULARY = 51865
"""CTranslate2 calls a Whisper model multilingual when its vocabulary has at least this many
tokens (English-only: 51 864)."""


ONNX_INPUTS = {
    "vad": ("Silero VAD", ("input", "state", "sr")),
    "turn": ("Smart Turn model", ("input_features",)),
    "tts": ("Piper voice", ("input", "input_lengths", "scales")),
}
"""The graph inputs each ONNX backend feeds, and what such a model is called."""


def check(kind: str, path: Path, label: str) -> None:
    """Raise a one-line :class:`ModelError` unless ``path`` is the kind of model ``kind``'s
    backend loads (``vad``, ``stt``, ``turn``, ``llm``, ``tts`` or ``embed``)."""
    if not path.exists():
        raise ModelError(f"{label}: {path} does not exist")
    if kind == "stt":
        _check_whisper(path, label)
    elif kind == "llm":
        _check_gguf(path, label)
    elif kind == "tts":
        _check_onnx(path, label, "tts", "a Piper voice (.onnx with its .onnx.json beside it)")
        _check_piper_json(path, label)
    elif kind == "embed":
        _check_embedder(path, label)
    else:
        _check_onnx(path, label, kind, "an ONNX model (.onnx)")


def _check_embedder(path: Path, label: str) -> None:
    want = "a sentence-transformers BERT folder (config.json, tokenizer.json, model.safetensors, sentence_bert_config.json)"
    if not path.is_dir():
        raise ModelError(f"{label}: {path} is a file; the embedding model needs {want}")
    missing = {"config.json", "tokenizer.json", "model.safetensors", "sentence_bert_config.json"} - {p.name for p in path.iterdir()}
    if missing:
        raise ModelError(f"{label}: {path} lacks {', '.join(sorted(missing))}; the embedding model needs {want}")


def _check_whisper(path: Path, label: str) -> None:
    want = "a CTranslate2 Whisper folder (model.bin, config.json, tokenizer.json, vocabulary)"
    if not path.is_dir():
        raise ModelError(f"{label}: {path} is a file; faster-whisper needs {want}")
    names = {p.name for p in path.iterdir()}
    if "model.bin" not in names and (any(n.endswith(".safetensors") for n in names) or "pytorch_model.bin" in names):
        raise ModelError(
            f"{label}: {path} is a Transformers checkpoint, not CTranslate2; convert it with: "
            f"ct2-transformers-converter --model {path} --output_dir OUT --copy_files tokenizer.json"
        )
    missing = [n for n in _WHISPER_FILES if n not in names]
    if not names & {"vocabulary.txt", "vocabulary.json"}:
        missing.append("vocabulary.txt")
    if missing:
        raise ModelError(f"{label}: {path} lacks {', '.join(missing)}; faster-whisper needs {want}")
    config = _json(path / "config.json", label)
    if "suppress_ids" not in config:
        raise ModelError(f"{label}: {path} is a CTranslate2 model but not a Whisper one (its config.json has no suppress_ids)")


def whisper_multilingual(path: Path) -> bool:
    """Whether the CTranslate2 Whisper folder ``path`` transcribes other languages than English,
    judged as CTranslate2 does, by the size of its vocabulary."""
    txt = path / "vocabulary.txt"
    if txt.is_file():
        with open(txt, "rb") as fh:
            size = sum(1 for _ in fh)
    else:
        size = len(json.loads((path / "vocabulary.json").read_text(encoding="utf-8")))
    return size >= _MULTILINGUAL_VOCABULARY


def check_language(path: Path, language: str, label: str) -> None:
    """An English-only Whisper folder with ``stt.language`` other than ``en``: one line saying so
    (decoded anyway, it would write English whatever was said)."""
    if language != "en" and not whisper_multilingual(path):
        raise ModelError(
            f"{label} is English-only but stt.language is {language!r}: choose a multilingual Whisper "
            f"(a name without .en, for example 'small') or set stt.language=en"
        )


def _check_onnx(path: Path, label: str, kind: str, want: str) -> None:
    if not path.is_file() or path.suffix != ".onnx":
        raise ModelError(f"{label}: {path} is not {want}")
    name, needed = ONNX_INPUTS[kind]
    try:
        inputs = onnx_inputs(path)
    except (ValueError, IndexError, UnicodeDecodeError, OSError) as exc:
        raise ModelError(f"{label}: {path} is not a readable ONNX model ({' '.join(str(exc).split())})") from exc
    if not set(needed) <= set(inputs):
        raise ModelError(
            f"{label}: {path.name} is not a {name} (its inputs are {', '.join(inputs) or 'none'}; a {name} takes {', '.join(needed)})"
        )


def onnx_inputs(path: Path) -> list[str]:
    """The names of the graph inputs of the ONNX model ``path``, read from its protobuf without
    onnx or onnxruntime (ModelProto field 7 is the graph; GraphProto field 11 its inputs, each a
    ValueInfoProto whose field 1 is the name).  Older files list initializers among the inputs."""
    with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        graph = next((v for f, v in _fields(buf, 0, len(buf)) if f == 7), None)
        if graph is None:
            raise ValueError("no graph")
        names = []
        for field, value in _fields(buf, *graph):
            if field == 11:
                name = next((v for f, v in _fields(buf, *value) if f == 1), None)
                if name is not None:
                    names.append(bytes(buf[name[0] : name[1]]).decode("utf-8"))
        return names


def _varint(buf: mmap.mmap, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def _fields(buf: mmap.mmap, start: int, end: int) -> list[tuple[int, tuple[int, int]]]:
    """The length-delimited fields of the protobuf message in ``buf[start:end]``, as (field
    number, (start, end) of its bytes); other wire types are skipped."""
    out = []
    pos = start
    while pos < end:
        key, pos = _varint(buf, pos)
        wire = key & 7
        if wire == 0:
            pos = _varint(buf, pos)[1]
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        elif wire == 2:
            size, pos = _varint(buf, pos)
            if pos + size > end:
                raise ValueError("truncated protobuf")
            out.append((key >> 3, (pos, pos + size)))
            pos += size
        else:
            raise ValueError(f"protobuf wire type {wire}")
    return out


def _check_piper_json(path: Path, label: str) -> None:
    beside = path.with_name(path.name + ".json")
    if not beside.is_file():
        raise ModelError(f"{label}: the Piper voice {path.name} has no {beside.name} beside it (download both files of the voice)")
    config = _json(beside, label)
    rate = config.get("audio", {}).get("sample_rate") if isinstance(config.get("audio"), dict) else None
    if not isinstance(rate, int) or "phoneme_id_map" not in config:
        raise ModelError(f"{label}: {beside} is not a Piper voice's config (no audio.sample_rate or phoneme_id_map)")


def _json(path: Path, label: str) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelError(f"{label}: {path} is not readable JSON ({' '.join(str(exc).split())})") from exc
    if not isinstance(data, dict):
        raise ModelError(f"{label}: {path} is not a JSON object")
    return data


def _check_gguf(path: Path, label: str) -> None:
    if path.is_dir():
        names = sorted(p.name for p in path.iterdir())
        ggufs = [n for n in names if n.endswith(".gguf")]
        if ggufs:
            raise ModelError(f"{label}: {path} is a folder; name the .gguf file in it ({', '.join(ggufs[:4])})")
        if any(n.endswith(".safetensors") for n in names) or "config.json" in names:
            raise ModelError(
                f"{label}: {path} is a Hugging Face (safetensors) folder; llama.cpp needs a .gguf file "
                f"(convert it with llama.cpp's convert_hf_to_gguf.py, or set llm.backend=vllm)"
            )
        raise ModelError(f"{label}: {path} is a folder, not a .gguf file")
    metadata = gguf_metadata(path, label)
    if not metadata.get("tokenizer.chat_template"):
        raise ModelError(
            f"{label}: {path.name} has no chat template (no tokenizer.chat_template in its GGUF metadata); "
            f"use a GGUF of an instruct model converted with its template"
        )


# GGUF metadata value types (ggml's gguf.h): fixed sizes, 8 = string, 9 = array.
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9


def gguf_metadata(path: Path, label: str = "") -> dict[str, Any]:
    """The scalar and string metadata of the GGUF file ``path`` (arrays, such as the vocabulary,
    are skipped).  Reads the header only, through a memory map.  A file that is not GGUF
    (version 2 or 3) is a one-line :class:`ModelError`."""
    label = label or str(path)
    try:
        with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            return _parse_gguf(buf)
    except (ValueError, struct.error, IndexError, UnicodeDecodeError, OSError) as exc:
        raise ModelError(f"{label}: {path} is not a GGUF file ({' '.join(str(exc).split())}); llama.cpp needs a .gguf file") from exc


def _parse_gguf(buf: mmap.mmap) -> dict[str, Any]:
    if buf[:4] != b"GGUF":
        raise ValueError("no GGUF magic number")
    version, _tensors, count = struct.unpack_from("<IQQ", buf, 4)
    if version not in (2, 3):
        raise ValueError(f"GGUF version {version}")
    pos = 24
    out: dict[str, Any] = {}

    def string(at: int) -> tuple[str, int]:
        (n,) = struct.unpack_from("<Q", buf, at)
        end = at + 8 + n
        if end > len(buf):
            raise ValueError("truncated")
        return buf[at + 8 : end].decode("utf-8"), end

    def skip(typ: int, at: int) -> int:
        if typ in _SCALARS:
            return at + struct.calcsize(_SCALARS[typ])
        if typ == _STRING:
            return string(at)[1]
        if typ == _ARRAY:
            elem, n = struct.unpack_from("<IQ", buf, at)
            at += 12
            if elem in _SCALARS:
                return int(at + n * struct.calcsize(_SCALARS[elem]))
            for _ in range(n):
                at = skip(elem, at)
            return at
        raise ValueError(f"unknown metadata type {typ}")

    for _ in range(count):
        key, pos = string(pos)
        (typ,) = struct.unpack_from("<I", buf, pos)
        pos += 4
        if typ in _SCALARS:
            (out[key],) = struct.unpack_from(_SCALARS[typ], buf, pos)
        elif typ == _STRING:
            out[key] = string(pos)[0]
        pos = skip(typ, pos)
    return out
