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
    go test -run '^$' -fuzz "^${fn}\$" -fuzztime "$dur" "$pkg"
  done
done < <(git ls-files '*_test.go' 2>/dev/null || find . -name '*_test.go')
[ "$found" = 1 ] || echo "no fuzz targets"
