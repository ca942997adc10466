#!/usr/bin/env bash
# End-to-end tests of `pagedlm serve` with the official OpenAI and Anthropic SDKs, as CTest
# runs them (test e2e_openai): installs the locked npm packages when
# node_modules is missing or older than package-lock.json, then runs every
# *.test.mjs with Node's built-in test runner. Needs PAGEDLM_BIN (the pagedlm
# binary under test) and PAGEDLM_TESTDATA (the folder with models/).
set -euo pipefail
cd "$(dirname "$0")"
: "${PAGEDLM_BIN:?PAGEDLM_BIN must name the pagedlm binary}"
: "${PAGEDLM_TESTDATA:?PAGEDLM_TESTDATA must name the test data folder}"
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "run.sh: node and npm are needed (scripts/install-deps --test installs them)" >&2
  exit 1
fi
if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  npm ci --no-audit --no-fund --loglevel=error
fi
exec node --test ./*.test.mjs
