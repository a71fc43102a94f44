"""A Hugging Face folder from a catalog GGUF, for engines that cannot read GGUF (vLLM on CPU).

The packaged models ship as GGUF.  vLLM's CPU build cannot load GGUF, so the first use of a catalog
model with ``llm.backend = "vllm"`` converts it once with ``transformers`` (dequantised to bf16:
about 100 s and 3 GB of memory for the 0.5B, 1.3 GB on disk) into
``<cache>/hf/<name>/``.  Greedy output matched llama.cpp's in the check recorded in MODELS.md.
A finished conversion is marked by a stamp file, so an interrupted one is redone, not used.
"""

from __future__ import annotations

import logging
import shutil
import time
from pathlib import Path

from voiceagent.errors import MissingDependencyError
from voiceagent.models.catalog import get_spec, prepare

__all__ = ["hf_model_dir"]

log = logging.getLogger(__name__)

_STAMP = ".voiceagent-converted"


def hf_model_dir(name: str, cache_dir: Path) -> Path:
    """The Hugging Face folder for catalog LLM ``name``, converting its GGUF on first use (blocking).

    Raises :class:`MissingDependencyError` when ``transformers``, ``gguf`` or ``torch`` is missing.
    """
    spec = get_spec("llm", name)
    out = cache_dir / "hf" / name
    stamp = out / _STAMP
    gguf = prepare(spec, cache_dir)
    if stamp.exists() and stamp.read_text().strip() == gguf.name:
        return out
    try:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ModuleNotFoundError as exc:  # pragma: no cover - depends on the environment
        raise MissingDependencyError(exc.name or "transformers", "vllm") from exc
    log.info("converting %s to a Hugging Face folder for vLLM (once; about 100 s)", gguf.name)
    t0 = time.perf_counter()
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.bfloat16)
    # transformers refuses to save a model it thinks is GGUF-quantised; the weights are already
    # dequantised in memory, so the quantisation marks are dropped before saving.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(str(tmp))
    tokenizer.save_pretrained(str(tmp))
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    stamp.write_text(gguf.name + "\n")
    log.info("converted %s in %.0f s: %s", name, time.perf_counter() - t0, out)
    return out
