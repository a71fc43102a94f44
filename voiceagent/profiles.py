"""Named profiles: a set of settings chosen with one word (``--profile NAME`` or ``profile = "NAME"``).

A profile sits between the defaults and everything the user sets: a key given in the TOML file,
the environment or ``--set`` wins over the profile's value for it.

* ``gpu`` — every model stage that gains from a GPU on one CUDA device in this one process:
  faster-whisper in float16, the turn model and Piper on onnxruntime's CUDA provider, and the LLM
  on vLLM's engine (``llm.gpu_memory_utilization`` of the device; the embedded model on the CPU is
  its fallback).  The VAD stays on the CPU, where it is faster (docs/gpu_probe.md).  Start-up
  checks the device, the CUDA builds of the libraries and the memory budget before loading any
  model, and stops with one line naming what is missing (voiceagent.backends.gpu).
"""

from __future__ import annotations

from typing import Any

__all__ = ["PROFILES", "profile_tree"]

PROFILES: dict[str, dict[str, str]] = {
    "gpu": {
        "stt.device": "cuda",
        "stt.compute_type": "float16",
        "turn.device": "cuda",
        "tts.device": "cuda",
        "vad.device": "cpu",
        "llm.backend": "vllm",
    },
}


def profile_tree(name: str) -> dict[str, Any]:
    """The profile's settings as a nested table (unknown names are left to Config's check)."""
    tree: dict[str, Any] = {}
    for dotted, value in PROFILES.get(name, {}).items():
        section, key = dotted.split(".")
        tree.setdefault(section, {})[key] = value
    return tree
