"""A set-up leaves a clean environment (issue #33): ``pip check`` finds no broken requirement in
``.venv``, and the install that scripts/setup.sh last ran (kept in ``.venv/.voiceagent-setup.log``)
printed no ERROR and no warning.

The one kind of warning left out is pip's about a location *this machine's own pip configuration*
names (``pip config list``) that does not exist: it comes from the machine, not from the project,
and a user's machine without that configuration never prints it.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

VENV = Path(sys.prefix)
LOG = VENV / ".voiceagent-setup.log"


def _pip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True, timeout=120)


def _configured_locations() -> list[str]:
    """Every URL or path in this machine's pip configuration (index URLs, find-links)."""
    return [loc for line in _pip("config", "list").stdout.splitlines() for loc in re.findall(r"(?:file|https?)://[^\s']+|/[^\s']+", line)]


def _ours(line: str, machine: list[str]) -> bool:
    """A line that is an error or a warning the project's set-up is answerable for."""
    if not re.match(r"\s*(ERROR|WARNING|error|warning)\b", line):
        return False
    ignored = re.match(r"\s*WARNING: Location '([^']+)' is ignored", line)
    return not (ignored and any(ignored.group(1).startswith(loc.rstrip("/")) for loc in machine))


def test_pip_check_finds_no_broken_requirement() -> None:
    proc = _pip("check")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_last_install_printed_no_error_and_no_warning_of_ours() -> None:
    assert LOG.is_file(), f"{LOG} is missing: run bash scripts/setup.sh (an environment set up before the log existed re-installs once)"
    text = LOG.read_text()
    assert "installing Python packages" in text and "unpacked " in text, text[-2000:]  # the log of a whole install
    machine = _configured_locations()
    assert not [line for line in text.splitlines() if _ours(line, machine)]


def test_the_filter_keeps_what_the_project_would_be_answerable_for() -> None:
    # The check above can fail: the resolver's complaint about a carrier installed whole, and a
    # warning about a location no configuration names, are both ours.
    machine = ["file:///opt/pypi-more/simple"]
    assert _ours("ERROR: pip's dependency resolver does not currently take into account all the packages that are installed.", machine)
    assert _ours("WARNING: Location 'file:///elsewhere/simple/x/' is ignored: it is neither a file nor a directory.", machine)
    assert not _ours("WARNING: Location 'file:///opt/pypi-more/simple/jinja2/' is ignored: it is neither a file nor a directory.", machine)
    assert not _ours("[setup] unpacked /x/silero_vad.onnx", machine)
