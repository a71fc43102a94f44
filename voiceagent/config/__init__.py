"""Configuration: frozen dataclasses, validated at start-up.

Precedence, lowest first: the defaults below < a TOML file (``--config FILE`` or
``VOICEAGENT_CONFIG``) < environment variables ``VOICEAGENT_<SECTION>__<KEY>`` (for example
``VOICEAGENT_LLM__MODEL=smollm2-135m``; top-level keys as ``VOICEAGENT_CACHE_DIR``) < command-line
flags (``--set llm.model=smollm2-135m``, plus ``--host``/``--port``).

Unknown keys, wrong types and out-of-range values raise :class:`~voiceagent.errors.ConfigError`
with the dotted key in the message, before any model is loaded.
"""

from __future__ import annotations

from voiceagent.config.load import *  # noqa: F403
from voiceagent.config.load import __all__ as _load
from voiceagent.config.prompts import DEFAULT_EXAMPLES, DEFAULT_INSTRUCTIONS, parse_examples
from voiceagent.config.schema import *  # noqa: F403
from voiceagent.config.schema import __all__ as _schema

__all__ = [*_schema, *_load, "DEFAULT_EXAMPLES", "DEFAULT_INSTRUCTIONS", "parse_examples"]
