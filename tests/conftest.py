"""Shared test fixtures.

* ``speech`` — the spoken fixtures from ``scripts/make_fixtures.py`` (espeak-ng), made once.
* ``engines`` — the real packaged models, loaded once per test run (integration tests only).
* ``run`` — run a coroutine to completion with a deadline (no pytest-asyncio needed); past the
  deadline it fails with where every task and thread was, and how late the deadline fired (a
  late one means the event loop was blocked).

Servers the tests start as processes (``voiceagent serve``, the scripts) run the ``fast``
profile, the defaults' models, unless the environment names another: the default ``auto`` would
choose by what this machine has installed and measures, and the tests must not depend on that
(tests/integration/test_auto_profile.py starts ``auto`` itself).

Timing in tests is never a bare sleep: tests wait for events with a deadline, and deadlines are
multiplied by ``VOICEAGENT_TEST_TIMEOUT_SCALE`` (default 1) on slow machines.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import io
import os
import sys
import threading
import time
import traceback
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


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """With ``VOICEAGENT_TEST_CPU_LOG=FILE``, each test's wall time and the CPU its process and
    its ended child processes spent meanwhile (setup and teardown included) are appended to FILE
    as one JSON line: where a 2-core run's time goes is CPU more than wall (docs/operations.md)."""
    log = os.environ.get("VOICEAGENT_TEST_CPU_LOG")
    if not log:
        yield
        return
    import json
    import resource

    def cpu() -> float:
        own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime

    began, wall, used = time.time(), time.monotonic(), cpu()
    yield
    line = {
        "test": item.nodeid,
        "wall_s": round(time.monotonic() - wall, 2),
        "cpu_s": round(cpu() - used, 2),
        "start": round(began, 2),  # with the worker: each worker's schedule, where a phase's tail lies
        "worker": os.environ.get("PYTEST_XDIST_WORKER", "main"),
    }
    with open(log, "a") as out:  # one short write per test: the workers' lines do not interleave
        out.write(json.dumps(line) + "\n")


def where_everything_is() -> str:
    """The stack of every task of the running loop and of every thread, for a deadline's failure."""
    out = io.StringIO()
    for task in asyncio.all_tasks():
        out.write(f"--- task {task.get_name()}\n")
        task.print_stack(limit=12, file=out)
    frames = sys._current_frames()
    for thread in threading.enumerate():
        frame = frames.get(thread.ident) if thread.ident is not None else None
        if frame is not None:
            out.write(f"--- thread {thread.name}\n{''.join(traceback.format_stack(frame, limit=12))}")
    return out.getvalue()


async def within(coro: Coroutine[Any, Any, T], timeout: float) -> T:
    """``coro``'s result, or a TimeoutError after ``timeout`` seconds that says where it was."""
    task = asyncio.ensure_future(coro)
    started = time.monotonic()
    done, _ = await asyncio.wait({task}, timeout=timeout)
    if task in done:
        return task.result()
    late = time.monotonic() - started - timeout
    report = where_everything_is()
    task.cancel()
    with contextlib.suppress(BaseException):  # what the cancelled scenario raises is not the news
        await task
    raise TimeoutError(f"not done within {timeout:g} s (the deadline fired {late:.1f} s late: more is a blocked event loop)\n{report}")


@pytest.fixture
def run() -> Callable[..., Any]:
    def _run(coro: Coroutine[Any, Any, T], timeout: float = 60.0) -> T:
        return asyncio.run(within(coro, timeout * SCALE))

    return _run
