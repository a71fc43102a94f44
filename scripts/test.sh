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
# Three workers by default, in two steps.  First the unit and environment tests (fakes on real
# threads, no models) on 2 workers, away from the models' load, whose deadlines they would
# otherwise share.  Then two runs side by side: the tests that need the machine's speed (marked
# serial: a barge-in needs the voice ahead of its playback, a start-up is timed) one at a time at
# normal priority, and the rest on 3 workers (pytest-xdist, a file per worker) at the lowest
# priority (nice 19), which takes only the CPU the serial test leaves.  Most tests wait on audio
# paced in real time, so the serial part used under one core of the two, and side by side the
# whole takes about 10 minutes less than one after the other (docs/operations.md).
# VOICEAGENT_TEST_WORKERS=1 runs everything in one process.
workers=${VOICEAGENT_TEST_WORKERS:-3}
if [ "$workers" -gt 1 ]; then
  echo "[test] pytest tests/unit tests/env -m 'not serial' -n 2"
  $V/python -m pytest -q -p no:cacheprovider -m "not serial" -n 2 tests/unit tests/env
  # The serial run's report is kept and shown once the other has ended: two progress lines written
  # at once would be unreadable.
  serial_log=$(mktemp "${TMPDIR:-/tmp}/voiceagent-serial.XXXXXX")
  trap 'kill "${serial_pid:-}" 2>/dev/null || true; rm -f "$serial_log"' EXIT
  echo "[test] pytest -m serial (its report below, when the rest has run) beside pytest -m 'not serial' -n $workers (the rest, nice 19)"
  $V/python -m pytest -q -p no:cacheprovider -m serial > "$serial_log" 2>&1 &
  serial_pid=$!
  # One LLM thread per worker: llama.cpp spins while it waits for its threads, and three workers
  # spinning two each on two cores spent half their CPU waiting (tests/profile.py).
  rest=0
  VOICEAGENT_LLM__THREADS=${VOICEAGENT_LLM__THREADS:-1} nice -n 19 $V/python -m pytest -q -p no:cacheprovider -m "not serial" \
    -n "$workers" --dist loadfile --ignore=tests/unit --ignore=tests/env || rest=$?
  serial=0
  wait "$serial_pid" || serial=$?
  echo "[test] pytest -m serial"
  cat "$serial_log"
  [ "$rest" = 0 ] && [ "$serial" = 0 ] || exit 1
else
  echo "[test] pytest"; $V/python -m pytest -q -p no:cacheprovider
fi
