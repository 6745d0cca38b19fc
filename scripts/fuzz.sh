#!/usr/bin/env bash
# Runs every Go fuzz target in the module for a short time each.
# Usage: scripts/fuzz.sh DURATION (e.g. 10s)
set -euo pipefail
dur=${1:-10s}
cd "$(dirname "$0")/.."
found=0
while IFS= read -r file; do
  pkg=./$(dirname "$file")
  for fn in $(grep -oE '^func (Fuzz[A-Za-z0-9_]+)\(f \*testing\.F\)' "$file" | sed -E 's/^func (Fuzz[A-Za-z0-9_]+).*/\1/'); do
    found=1
    echo "fuzz $pkg $fn for $dur"
    # Go's fuzz coordinator can end a run with "context deadline exceeded"
    # and no failing input when a worker is still minimising a new input at
    # the deadline on a loaded machine; that run found nothing, so it is
    # run once more. A real failure writes its input and fails at once.
    for try in 1 2; do
      if out=$(go test -run '^$' -fuzz "^${fn}\$" -fuzztime "$dur" "$pkg" 2>&1); then
        printf '%s\n' "$out" | tail -2
        break
      fi
      printf '%s\n' "$out"
      if [ "$try" = 2 ] || ! grep -q 'context deadline exceeded' <<<"$out" || grep -q 'Failing input' <<<"$out"; then
        exit 1
      fi
      echo "fuzz $pkg $fn: coordinator timed out without a failing input; running it again"
    done
  done
done < <(git ls-files '*_test.go' 2>/dev/null || find . -name '*_test.go')
[ "$found" = 1 ] || echo "no fuzz targets"
