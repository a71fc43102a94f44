"""Named profiles: a set of settings chosen with one word (``--profile NAME`` or ``profile = "NAME"``).

A profile sits between the defaults and everything the user sets: a key given in the TOML file,
the environment or ``--set`` wins over the profile's value for it.

Three CPU profiles trade speed for answer quality.  Each names every model and the endpointing
settings explicitly, so that a profile keeps meaning the same thing if the defaults change:

==============  ==================  ==================  ==============================================================
profile         STT                 LLM                 notes
==============  ==================  ==================  ==============================================================
``fast``        ``whisper-tiny``    ``qwen2.5-0.5b``    the CPU defaults: Silero VAD, Smart Turn v3, Piper
                                                        ``joe``; ``vad.stop_ms`` 160, ``turn.silence_ms`` 500,
                                                        ``turn.complete_ms`` 400, ``turn.threshold`` 0.5,
                                                        ``turn.incomplete_ms`` 1500, ``turn.text_threshold``
                                                        0.003, ``turn.doubt_ms`` 1000; the LLM converted to
                                                        IQ4_NL (``llm.quant``)
``balanced``    ``whisper-tiny``    ``qwen2.5-1.5b``    better answers (the 1.5B: about half the 0.5B's speed, about
                                                        290 ms later to the first audio on the eval); for one
                                                        conversation at a time: four at once wait 2.9 s at the
                                                        median (``fast``: 1.2 s); opt-in, 1.1 GB:
                                                        ``VOICEAGENT_PROFILE=balanced bash scripts/setup.sh``
``quality``     ``whisper-base``    ``qwen2.5-1.5b``    Whisper base with beam search (``stt.beam_size`` 5): WER
                                                        11.3 % against tiny's 14.6 % on the eval's clips, for
                                                        about 3× tiny's decode time (greedy base was no better
                                                        than tiny); the session's tool descriptions
                                                        as Whisper's prompt (``stt.tools_prompt``);
                                                        partials from Whisper tiny every 400 ms
                                                        (``stt.partial_model``);
                                                        installed with the 1.5B by
                                                        ``VOICEAGENT_PROFILE=quality bash scripts/setup.sh``
==============  ==================  ==================  ==============================================================

``balanced`` and ``quality`` keep ``fast``'s VAD, turn model, voice and endpointing; their LLM
runs as shipped (``llm.quant = "shipped"``).  A profile
whose model is not installed stops start-up with one line naming the command that installs it
(:func:`voiceagent.models.catalog.require_installed`).

* ``gpu`` — real-size models, every model stage that gains from a GPU on one CUDA device in this
  one process: Whisper ``large-v3-turbo`` in float16 (faster-whisper), the turn model and Piper on
  onnxruntime's CUDA provider, and ``Qwen/Qwen2.5-7B-Instruct`` on vLLM's engine with its prefix
  cache (``llm.gpu_memory_utilization`` of the device; the embedded model on the CPU is its
  fallback).  The VAD stays on the CPU, where it is faster (docs/gpu_probe.md).  Start-up checks
  the device, the CUDA builds of the libraries and the memory budget before loading any model,
  and stops with one line naming what is missing (voiceagent.backends.gpu).  A preferred model
  that is not in the Hugging Face cache falls back to the next in :data:`PREFERRED`, with one
  line naming the model and the command that fetches it (voiceagent.backends.auto_profile.settle).

  GPU memory each needs (weights from the parameter counts at 2 bytes each; the rest is
  working memory and, for the LLM, its KV cache: 28 layers x 4 KV heads x 128 x 2 x 2 bytes =
  57 KB a token, 0.47 GB for one 8,192-token conversation):

  ==========================  ==========  ===========================================
  model                       weights     download (``voiceagent models pull NAME``)
  ==========================  ==========  ===========================================
  ``large-v3-turbo`` fp16     1.6 GB      1.6 GB
  ``distil-large-v3`` fp16    1.5 GB      1.5 GB
  ``Qwen/Qwen2.5-7B-Instruct``  15.2 GB   15.2 GB (bf16 safetensors)
  ``Qwen/Qwen2.5-3B-Instruct``  6.2 GB    6.2 GB
  Smart Turn, Piper (CUDA)    < 0.1 GB    packaged
  ==========================  ==========  ===========================================

  So the whole preferred stack wants a 24 GB card at least (``llm.gpu_memory_utilization``
  0.8 of it for vLLM: weights plus about 3 GB of KV cache, 50 conversations of 1,000 tokens).

``auto`` (the default) is not a set of settings: at start-up it picks one of :data:`AUTO_ORDER`
by measurement (voiceagent.backends.auto_profile).
"""

from __future__ import annotations

from typing import Any

__all__ = ["AUTO_ORDER", "PREFERRED", "PROFILES", "profile_tree"]

# The models and endpointing of the embedded CPU stack (docs/decisions/profiles.md).  Written
# out rather than read from the config defaults: ``fast`` must not drift.
_FAST: dict[str, str] = {
    "vad.model": "silero",
    "stt.model": "whisper-tiny",
    "turn.model": "smart-turn-v3",
    "llm.model": "qwen2.5-0.5b",
    "llm.fallback_model": "qwen2.5-0.5b",
    "tts.model": "joe",
    "vad.stop_ms": "160",
    "turn.silence_ms": "500",
    "turn.complete_ms": "400",
    "turn.threshold": "0.5",
    # Against the eval's false cut-offs: a transcript that stops on
    # "of", "the", "and"... waits for more words.
    "turn.incomplete_ms": "1500",
    # The LLM's doubt that the words end a sentence holds the turn for 1 s of silence
    # ("How many wheels ... does a bicycle have?"); p50 unchanged in the spoken eval.
    "turn.text_threshold": "0.003",
    "turn.doubt_ms": "1000",
    # The 0.5B's weights converted once to IQ4_NL: faster per token at about the same answers
    # (docs/decisions/llm-weights.md).
    "llm.quant": "iq4_nl",
}

PROFILES: dict[str, dict[str, str]] = {
    "fast": dict(_FAST),
    # Whisper tiny with the 1.5B: base with the 0.5B was slower than fast and no more accurate
    # (base hears the synthetic voices no better; docs/decisions/profiles.md).
    # The 1.5B runs as shipped: its file is real Q4_K, and IQ4_NL was no faster per token
    # (docs/decisions/llm-weights.md).
    "balanced": {**_FAST, "llm.model": "qwen2.5-1.5b", "llm.quant": "shipped"},
    # Whisper base decodes with beam search (5), which helps base and not tiny, so fast and balanced
    # stay greedy (docs/decisions/whisper-beam.md).  The tools' descriptions as Whisper's prompt
    # help base on tool requests and hurt tiny (docs/decisions/stt-tools-prompt.md).
    "quality": {
        **_FAST,
        "stt.model": "whisper-base",
        "stt.beam_size": "5",
        "stt.tools_prompt": "true",
        # Partials from tiny, every 400 ms of speech: they only feed the 1.5B's prefill, which then
        # holds more of the user's words when they stop (docs/decisions/partial-model.md).
        "stt.partial_model": "whisper-tiny",
        "stt.partial_interval_ms": "400",
        "llm.model": "qwen2.5-1.5b",
        "llm.quant": "shipped",
    },
    "gpu": {
        "stt.model": "large-v3-turbo",
        "llm.model": "Qwen/Qwen2.5-7B-Instruct",
        "stt.device": "cuda",
        "stt.compute_type": "float16",
        "turn.device": "cuda",
        "tts.device": "cuda",
        "vad.device": "cpu",
        "llm.backend": "vllm",
    },
}


PREFERRED: dict[str, dict[str, tuple[str, ...]]] = {
    "gpu": {
        "stt.model": ("large-v3-turbo", "distil-large-v3", "whisper-tiny"),
        "llm.model": ("Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-3B-Instruct", "qwen2.5-0.5b"),
    },
}
"""A profile's models in order of preference: the first that is installed or cached is used (the
profile's own value is the first).  The last of each is packaged, so the profile always starts."""

AUTO_ORDER = ("quality", "balanced", "fast")
"""The CPU profiles ``profile = "auto"`` chooses among, most accurate first (the spoken eval,
docs/decisions/profiles.md: ``quality`` answers best, ``fast`` is quickest)."""


def profile_tree(name: str) -> dict[str, Any]:
    """The profile's settings as a nested table (unknown names are left to Config's check)."""
    tree: dict[str, Any] = {}
    for dotted, value in PROFILES.get(name, {}).items():
        section, key = dotted.split(".")
        tree.setdefault(section, {})[key] = value
    return tree
