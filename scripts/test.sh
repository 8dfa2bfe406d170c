#!/usr/bin/env bash
# Install the project with its test extras (EXTRAS, default "test") into .venv, lint and type-check it,
# and run the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e ".[${EXTRAS:-test}]"
# Lint and type-check first: either failing fails the script (set -e) before any test runs.
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
set +e
.venv/bin/python -m pytest "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "pytest collected no tests: failing loudly" >&2
  exit 1
fi
exit "$rc"
