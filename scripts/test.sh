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
echo "[test] pytest"; $V/python -m pytest -q -p no:cacheprovider "$@"
