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
# Three workers by default, in three phases (docs/operations.md has the figures):
# 1. the tests that measure the machine (marked serial) run alone, and beside them, at the lowest
#    CPU priority, the tests whose outcome does not hang on keeping up with real time (marked
#    unpaced: model start-ups, context windows, batch decodes) on 2 workers: a serial test uses
#    under one core of the two, and the unpaced ones take what it leaves (its output is printed
#    when both are done);
# 2. the unit and environment tests (fakes on real threads, no models) on 2 workers, away from the
#    models' load, whose deadlines they would otherwise share;
# 3. the rest on 3 workers (pytest-xdist, a file per worker): most of those wait on audio paced in
#    real time, at the normal priority, since a niced real-time test falls behind its audio.
# VOICEAGENT_TEST_WORKERS=1 runs everything in one process.
workers=${VOICEAGENT_TEST_WORKERS:-3}
if [ "$workers" -gt 1 ]; then
  # One LLM thread per worker in the parallel runs: llama.cpp spins while it waits for its
  # threads, and three workers spinning two each on two cores spent half their CPU waiting
  # (tests/profile.py).
  threads=${VOICEAGENT_LLM__THREADS:-1}
  echo "[test] pytest -m serial, and beside it at low priority -m 'unpaced and not serial' -n 2"
  unpaced_log=$(mktemp)
  VOICEAGENT_LLM__THREADS=$threads nice -n 19 $V/python -m pytest -q -p no:cacheprovider -m "unpaced and not serial" -n 2 --dist loadfile \
    > "$unpaced_log" 2>&1 &
  unpaced_pid=$!
  trap 'kill "$unpaced_pid" 2>/dev/null || true; rm -f "$unpaced_log"' EXIT
  serial_rc=0; $V/python -m pytest -q -p no:cacheprovider -m serial || serial_rc=$?
  unpaced_rc=0; wait "$unpaced_pid" || unpaced_rc=$?
  echo "[test] pytest -m 'unpaced and not serial' -n 2 (ran beside the serial tests)"; cat "$unpaced_log"
  [ "$serial_rc" -eq 0 ] && [ "$unpaced_rc" -eq 0 ] || exit 1
  echo "[test] pytest tests/unit tests/env -m 'not serial' -n 2"
  $V/python -m pytest -q -p no:cacheprovider -m "not serial" -n 2 tests/unit tests/env
  echo "[test] pytest -m 'not serial and not unpaced' -n $workers (the rest)"
  VOICEAGENT_LLM__THREADS=$threads $V/python -m pytest -q -p no:cacheprovider -m "not serial and not unpaced" -n "$workers" --dist loadfile \
    --ignore=tests/unit --ignore=tests/env
else
  echo "[test] pytest"; $V/python -m pytest -q -p no:cacheprovider
fi
