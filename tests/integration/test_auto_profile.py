"""``profile = "auto"``, the default, as a user meets it: ``voiceagent serve`` with no profile
chooses among the profiles installed here by measuring them, says which in one line, serves on
it, and ``voiceagent models`` shows the choice afterwards.

On a default set-up only ``fast`` is installed; with ``VOICEAGENT_PROFILE=quality bash
scripts/setup.sh`` the 1.5B comes too and the choice is measured (tests/unit/test_auto_profile.py
holds which profile wins for which cost)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from benchmarks.common.serve import ServeProcess
from voiceagent import cli
from voiceagent.backends import auto_profile
from voiceagent.config import load_config

# It measures this machine's speed: run alone, not beside other tests (scripts/test.sh).
pytestmark = [pytest.mark.models, pytest.mark.serial]


def test_serve_with_no_profile_chooses_an_installed_one_says_why_and_serves_on_it(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("VOICEAGENT_PROFILE", "VOICEAGENT_CONFIG"):
        monkeypatch.delenv(name, raising=False)  # conftest pins the tests' servers to fast: not this one
    installed = [
        name
        for name, _ in auto_profile.plan(
            load_config(env={}), frozenset(), lambda p: load_config(env={}, overrides={"profile": p}), cli._require_models
        ).candidates
    ]
    # Measured afresh: a choice this machine remembers would skip the profiles found too slow
    # before (tests/unit/test_auto_profile.py tests that), and this test checks the measurement.
    server = ServeProcess({"server.auto_remeasure": "true"}, log_lines=None)
    try:
        # The choice; a line about the profiles not installed may come before it.
        lines = [line for line in server.log if re.search(r"profile auto: \w+, ", line)]
        assert len(lines) == 1, list(server.log)[-20:]
        # (A busy machine's measurement is said after the figures.)
        m = re.search(
            r"profile auto: (\w+), (.*) \(predicted end of speech to first audio on this machine: ([^)]*)\)(; measured while .*)?$",
            lines[0].strip(),
        )
        assert m is not None, lines[0]
        chosen, why, figures, _ = m.groups()
        assert chosen in installed and server.ready["profile"] == chosen
        if installed == ["fast"]:
            # Alone, it is chosen whether or not it fits the budget on this machine today (a slow
            # day measured it over); the line says which, and it must agree with its own figure.
            predicted = re.fullmatch(r"fast (\d+) ms", figures)
            assert predicted is not None, figures
            budget = load_config(env={}).server.turn_budget_ms
            fits = int(predicted.group(1)) <= budget
            assert why == (
                "the only installed profile" if fits else f"none fits server.turn_budget_ms {budget:.0f} ms: the quickest installed"
            ), lines[0]
        else:  # every profile tried before the chosen one was measured and named
            tried = installed[: installed.index(chosen) + 1]
            assert [f.split()[0] for f in figures.split(", ")] == tried
    finally:
        assert server.stop() == 0
    listing = subprocess.run([sys.executable, "-m", "voiceagent.cli", "models"], capture_output=True, text=True, timeout=60)
    assert listing.returncode == 0, listing.stderr
    assert f"profile auto: {chosen}, " in listing.stdout.splitlines()[-1]
