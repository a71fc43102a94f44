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

LLM_THREADS = os.environ.get("VOICEAGENT_LLM__THREADS", "")
"""The LLM's threads when the test run sets them (scripts/test.sh: 1 while several test workers
share the machine), else the profile's.  The same variable reaches the ``serve`` processes the
tests start through their environment, so in-process engines and servers agree.  Why 1: llama.cpp
waits for its threads by spinning, and three workers each spinning two threads on two cores took
285 s of wall time and 483 s of CPU for six test files, against 175 s and 230 s with one thread
(docs/operations.md)."""


SERVE_PROFILE = PROFILE or "fast"
"""The profile of the tests' ``voiceagent serve`` processes that are not about choosing one: the
test run's, else ``fast`` (the defaults' models, as the in-process engines).  Not ``auto``, which
on a machine busy with the suite's other workers measures and loads every installed profile in
turn before it settles (three model loads where one does)."""


def profile_config(overrides: Mapping[str, str] | None = None) -> Config:
    """The test run's profile (or the defaults) and its :data:`LLM_THREADS` under ``overrides``
    (dotted keys, string values); never the caller's other environment or config file."""
    run = {"profile": PROFILE} if PROFILE else {}
    if LLM_THREADS:
        run["llm.threads"] = LLM_THREADS
    return load_config(env={}, overrides={**run, **(overrides or {})})
