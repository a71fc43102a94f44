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

On several workers (scripts/test.sh) the files with the longest tests are collected first
(:data:`LONGEST_FIRST`), so that none of them starts when the other workers are nearly done.
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

LONGEST_FIRST = (
    "tests/integration/test_realtime.py",
    "tests/integration/test_faults.py",
    "tests/integration/test_cli.py",
    "tests/integration/test_context.py",
    "tests/integration/test_concurrency.py",
    "tests/integration/test_tools.py",
    "tests/integration/test_browser.py",
    "tests/integration/test_agents_sdk.py",
    "tests/integration/test_shutdown.py",
    "tests/integration/test_talk.py",
    "tests/integration/test_llm_fallback.py",
    "tests/integration/test_own_models.py",
    "tests/integration/test_mcp.py",
    "tests/integration/test_pauses.py",
    "tests/integration/test_network.py",
    "tests/integration/test_twilio.py",
    "tests/integration/test_webrtc.py",
    "tests/integration/test_observability.py",
    "tests/integration/test_context_shift.py",
    "tests/integration/test_protocol.py",
    "tests/integration/test_semantic_cache.py",
)
"""The test files that take longest (37-117 s each on three workers of a 2-core machine, their
tests' durations summed: ``pytest -m "not serial" -n 3 --durations=0``), longest first.  pytest-xdist
hands a worker the next file whenever it is nearly idle; by default it orders the files by how
many tests they hold, which puts these (few, long tests) last, and the run waits for the one that
started last.  A file missing here only runs later; the order never changes what a test asserts."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On an xdist worker: :data:`LONGEST_FIRST` first, in that order, then the rest as collected
    (scripts/test.sh passes ``--no-loadscope-reorder`` so that xdist keeps this order)."""
    if not hasattr(config, "workerinput"):
        return
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))


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
