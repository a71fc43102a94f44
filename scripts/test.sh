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
workers=${VOICEAGENT_TEST_WORKERS:-4}
if [ $# -gt 0 ] || [ "$workers" -le 1 ]; then  # else beside the serial tests, below
  echo "[test] mypy --strict voiceagent"; $V/mypy voiceagent
fi
if [ $# -gt 0 ]; then  # a selection of tests: run as asked
  echo "[test] pytest $*"; exec $V/python -m pytest -q -p no:cacheprovider "$@"
fi
# Two phases (docs/operations.md has the figures):
# 1. the tests that measure the machine (marked serial) run alone, and beside them, at the lowest
#    CPU priority: mypy (12 s of CPU), then on 2 workers the tests whose outcome does not hang
#    on keeping up with real time (marked unpaced: model start-ups, context windows, batch
#    decodes), then the unit and environment tests (fakes on real threads, no models; their
#    deadlines tripled, below): a serial test uses under one core of
#    the two, and the niced ones take what it leaves, away from the models' load of phase 2
#    (their output is printed when both sides are done);
# 2. the rest on 4 workers (pytest-xdist, a file per worker): most of those wait on audio paced in
#    real time, at the normal priority, since a niced real-time test falls behind its audio; with
#    the CPU-bound tests beside phase 1 they used 1.2 of the 2 cores on 3 workers, and a fourth
#    took that part from 366 to 316 s.
# VOICEAGENT_TEST_WORKERS=1 runs everything in one process.
if [ "$workers" -gt 1 ]; then
  # One LLM thread per worker in the parallel runs: llama.cpp spins while it waits for its
  # threads, and three workers spinning two each on two cores spent half their CPU waiting
  # (tests/profile.py).
  threads=${VOICEAGENT_LLM__THREADS:-1}
  beside() {
    local rc=0
    echo "[test] mypy --strict voiceagent (niced, beside the serial tests)"
    nice -n 19 $V/mypy voiceagent || rc=1
    echo "[test] pytest -m 'unpaced and not serial' -n 2 (niced, beside the serial tests)"
    VOICEAGENT_LLM__THREADS=$threads nice -n 19 $V/python -m pytest -q -p no:cacheprovider -m "unpaced and not serial" -n 2 \
      --dist loadfile || rc=1
    # Their deadlines (5 s for what must happen) are guards, tripled here: at the lowest priority a
    # burst of a serial test's own work (a server's model load) may hold them back for seconds.
    echo "[test] pytest tests/unit tests/env -m 'not serial' -n 2 (niced, beside the serial tests)"
    VOICEAGENT_TEST_TIMEOUT_SCALE=${VOICEAGENT_TEST_TIMEOUT_SCALE:-3} nice -n 19 \
      $V/python -m pytest -q -p no:cacheprovider -m "not serial" -n 2 tests/unit tests/env || rc=1
    return $rc
  }
  echo "[test] pytest -m serial; beside it at low priority: mypy, -m 'unpaced and not serial', then tests/unit tests/env"
  beside_log=$(mktemp)
  beside > "$beside_log" 2>&1 &
  beside_pid=$!
  trap 'pkill -P "$beside_pid" 2>/dev/null || true; kill "$beside_pid" 2>/dev/null || true; rm -f "$beside_log"' EXIT
  serial_rc=0; $V/python -m pytest -q -p no:cacheprovider -m serial || serial_rc=$?
  beside_rc=0; wait "$beside_pid" || beside_rc=$?
  cat "$beside_log"
  [ "$serial_rc" -eq 0 ] && [ "$beside_rc" -eq 0 ] || exit 1
  echo "[test] pytest -m 'not serial and not unpaced' -n $workers (the rest)"
  VOICEAGENT_LLM__THREADS=$threads $V/python -m pytest -q -p no:cacheprovider -m "not serial and not unpaced" -n "$workers" --dist loadfile \
      --ignore=tests/unit --ignore=tests/env
else
  echo "[test] pytest"; $V/python -m pytest -q -p no:cacheprovider
fi
