"""The configuration the integration tests start from.

By default that is the built-in defaults (the ``fast`` profile's models).  With
``VOICEAGENT_TEST_PROFILE=NAME`` it is that profile instead, so that each profile can be checked
against the same real-model tests (issue #12):

    VOICEAGENT_PROFILE=quality bash scripts/setup.sh
    VOICEAGENT_TEST_PROFILE=quality .venv/bin/python -m pytest tests/integration

A test's own settings win over the profile's, as a user's do (voiceagent.config.load_config).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from voiceagent.config import Config, load_config

PROFILE = os.environ.get("VOICEAGENT_TEST_PROFILE", "")


def profile_config(overrides: Mapping[str, str] | None = None) -> Config:
    """The test run's profile (or the defaults) under ``overrides`` (dotted keys, string values);
    never the caller's environment or config file."""
    return load_config(env={}, overrides={**({"profile": PROFILE} if PROFILE else {}), **(overrides or {})})
