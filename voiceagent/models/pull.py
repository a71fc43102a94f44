"""``voiceagent models pull``: fetch hub models into huggingface_hub's cache ahead of time.

The only code in voiceagent that downloads a model.  ``serve``, ``talk`` and ``replay`` resolve
hub ids in the cache alone (:mod:`voiceagent.models.source`) and stop with one line naming this
command when a model is not there.  A pull asks the hub which files the id stands for and their
sizes (one request), says so, downloads them with huggingface_hub's progress bars into the
cache that resolution reads (``HF_HUB_CACHE`` / ``HF_HOME``), and checks the result as
``serve`` will.  Any failure to reach the hub is one :class:`~voiceagent.errors.ModelError`
line naming the endpoint (huggingface_hub's ``HF_ENDPOINT``).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Collection, Mapping
from typing import Any

import huggingface_hub
from huggingface_hub import HfApi, hf_hub_download

from voiceagent.errors import ModelError
from voiceagent.models.source import ModelSource, hub_cache, hub_ref, is_piper_voice, origin_of, resolve, snapshot_dir, whisper_names

__all__ = ["HF_FILES", "WHISPER_FILES", "kind_of", "pull", "select_files"]

WHISPER_FILES = ("config.json", "preprocessor_config.json", "model.bin", "tokenizer.json", "vocabulary.*")
"""What faster-whisper itself fetches of a CTranslate2 Whisper repository (its ``download_model``)."""

HF_FILES = ("*.json", "*.safetensors", "tokenizer.model", "merges.txt", "vocab.*", "*.tiktoken")
"""What vLLM reads of a Hugging Face model repository (``llm.backend = "vllm"``): its configs,
tokenizer and safetensors weights, not the other formats some repositories carry beside them."""


def _hf_weights(names: Collection[str]) -> bool:
    """Whether a repository's files are a Hugging Face model vLLM loads: a config and safetensors."""
    return "config.json" in names and any(f.endswith(".safetensors") for f in names)


_SHARD = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$")


def kind_of(value: str, configured: Mapping[str, str] | None = None) -> str:
    """The kind of model a hub id is for: the kind of the setting that holds it in the
    configuration (``configured``: value -> kind), else by its form: a faster-whisper name or a
    plain ``ORG/REPO`` is Whisper, a Piper voice name is a voice, ``ORG/REPO:FILE.onnx`` an ONNX
    model (a voice if the repository has its JSON; see :func:`pull`), any other ``ORG/REPO:...`` a GGUF."""
    if configured and value in configured:
        return configured[value]
    if value in whisper_names():
        return "stt"
    if is_piper_voice(value):
        return "tts"
    rest = value.partition(":")[2]
    if not rest:
        return "stt"
    return "onnx" if rest.endswith(".onnx") else "llm"


def select_files(kind: str, value: str, sizes: Mapping[str, int]) -> list[str]:
    """The files of a repository (``sizes``: each file's name and bytes) that ``value`` stands for."""
    if kind == "vllm":
        files = [f for f in sizes if "/" not in f and any(fnmatch.fnmatch(f, p) for p in HF_FILES)]
        if not _hf_weights(files):
            raise ModelError(f"{value} is not a Hugging Face model repository with safetensors weights; vLLM cannot load it")
        return sorted(files)
    ref = hub_ref("tts" if kind == "onnx" else kind, value)
    if ref.folder:
        files = [f for f in sizes if any(fnmatch.fnmatch(f, p) for p in WHISPER_FILES)]
        if "model.bin" not in files:
            raise ModelError(f"{ref.repo} is not a CTranslate2 Whisper repository (no model.bin); faster-whisper cannot load it")
        return sorted(files)
    if ref.file:
        if ref.file not in sizes:
            raise ModelError(f"{ref.repo} has no file {ref.file}")
        chosen = [ref.file]
    else:
        found = sorted(f for f in sizes if f.endswith(ref.suffix) and ref.pattern.lower() in f.rsplit("/", 1)[-1].lower())
        sets = sorted({_SHARD.sub("", f) for f in found})
        if len(sets) != 1:
            what = f"{ref.suffix} files matching {ref.pattern!r}" if ref.pattern else f"{ref.suffix} files"
            names = ", ".join(found[:8]) or "none"
            raise ModelError(f"{ref.repo} has {len(sets)} {what} ({names}); name one: {ref.repo}:FILE")
        chosen = found  # one file, or every part of one split GGUF
    # A Piper voice's JSON beside its .onnx (fetched for a VAD or turn model too, if the repository has one).
    chosen += [f + ".json" for f in chosen if f.endswith(".onnx") and f + ".json" in sizes]
    return chosen


def _fetch_error(value: str, exc: BaseException) -> ModelError:
    why = " ".join(str(exc).split())[:300] or type(exc).__name__
    return ModelError(f"could not fetch {value} from {huggingface_hub.constants.ENDPOINT}: {type(exc).__name__}: {why}")


def pull(value: str, kind: str, say: Callable[[str], None] = print) -> ModelSource:
    """Fetch hub model ``value`` for a ``kind`` model (``kind_of``) into the cache; returns it
    resolved and checked as ``serve`` will resolve it.  Blocking; prints with ``say``."""
    if huggingface_hub.constants.HF_HUB_OFFLINE:
        raise ModelError(f"cannot fetch {value}: HF_HUB_OFFLINE is set (unset it to pull, or copy the model into {hub_cache()})")
    cache = hub_cache()
    probe = {"onnx": "tts", "vllm": "llm"}.get(kind, kind)
    if origin_of(probe, value) != "hub":
        raise ModelError(f"{value!r} is not a hub id (a catalog name or a path needs no pull)")
    repo = hub_ref(probe, value).repo
    try:
        info: Any = HfApi().model_info(repo, files_metadata=True)
    except Exception as exc:  # any failure to reach or read the hub: one line, not a traceback
        raise _fetch_error(value, exc) from exc
    sizes = {str(s.rfilename): int(s.size or 0) for s in info.siblings or []}
    if kind == "stt" and "model.bin" not in sizes and _hf_weights(sizes):
        kind = "vllm"  # a plain ORG/REPO of safetensors weights is an LLM for vLLM, not a Whisper
    files = select_files(kind, value, sizes)
    if kind == "onnx":  # a voice if its JSON came along, else a VAD or turn model (the same check)
        kind = "tts" if any(f.endswith(".onnx.json") for f in files) else "vad"
    total = sum(sizes[f] for f in files)
    say(f"pulling {value}: {repo} ({', '.join(files)}), {total / 1e6:.1f} MB, into {cache}")
    for name in files:
        try:
            hf_hub_download(repo, name, cache_dir=cache)
        except Exception as exc:  # as above
            raise _fetch_error(value, exc) from exc
    if kind == "vllm":
        folder = snapshot_dir(repo, cache)
        if folder is None:  # pragma: no cover - hf_hub_download just wrote it
            raise ModelError(f"{value}: downloaded, but no snapshot of {repo} in {cache}")
        source = ModelSource(kind="llm", setting="models pull", value=value, origin="hub", path=folder, repo=repo)
    else:
        source = resolve(kind, value, setting="models pull")
    say(f"ready: {value} -> {source.path} ({total / 1e6:.1f} MB)")
    return source
