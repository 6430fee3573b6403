#!/usr/bin/env bash
# Runs the README's test command (between the test-command markers), exactly as written.
set -euo pipefail
cd "$(dirname "$0")/.."
cmd=$(sed -n '/<!-- test-command -->/,/<!-- \/test-command -->/p' README.md | grep -v '^<!--' | grep -v '^```' | grep -v '^$')
[ -n "$cmd" ] || { echo "README.md has no test command between the markers"; exit 1; }
echo "+ $cmd"
bash -c "$cmd"
