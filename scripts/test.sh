#!/usr/bin/env bash
# The whole check: set-up (idempotent, seconds when already done), lint, types, tests.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
V=.venv/bin
echo "[test] ruff"; $V/ruff check .
echo "[test] ruff format --check"; $V/ruff format --check --quiet .
echo "[test] mypy --strict voiceagent"; $V/mypy voiceagent
echo "[test] pytest"; $V/python -m pytest -q -p no:cacheprovider "$@"
