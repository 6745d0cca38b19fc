#!/bin/sh
# make mutate: mutation testing with gremlins over the given packages,
# efficacy per package on stdout and in docs/mutation.md.
#   scripts/mutate.sh <gremlins version> <package dir>[:<file>,<file>...]...
# With files after the package dir, only those files of the package are
# mutated (gremlins mutates a whole package; the others are excluded with
# --exclude-files); the package's tests still run in full.
# MUTATE_WORKERS (default 2) mutants are tested at once;
# MUTATE_TIMEOUT_COEFFICIENT (default 10) times the package's plain test
# time bounds each mutant's test run; MUTATE_GOFLAGS (e.g. -skip=<regexp>)
# go to every go test gremlins runs, the coverage run included.
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
for spec in "$@"; do
	pkg=${spec%%:*}
	# Exclusions: every non-test file of the package not named, and
	# everything in its subdirectories (gremlins walks them too).
	excl=""
	case $spec in
	*:*)
		files=$(echo "${spec#*:}" | tr ',' ' ')
		excl="-E /"
		for f in "$pkg"/*.go; do
			b=$(basename "$f")
			case $b in *_test.go) continue ;; esac
			keep=0
			for k in $files; do
				if [ "$k" = "$b" ]; then keep=1; fi
			done
			if [ $keep = 0 ]; then
				excl="$excl -E ^$(echo "$b" | sed 's/\./\\./g')\$"
			fi
		done
		;;
	esac
	name=$(echo "$pkg" | sed 's#^\./##; s#/#_#g')
	echo "== $spec"
	# -count=1: gremlins bounds each mutant's run by the time of its first,
	# unmutated run, which a cached test result would make near zero.
	# shellcheck disable=SC2086 # one word per exclusion flag and value
	GOFLAGS="-count=1 ${MUTATE_GOFLAGS:-}" "$bindir/gremlins" unleash \
		--workers "${MUTATE_WORKERS:-2}" \
		--timeout-coefficient "${MUTATE_TIMEOUT_COEFFICIENT:-10}" \
		$excl -o "$out/$name.json" "$pkg" >"$out/$name.log" 2>&1 || {
		cat "$out/$name.log"
		exit 1
	}
	grep -E '^(Mutation testing completed|Killed|Timed out|Test efficacy|Mutator coverage)' "$out/$name.log" || true
	args="$args $pkg=$out/$name.json"
done
# shellcheck disable=SC2086 # one argument per package
go run ./scripts/mutreport -reasons scripts/mutreport/equivalent.txt -o docs/mutation.md $args
