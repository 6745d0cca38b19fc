#!/bin/sh
# make mutate: mutation testing with gremlins over the given packages,
# efficacy per package on stdout and in docs/mutation.md.
#   scripts/mutate.sh <gremlins version> <package dir>...
# MUTATE_WORKERS (default 2) mutants are tested at once;
# MUTATE_TIMEOUT_COEFFICIENT (default 10) times the package's plain test
# time bounds each mutant's test run.
set -eu
version=$1
shift
root=$(pwd)
bindir="$root/bin/gremlins-$version"
if [ ! -x "$bindir/gremlins" ]; then
	echo "installing gremlins $version into $bindir"
	GOBIN="$bindir" go install "github.com/go-gremlins/gremlins/cmd/gremlins@$version"
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
args=""
for pkg in "$@"; do
	name=$(echo "$pkg" | sed 's#^\./##; s#/#_#g')
	echo "== $pkg"
	# -count=1: gremlins bounds each mutant's run by the time of its first,
	# unmutated run, which a cached test result would make near zero.
	GOFLAGS=-count=1 "$bindir/gremlins" unleash \
		--workers "${MUTATE_WORKERS:-2}" \
		--timeout-coefficient "${MUTATE_TIMEOUT_COEFFICIENT:-10}" \
		-o "$out/$name.json" "$pkg" >"$out/$name.log" 2>&1 || {
		cat "$out/$name.log"
		exit 1
	}
	grep -E '^(Mutation testing completed|Killed|Timed out|Test efficacy|Mutator coverage)' "$out/$name.log" || true
	args="$args $pkg=$out/$name.json"
done
# shellcheck disable=SC2086 # one argument per package
go run ./scripts/mutreport -reasons scripts/mutreport/equivalent.txt -o docs/mutation.md $args
