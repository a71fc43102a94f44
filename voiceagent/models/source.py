"""Where a model comes from: a setting's value resolved, in one place, to a checked local location.

Every model setting (``vad.model``, ``stt.model``, ``turn.model``, ``tts.model``, and
``llm.model`` / ``llm.fallback_model`` where llama.cpp runs them) takes one of three kinds of value:

* **a catalog name** (``models/catalog.toml``): the file inside its installed package, joined
  once into the cache if the model is split (:func:`voiceagent.models.catalog.prepare`);
* **a local path**: a CTranslate2 Whisper folder, a ``.gguf`` file, a Piper ``.onnx`` (its
  ``.onnx.json`` beside it), an ONNX VAD or turn model.  A value that starts with ``/``, ``~``
  or ``.``, that exists, or that ends with ``.gguf`` / ``.onnx`` without a ``:`` is a path;
* **a model hub id**, found in ``huggingface_hub``'s cache (``HF_HUB_CACHE``, else
  ``HF_HOME/hub``, else ``~/.cache/huggingface/hub``):

  ========  =================================================================================
  ``stt``   faster-whisper's names (``tiny.en`` ... ``large-v3-turbo``, ``distil-*``; its own
            table) or ``ORG/REPO`` of a CTranslate2 Whisper
  ``llm``   ``ORG/REPO:FILE.gguf``, ``ORG/REPO:QUANT`` (the one ``.gguf`` whose name holds
            QUANT, any case; the first part of a split one), or ``ORG/REPO`` with one ``.gguf``
  ``tts``   a Piper voice by its upstream name (``en_US-lessac-medium``, in the layout of
            ``rhasspy/piper-voices``), or ``ORG/REPO:FILE.onnx``
  ``vad``,  ``ORG/REPO:FILE.onnx``, or ``ORG/REPO`` with one ``.onnx``
  ``turn``
  ========  =================================================================================

Resolution never downloads, whatever ``HF_HUB_OFFLINE`` says: a hub model that is not in the
cache is a one-line :class:`~voiceagent.errors.ModelError` naming the model, the cache looked
in and the command that fetches it (``voiceagent models pull``, :mod:`voiceagent.models.pull`).
Every path and hub location is checked for the kind its backend needs (:mod:`voiceagent.models.checks`).
"""

from __future__ import annotations

import importlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from voiceagent.config import Config
from voiceagent.errors import MissingDependencyError, ModelError
from voiceagent.models import catalog
from voiceagent.models.catalog import ModelSpec
from voiceagent.models.checks import check

__all__ = [
    "SETTINGS",
    "HubRef",
    "ModelSource",
    "Origin",
    "cached_repos",
    "hub_cache",
    "hub_ref",
    "is_piper_voice",
    "origin_of",
    "piper_voice_file",
    "pull_command",
    "resolve",
    "snapshot_dir",
    "whisper_names",
]

Origin = Literal["catalog", "path", "hub"]

SETTINGS = {
    "vad": "vad.model",
    "stt": "stt.model",
    "turn": "turn.model",
    "llm": "llm.model",
    "tts": "tts.model",
    "embed": "cache.embed_model",
    "sound": "turn.sound_model",
}
"""The setting that names each kind's model (the fallback LLM's is ``llm.fallback_model``)."""

PIPER_VOICES = "rhasspy/piper-voices"
_PIPER_NAME = re.compile(r"(?P<lang>[a-z]{2,3})_(?P<region>[A-Z]{2})-(?P<voice>[A-Za-z0-9_]+)-(?P<quality>x_low|low|medium|high)")
_REPO = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")
_SUFFIX = {"llm": ".gguf", "tts": ".onnx", "vad": ".onnx", "turn": ".onnx"}


@dataclass(frozen=True)
class HubRef:
    """A hub id taken apart: ``repo``, and the file in it (``file``), or a part of a file's name
    (``pattern``, with ``suffix``), or, with neither, the whole snapshot (a Whisper folder) or
    the one file with ``suffix``."""

    repo: str
    file: str = ""
    pattern: str = ""
    suffix: str = ""

    @property
    def folder(self) -> bool:
        return not (self.file or self.suffix)


@dataclass(frozen=True)
class ModelSource:
    """A model setting's value resolved: the local file or folder, and where it came from."""

    kind: str
    setting: str
    value: str
    origin: Origin
    path: Path
    spec: ModelSpec | None = None
    """The catalog entry (origin ``catalog`` only)."""
    repo: str = ""
    """The hub repository (origin ``hub`` only)."""

    @property
    def label(self) -> str:
        return f"{self.setting} {self.value!r}"


def whisper_names() -> dict[str, str]:
    """faster-whisper's model names and the hub repositories they stand for (its own table, so
    the names follow the installed version)."""
    try:
        utils = importlib.import_module("faster_whisper.utils")
    except ModuleNotFoundError as exc:
        raise MissingDependencyError(exc.name or "faster_whisper", "cpu") from exc
    return dict(utils._MODELS)


def origin_of(kind: str, value: str) -> Origin:
    """Which of the three kinds of value ``value`` is, for a ``kind`` model (no file is read;
    a path is looked up only to see whether it exists).  Unknown values are a ModelError
    naming the forms a value may take."""
    if f"{kind}.{value}" in catalog.load_catalog():
        return "catalog"
    if value.startswith(("/", "~", ".")) or Path(value).expanduser().exists():
        return "path"
    if value.endswith((".gguf", ".onnx")) and ":" not in value:
        return "path"
    if _REPO.fullmatch(value.split(":", 1)[0]):
        return "hub"
    if (kind == "stt" and value in whisper_names()) or (kind == "tts" and _PIPER_NAME.fullmatch(value)):
        return "hub"
    names = sorted(s.name for s in catalog.load_catalog().values() if s.kind == kind)
    forms = {
        "stt": "a faster-whisper name (tiny.en, small, large-v3-turbo...) or ORG/REPO",
        "llm": "ORG/REPO:FILE.gguf or ORG/REPO:QUANT",
        "tts": "a Piper voice name (en_US-lessac-medium) or ORG/REPO:FILE.onnx",
        "embed": "ORG/REPO of a sentence-transformers BERT model",
    }.get(kind, "ORG/REPO:FILE.onnx")
    raise ModelError(f"unknown {kind} model {value!r}: not a catalog name ({', '.join(names)}), an existing path, or a hub id ({forms})")


def hub_ref(kind: str, value: str) -> HubRef:
    """The repository and file a ``kind`` hub id names (see the module docstring)."""
    if kind in ("stt", "embed"):  # models that are a whole repository's folder
        names = whisper_names() if kind == "stt" else {}
        if value in names:
            return HubRef(names[value])
        if ":" in value:
            what = "a Whisper model" if kind == "stt" else "a sentence-transformers model"
            raise ModelError(f"{SETTINGS[kind]} {value!r}: {what} is a whole repository (ORG/REPO), not a file in one")
        return HubRef(value)
    if kind == "tts" and (m := _PIPER_NAME.fullmatch(value)):
        return HubRef(PIPER_VOICES, piper_voice_file(value, m))
    repo, _, rest = value.partition(":")
    suffix = _SUFFIX[kind]
    if not rest:
        return HubRef(repo, suffix=suffix)
    if rest.endswith(suffix):
        return HubRef(repo, file=rest)
    if kind == "llm":
        return HubRef(repo, pattern=rest, suffix=suffix)
    raise ModelError(f"{SETTINGS[kind]} {value!r}: name a {suffix} file in the repository (ORG/REPO:FILE{suffix})")


def is_piper_voice(value: str) -> bool:
    """Whether ``value`` is a Piper voice's upstream name (``LANG_REGION-VOICE-QUALITY``)."""
    return _PIPER_NAME.fullmatch(value) is not None


def piper_voice_file(name: str, match: re.Match[str] | None = None) -> str:
    """The path of Piper voice ``name`` (``en_US-lessac-medium``) in ``rhasspy/piper-voices``:
    ``en/en_US/lessac/medium/en_US-lessac-medium.onnx``."""
    m = match or _PIPER_NAME.fullmatch(name)
    if m is None:
        raise ModelError(f"tts.model {name!r} is not a Piper voice name (LANG_REGION-VOICE-QUALITY, for example en_US-lessac-medium)")
    return f"{m['lang']}/{m['lang']}_{m['region']}/{m['voice']}/{m['quality']}/{name}.onnx"


def hub_cache() -> Path:
    """huggingface_hub's cache folder, read from the environment now (as huggingface_hub reads
    it at import): ``HF_HUB_CACHE``, else ``HF_HOME/hub``, else ``$XDG_CACHE_HOME/huggingface/hub``."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache")
    home = os.environ.get("HF_HOME") or os.path.join(xdg, "huggingface")
    return Path(home).expanduser() / "hub"


def snapshot_dir(repo: str, cache: Path | None = None, revision: str = "main") -> Path | None:
    """The cached snapshot of ``repo`` at ``revision`` (``refs/main`` names its commit), or None."""
    root = (cache or hub_cache()) / f"models--{repo.replace('/', '--')}"
    ref = root / "refs" / revision
    commit = ref.read_text().strip() if ref.is_file() else revision
    folder = root / "snapshots" / commit
    return folder if folder.is_dir() else None


def cached_repos(cache: Path | None = None) -> list[tuple[str, int]]:
    """Every model repository in the hub cache with the bytes its files take (``[]`` when there
    is no cache); read from the cache's layout, without huggingface_hub."""
    root = cache or hub_cache()
    if not root.is_dir():
        return []
    out = []
    for folder in sorted(root.glob("models--*")):
        size = sum(p.stat().st_size for p in (folder / "blobs").glob("*") if p.is_file())
        if size == 0:  # a cache built of links to files elsewhere (no blobs): count what the snapshots point at
            size = sum(p.stat().st_size for p in (folder / "snapshots").rglob("*") if p.is_file())
        out.append((folder.name.removeprefix("models--").replace("--", "/"), size))
    return out


def pull_command(value: str) -> str:
    return f"voiceagent models pull {value}"


def _from_hub(kind: str, value: str, label: str) -> tuple[Path, str]:
    ref = hub_ref(kind, value)
    cache = hub_cache()
    missing = f"{label} is not in the Hugging Face cache ({cache}: no {{what}}); fetch it with: {pull_command(value)}"
    snapshot = snapshot_dir(ref.repo, cache)
    if snapshot is None:
        raise ModelError(missing.format(what=ref.repo))
    if ref.folder:
        return snapshot, ref.repo
    if ref.file:
        path = snapshot / ref.file
        if not path.exists():
            raise ModelError(missing.format(what=f"{ref.repo}/{ref.file}"))
        return path, ref.repo
    found = sorted(p for p in snapshot.rglob(f"*{ref.suffix}") if ref.pattern.lower() in p.name.lower())
    # A split GGUF is loaded from its first part; llama.cpp finds the others beside it.
    firsts = [p for p in found if not re.search(r"-\d{5}-of-\d{5}\.gguf$", p.name) or "-00001-of-" in p.name]
    if len(firsts) == 1:
        return firsts[0], ref.repo
    if not firsts:
        raise ModelError(missing.format(what=f"{ref.suffix} file matching {ref.pattern!r} in {ref.repo}"))
    names = ", ".join(str(p.relative_to(snapshot)) for p in firsts[:6])
    raise ModelError(f"{label}: {len(firsts)} cached files match in {ref.repo} ({names}); name one (ORG/REPO:FILE)")


def _catalog_location(spec: ModelSpec, cache_dir: Path) -> Path:
    """A catalog model's file or folder, joined once into ``cache_dir`` if split (blocking)."""
    if spec.kind == "stt":
        # A split Whisper's model.bin is joined beside copies of its small files: that folder.
        return catalog.prepare(spec, cache_dir).parent if spec.parts else catalog.locate(spec, "model_dir")
    if spec.parts:
        return catalog.prepare(spec, cache_dir)
    return catalog.locate(spec, "model")


def resolve(kind: str, value: str, cache_dir: Path | None = None, setting: str = "") -> ModelSource:
    """``value`` of a ``kind`` model setting (``setting``, default :data:`SETTINGS`'s) as a local
    location; a path or hub model is checked for the kind of model its backend loads
    (:func:`voiceagent.models.checks.check`).

    A catalog model that is split is joined into ``cache_dir`` (default: the default
    ``cache_dir`` setting's) on first use (blocking: seconds, done once); paths and hub ids are
    only looked up.  Never downloads.  Every failure is one
    line (:class:`ModelError`) that names the setting and its value.
    """
    setting = setting or SETTINGS[kind]
    origin = origin_of(kind, value)
    label = f"{setting} {value!r}"
    spec: ModelSpec | None = None
    repo = ""
    if origin == "catalog":
        spec = catalog.get_spec(kind, value)
        path = _catalog_location(spec, cache_dir or Config().cache_path)
    elif origin == "path":
        path = Path(value).expanduser()
        if not path.exists():
            raise ModelError(f"{label}: no such file or folder: {path}")
    else:
        path, repo = _from_hub(kind, value, label)
    if origin != "catalog":
        # A catalog model is the kind its entry says and whole by its sha256 (`voiceagent models
        # verify`); one that fails to load anyway gets the loader's message and the catalog's fix.
        check(kind, path, label)
    return ModelSource(kind=kind, setting=setting, value=value, origin=origin, path=path, spec=spec, repo=repo)
