"""Shared test fixtures.

* ``speech`` — the spoken fixtures from ``scripts/make_fixtures.py`` (espeak-ng), made once.
* ``engines`` — the real packaged models, loaded once per test run (integration tests only).
* ``run`` — run a coroutine to completion with a deadline (no pytest-asyncio needed).

Servers the tests start as processes (``voiceagent serve``, the scripts) run the ``fast``
profile, the defaults' models, unless the environment names another: the default ``auto`` would
choose by what this machine has installed and measures, and the tests must not depend on that
(tests/integration/test_auto_profile.py starts ``auto`` itself).

Timing in tests is never a bare sleep: tests wait for events with a deadline, and deadlines are
multiplied by ``VOICEAGENT_TEST_TIMEOUT_SCALE`` (default 1) on slow machines.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.profile import profile_config

ROOT = Path(__file__).resolve().parent.parent
T = TypeVar("T")
os.environ.setdefault("VOICEAGENT_PROFILE", "fast")
SCALE = float(os.environ.get("VOICEAGENT_TEST_TIMEOUT_SCALE", "1"))


def _load_script(name: str) -> Any:
    return importlib.import_module(f"scripts.{name}")


make_fixtures = _load_script("make_fixtures")


@pytest.fixture(scope="session")
def speech() -> dict[str, Path]:
    """Name → WAV path of every spoken fixture."""
    return make_fixtures.make_all(ROOT / ".cache" / "fixtures")  # type: ignore[no-any-return]


@pytest.fixture(scope="session")
def fixture_specs() -> dict[str, Any]:
    return make_fixtures.FIXTURES  # type: ignore[no-any-return]


@pytest.fixture(scope="session")
def engines() -> Iterator[Any]:
    from voiceagent.backends.registry import load_engines, warm_up

    config = profile_config()
    eng = load_engines(config)
    warm_up(eng, config)
    yield eng
    eng.close()


@pytest.fixture
def run() -> Callable[..., Any]:
    def _run(coro: Coroutine[Any, Any, T], timeout: float = 60.0) -> T:
        return asyncio.run(asyncio.wait_for(coro, timeout * SCALE))

    return _run
