#!/usr/bin/env bash
# The whole check: set-up (idempotent, seconds when already done), lint, types, tests.
# VOICEAGENT_TEST_PROFILE=NAME runs the real-model tests on that profile's models and endpointing
# (tests/profile.py); the set-up then installs what the profile needs.
set -euo pipefail
cd "$(dirname "$0")/.."
VOICEAGENT_PROFILE=${VOICEAGENT_TEST_PROFILE:-${VOICEAGENT_PROFILE:-}} bash scripts/setup.sh
V=.venv/bin
echo "[test] ruff"; $V/ruff check .
echo "[test] ruff format --check"; $V/ruff format --check --quiet .
echo "[test] mypy --strict voiceagent"; $V/mypy voiceagent
if [ $# -gt 0 ]; then  # a selection of tests: run as asked
  echo "[test] pytest $*"; exec $V/python -m pytest -q -p no:cacheprovider "$@"
fi
# Three workers by default: the tests that measure the machine (marked serial) run alone first;
# then the unit and environment tests (fakes on real threads, no models) on 2 workers, away from
# the models' load, whose deadlines they would otherwise share; then the rest on 3 workers
# (pytest-xdist, a file per worker): most of those wait on audio paced in real time, so on a
# 2-core machine the whole takes about 16 minutes from a fresh clone instead of about 20
# (docs/operations.md).  VOICEAGENT_TEST_WORKERS=1 runs everything in one process.
workers=${VOICEAGENT_TEST_WORKERS:-3}
if [ "$workers" -gt 1 ]; then
  echo "[test] pytest -m serial"; $V/python -m pytest -q -p no:cacheprovider -m serial
  echo "[test] pytest tests/unit tests/env -m 'not serial' -n 2"
  $V/python -m pytest -q -p no:cacheprovider -m "not serial" -n 2 tests/unit tests/env
  echo "[test] pytest -m 'not serial' -n $workers (the rest)"
  # One LLM thread per worker: llama.cpp spins while it waits for its threads, and three workers
  # spinning two each on two cores spent half their CPU waiting (tests/profile.py).
  VOICEAGENT_LLM__THREADS=${VOICEAGENT_LLM__THREADS:-1} $V/python -m pytest -q -p no:cacheprovider -m "not serial" -n "$workers" --dist loadfile --ignore=tests/unit --ignore=tests/env
else
  echo "[test] pytest"; $V/python -m pytest -q -p no:cacheprovider
fi
