"""``llm.quant``: the packaged GGUF converted once into the cache, and made again only when its
source, type or llama.cpp changes.  llama.cpp's quantizer is replaced at its seam: the real one
takes about a minute (the default set-up runs it; every integration test then loads its output)."""

from __future__ import annotations

import ctypes
import os
from pathlib import Path
from typing import Any

import pytest

from voiceagent.backends import llama_cpp as backend
from voiceagent.config import LLM_QUANTS, LlmConfig
from voiceagent.errors import ConfigError
from voiceagent.models import catalog


class FakeQuantizer:
    def __init__(self, rc: int = 0) -> None:
        self.calls: list[tuple[str, str, int]] = []
        self.rc = rc

    def __call__(self, src: bytes, dst: bytes, params: Any) -> int:
        ftype = ctypes.cast(params, ctypes.POINTER(backend.llama_cpp.llama_model_quantize_params)).contents.ftype
        self.calls.append((src.decode(), dst.decode(), int(ftype)))
        Path(dst.decode()).write_bytes(b"converted " + Path(src.decode()).read_bytes()[:4])
        return self.rc


@pytest.fixture
def source(tmp_path: Path) -> Path:
    """The packaged GGUF (a file inside an installed package: nothing may be written beside it)."""
    path = tmp_path / "site-packages" / "model-q4_k_m.gguf"
    path.parent.mkdir()
    path.write_bytes(b"GGUF and weights")
    return path


def cache(source: Path) -> Path:
    return source.parent.parent / "cache"


def test_converts_once_and_reuses_the_result(monkeypatch: pytest.MonkeyPatch, source: Path) -> None:
    quantizer = FakeQuantizer()
    monkeypatch.setattr(backend.llama_cpp, "llama_model_quantize", quantizer)
    out = backend.converted(source, "iq4_nl", cache(source))
    assert out == cache(source) / "models" / "model-q4_k_m.iq4_nl.gguf"
    assert out.read_bytes() == b"converted GGUF"
    assert [c[2] for c in quantizer.calls] == [backend.llama_cpp.LLAMA_FTYPE_MOSTLY_IQ4_NL]
    assert backend.converted(source, "iq4_nl", cache(source)) == out
    assert len(quantizer.calls) == 1  # the stamp matched: not converted again
    assert sorted(p.name for p in source.parent.iterdir()) == [source.name]  # the package is untouched
    # Another type is a file of its own.
    assert backend.converted(source, "q4_0", cache(source)).name == "model-q4_k_m.q4_0.gguf"
    assert quantizer.calls[-1][2] == backend.llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_0


def test_a_changed_source_is_converted_again(monkeypatch: pytest.MonkeyPatch, source: Path) -> None:
    quantizer = FakeQuantizer()
    monkeypatch.setattr(backend.llama_cpp, "llama_model_quantize", quantizer)
    backend.converted(source, "iq4_nl", cache(source))
    source.write_bytes(b"GGUF, joined again")
    st = source.stat()
    os.utime(source, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    assert backend.converted(source, "iq4_nl", cache(source)).read_bytes() == b"converted GGUF"
    assert len(quantizer.calls) == 2


def test_a_failed_conversion_raises_and_leaves_no_file(monkeypatch: pytest.MonkeyPatch, source: Path) -> None:
    monkeypatch.setattr(backend.llama_cpp, "llama_model_quantize", FakeQuantizer(rc=1))
    with pytest.raises(RuntimeError, match="could not convert"):
        backend.converted(source, "iq4_nl", cache(source))
    assert sorted(p.name for p in source.parent.iterdir()) == [source.name]
    assert list((cache(source) / "models").iterdir()) == []


def test_every_configurable_quant_has_a_llama_cpp_type() -> None:
    # config.LLM_QUANTS (what llm.quant accepts) and the backend's table name the same types.
    assert set(backend._FTYPES) == set(LLM_QUANTS) - {"shipped"}


def test_shipped_is_the_packaged_file_and_unknown_types_are_refused(monkeypatch: pytest.MonkeyPatch, source: Path) -> None:
    monkeypatch.setattr(catalog, "prepare", lambda spec, cache: source)  # what model_source joins with
    quantizer = FakeQuantizer()
    monkeypatch.setattr(backend.llama_cpp, "llama_model_quantize", quantizer)
    assert backend.gguf_path("qwen2.5-0.5b", cache(source), "shipped") == source
    assert quantizer.calls == []
    with pytest.raises(ValueError, match="unknown"):
        backend.converted(source, "q2_k", cache(source))
    with pytest.raises(ConfigError, match=r"llm\.quant"):
        LlmConfig(quant="q2_k")
