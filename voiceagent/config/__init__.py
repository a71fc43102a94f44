"""Configuration: frozen dataclasses, validated at start-up.

Precedence, lowest first: the defaults below < a TOML file (``--config FILE`` or
``VOICEAGENT_CONFIG``) < environment variables ``VOICEAGENT_<SECTION>__<KEY>`` (for example
``VOICEAGENT_LLM__MODEL=smollm2-135m``; top-level keys as ``VOICEAGENT_CACHE_DIR``) < command-line
flags (``--set llm.model=smollm2-135m``, plus ``--host``/``--port``).

Unknown keys, wrong types and out-of-range values raise :class:`~voiceagent.errors.ConfigError`
with the dotted key in the message, before any model is loaded.
"""

from __future__ import annotations

from voiceagent.config.load import given_keys, load_config
from voiceagent.config.prompts import DEFAULT_EXAMPLES, DEFAULT_INSTRUCTIONS, parse_examples
from voiceagent.config.schema import (
    LLM_QUANTS,
    OPENAI_VOICES,
    CacheConfig,
    Config,
    GpuConfig,
    LlmConfig,
    PlayoutConfig,
    ServerConfig,
    SttConfig,
    ToolsConfig,
    TtsConfig,
    TurnConfig,
    VadConfig,
)

__all__ = [
    "DEFAULT_EXAMPLES",
    "DEFAULT_INSTRUCTIONS",
    "LLM_QUANTS",
    "OPENAI_VOICES",
    "CacheConfig",
    "Config",
    "GpuConfig",
    "LlmConfig",
    "PlayoutConfig",
    "ServerConfig",
    "SttConfig",
    "ToolsConfig",
    "TtsConfig",
    "TurnConfig",
    "VadConfig",
    "given_keys",
    "load_config",
    "parse_examples",
]
