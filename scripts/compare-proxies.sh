#!/usr/bin/env bash
# compare-proxies.sh — kvca against nginx and HAProxy, in one run, on loopback.
#
# Starts kvca's mock engine in fast mode (fixed small responses) as the
# backend, then nginx, HAProxy, two floors (bare: a fasthttp forwarder, Go
# and fasthttp with none of kvca's work, scripts/compare/bareproxy; epoll: a
# Go forwarder on event loops, nginx's I/O model without the runtime's
# scheduler or an HTTP library, scripts/compare/epollproxy) and kvca in
# front of it, and measures with wrk, interleaved and repeated: for every
# body, ROUNDS rounds of [direct, nginx, haproxy, bare, epoll, loopkvca,
# kvca, kvca_fasthttp] (loopkvca: the epoll forwarder doing kvca's routing
# work; kvca: kvca serve as deployed, --io auto, its event loops on Linux;
# kvca_fasthttp: kvca serve --io fasthttp, which only a kvca built from
# KVCA_REF=a8de981 or earlier has: the goroutine-per-connection model the
# event loops replaced; not in the default TARGETS), each a
# WARMUP-second warm-up and a DURATION-second measured run at a fixed
# concurrency. It reports medians of
# requests/s, p50 and p99 latency, and CPU time per request of each proxy's
# processes, with ratios to direct and to nginx, prints the table and writes it
# to bench/results/proxies.md together with the machine description.
#
# Usage (from anywhere):
#   scripts/compare-proxies.sh
#   ROUNDS=5 DURATION=10 CONNS=64 scripts/compare-proxies.sh
#
# Environment (defaults in brackets):
#   ROUNDS [3]        rounds of [direct nginx haproxy bare epoll loopkvca kvca
#                     kvca_fasthttp] per body
#   DURATION [5]      seconds of each measured wrk run
#   WARMUP [1]        seconds of wrk warm-up before each measured run (0: none)
#   CONNS [32]        wrk connections;  THREADS [1] wrk threads
#   PROXY_CPUS [nproc] nginx worker_processes = HAProxy nbthread = GOMAXPROCS
#                     of kvca and of the bare forwarder
#   BODIES [1k-nostream 1k-stream 4k-nostream 4k-stream 128k-nostream 128k-stream
#           tool512k-nostream tool1m-nostream agent-nostream]
#                     also: 512k-*, 1m-* (a long conversation of plain
#                     messages), tool512k-*, tool1m-* (an agent's late turn:
#                     tool definitions, tool calls and results of source
#                     code) and agent-* (one agent session's 40 growing
#                     requests of that shape, 34 KB to 833 KB, replayed in
#                     order by each wrk thread)
#   TARGETS [direct nginx haproxy bare epoll loopkvca kvca]
#                     (kvca_fasthttp is dropped with TLS=1, where kvca is
#                     fasthttp anyway; bare, the
#                     fasthttp forwarder, epoll, the event-loop forwarder of
#                     scripts/compare/epollproxy, and loopkvca, the same with
#                     -route, kvca's routing work on every request: plain HTTP
#                     only, dropped with TLS=1)
#   BASE_PORT [18780] first loopback port tried (busy ports are skipped)
#   OUT [bench/results/proxies.md]  markdown report ("-": none)
#   PROFILE_DIR []    if set: after the rounds, one extra kvca run per body with
#                     a CPU profile (kvca serve --pprof) saved there
#   KEEP_TMP [0]      1: keep the temp dir (configs, logs, raw wrk output)
#   TLS [0]           1: nginx, HAProxy and kvca terminate TLS (a throwaway
#                     P-256 certificate from openssl; wrk speaks HTTPS with
#                     keep-alive); the backend stays plain HTTP. The report
#                     goes to bench/results/proxies-tls.md unless OUT is set.
#   KVCA_ARGS []      extra arguments to kvca serve (e.g. "--cbr-memo-bytes 0")
#   KVCA_REF []       empty: build kvca from the working tree into bin/kvca;
#                     a git ref (HEAD, a tag): build that commit from
#                     `git archive` in the temp dir (the working tree untouched)
#
# Needs root (or sudo) only to install wrk, nginx and haproxy from Debian's
# packages when they are missing. Only 127.0.0.1 is ever contacted.
set -euo pipefail

# ---- command line as given (environment overrides included) ---------------
cmdline=""
for v in ROUNDS DURATION WARMUP CONNS THREADS PROXY_CPUS BODIES TARGETS BASE_PORT OUT PROFILE_DIR KEEP_TMP KVCA_REF KVCA_ARGS TLS; do
	if [[ -n ${!v+x} ]]; then cmdline+="$v=$(printf '%q' "${!v}") "; fi
done
cmdline+="scripts/compare-proxies.sh${*:+ $*}"

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-5}
WARMUP=${WARMUP:-1}
CONNS=${CONNS:-32}
THREADS=${THREADS:-1}
PROXY_CPUS=${PROXY_CPUS:-$(nproc)}
BODIES=${BODIES:-"1k-nostream 1k-stream 4k-nostream 4k-stream 128k-nostream 128k-stream tool512k-nostream tool1m-nostream agent-nostream"}
TARGETS=${TARGETS:-"direct nginx haproxy bare epoll loopkvca kvca"}
BASE_PORT=${BASE_PORT:-18780}
TLS=${TLS:-0}
if [[ $TLS == 1 ]]; then OUT=${OUT:-bench/results/proxies-tls.md}; else OUT=${OUT:-bench/results/proxies.md}; fi
PROFILE_DIR=${PROFILE_DIR:-}
KEEP_TMP=${KEEP_TMP:-0}
KVCA_REF=${KVCA_REF:-}
KVCA_ARGS=${KVCA_ARGS:-}

log() { printf '[compare %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { printf 'compare-proxies: %s\n' "$*" >&2; exit 1; }

for n in ROUNDS DURATION WARMUP CONNS THREADS PROXY_CPUS BASE_PORT; do
	[[ ${!n} =~ ^[0-9]+$ ]] || die "$n must be a non-negative integer, got '${!n}'"
done
((ROUNDS >= 1 && DURATION >= 1 && CONNS >= 1 && THREADS >= 1 && PROXY_CPUS >= 1)) || die "ROUNDS, DURATION, CONNS, THREADS and PROXY_CPUS must be >= 1"
((CONNS >= THREADS)) || die "CONNS must be >= THREADS"

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
here=$root/scripts/compare

# ---- dependencies ----------------------------------------------------------
as_root() {
	if [[ $(id -u) -eq 0 ]]; then "$@"
	elif command -v sudo >/dev/null; then sudo -n "$@"
	else die "need root to run: $*"; fi
}
missing=()
for c in wrk nginx haproxy curl; do
	command -v "$c" >/dev/null || [[ -x /usr/sbin/$c ]] || missing+=("$c")
done
if ((${#missing[@]})); then
	log "installing from Debian's packages: ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	as_root timeout 300 apt-get update -qq || die "apt-get update failed"
	as_root timeout 600 apt-get install -y -qq wrk nginx haproxy curl >/dev/null || die "apt-get install failed"
fi
export PATH=$PATH:/usr/sbin
for c in wrk nginx haproxy curl go; do command -v "$c" >/dev/null || die "$c not found"; done
[[ $TLS != 1 ]] || command -v openssl >/dev/null || die "TLS=1 needs openssl"
if [[ $TLS == 1 && " $TARGETS " == *" "@(bare|epoll|loopkvca|kvca_fasthttp)" "* ]]; then
	TARGETS=$(tr ' ' '\n' <<<"$TARGETS" | grep -vxE 'bare|epoll|loopkvca|kvca_fasthttp' | xargs)
	log "TLS=1: the bare and epoll forwarders speak plain HTTP only, measuring [$TARGETS]"
fi

# ---- temp dir and cleanup --------------------------------------------------
tmp=$(mktemp -d /tmp/kvca-compare.XXXXXX)
pids=() names=()
cleanup() {
	local rc=$? i pid t
	trap - EXIT INT TERM
	for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
		kill -TERM "${pids[i]}" 2>/dev/null || true
	done
	for pid in "${pids[@]}"; do
		for ((t = 0; t < 50; t++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	done
	if [[ $KEEP_TMP == 1 || $rc -ne 0 ]]; then
		log "temp dir kept: $tmp"
	else
		rm -rf "$tmp"
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'printf "compare-proxies: failed at line %s: %s\n" "$LINENO" "$BASH_COMMAND" >&2' ERR
trap 'exit 130' INT
trap 'exit 143' TERM

# start NAME CMD...: run CMD in the background, its output in $tmp/NAME.log.
start() {
	local name=$1
	shift
	"$@" >"$tmp/$name.log" 2>&1 </dev/null &
	pids+=($!)
	names+=("$name")
	eval "pid_$name=$!"
}

# ---- build ---------------------------------------------------------------
if [[ -z $KVCA_REF ]]; then
	log "building kvca from the working tree"
	mkdir -p bin
	timeout 600 go build -o bin/kvca ./cmd/kvca || die "go build ./cmd/kvca failed"
	# Run a private copy: others may rebuild bin/kvca while this runs.
	cp bin/kvca "$tmp/kvca"
	kvca_rev=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
	dirty=$(git status --porcelain -- '*.go' go.mod go.sum 2>/dev/null | grep -cv '^?? scripts/compare/' || true)
	((dirty == 0)) || kvca_rev+=" plus uncommitted changes in $dirty Go files (built from the working tree)"
else
	kvca_rev=$(git rev-parse --short "$KVCA_REF^{commit}" 2>/dev/null) || die "KVCA_REF: no commit '$KVCA_REF'"
	log "building kvca at $KVCA_REF ($kvca_rev) from git archive"
	mkdir -p "$tmp/src"
	git archive "$kvca_rev" | tar -x -C "$tmp/src" || die "git archive $kvca_rev failed"
	(cd "$tmp/src" && timeout 600 go build -o "$tmp/kvca" ./cmd/kvca) || die "go build ./cmd/kvca at $kvca_rev failed"
	kvca_rev+=" (committed tree, KVCA_REF=$KVCA_REF)"
fi
timeout 300 go build -o "$tmp/genbody" ./scripts/compare/genbody || die "go build genbody failed"
timeout 300 go build -o "$tmp/bareproxy" ./scripts/compare/bareproxy || die "go build bareproxy failed"
if [[ " $TARGETS " == *" "@(epoll|loopkvca)" "* ]]; then
	timeout 300 go build -o "$tmp/epollproxy" ./scripts/compare/epollproxy || die "go build epollproxy failed"
fi
mkdir -p "$tmp/bodies" "$tmp/raw"
"$tmp/genbody" -out "$tmp/bodies" || die "genbody failed"
for b in $BODIES; do [[ -s $tmp/bodies/$b.json ]] || die "unknown body '$b'"; done

# ---- ports -------------------------------------------------------------------
port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
next_port=$BASE_PORT
alloc_port() {
	local tries=0
	while port_busy "$next_port"; do
		next_port=$((next_port + 1)) tries=$((tries + 1))
		((tries < 200)) || die "no free port from $BASE_PORT"
	done
	REPLY=$next_port
	next_port=$((next_port + 1))
}
alloc_port; mock_port=$REPLY
alloc_port; nginx_port=$REPLY
alloc_port; haproxy_port=$REPLY
alloc_port; bare_port=$REPLY
alloc_port; epoll_port=$REPLY
alloc_port; loopkvca_port=$REPLY
alloc_port; kvca_port=$REPLY
alloc_port; admin_port=$REPLY
alloc_port; kvcafh_port=$REPLY
alloc_port; kvcafh_admin_port=$REPLY

scheme=http
if [[ $TLS == 1 ]]; then
	scheme=https
	mkdir -p "$tmp/tls"
	timeout 60 openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
		-keyout "$tmp/tls/key.pem" -out "$tmp/tls/cert.pem" -subj /CN=127.0.0.1 \
		-addext subjectAltName=IP:127.0.0.1 2>/dev/null || die "openssl could not make a certificate"
	cat "$tmp/tls/cert.pem" "$tmp/tls/key.pem" >"$tmp/tls/both.pem"
fi
declare -A url=(
	[direct]=http://127.0.0.1:$mock_port/v1/chat/completions
	[nginx]=$scheme://127.0.0.1:$nginx_port/v1/chat/completions
	[haproxy]=$scheme://127.0.0.1:$haproxy_port/v1/chat/completions
	[bare]=http://127.0.0.1:$bare_port/v1/chat/completions
	[epoll]=http://127.0.0.1:$epoll_port/v1/chat/completions
	[loopkvca]=http://127.0.0.1:$loopkvca_port/v1/chat/completions
	[kvca]=$scheme://127.0.0.1:$kvca_port/v1/chat/completions
	[kvca_fasthttp]=http://127.0.0.1:$kvcafh_port/v1/chat/completions
)
for t in $TARGETS; do [[ -n ${url[$t]:-} ]] || die "unknown target '$t'"; done

# wait_http NAME URL: poll (at most 10 s) until URL answers 200.
wait_http() {
	local name=$1 u=$2 i code pid_var=pid_$1
	for ((i = 0; i < 100; i++)); do
		kill -0 "${!pid_var}" 2>/dev/null || { tail -20 "$tmp/$name.log" >&2; die "$name exited during start-up"; }
		code=$(curl -sk -o /dev/null --max-time 1 -w '%{http_code}' "$u" || true)
		[[ $code == 200 ]] && return 0
		sleep 0.1
	done
	tail -20 "$tmp/$name.log" >&2
	die "$name not ready at $u within 10 s (last status $code)"
}

# ---- backend -----------------------------------------------------------------
log "starting mock backend on 127.0.0.1:$mock_port"
start mock "$tmp/kvca" mock --listen "127.0.0.1:$mock_port" --fast
wait_http mock "http://127.0.0.1:$mock_port/health"

# ---- nginx -------------------------------------------------------------------
mkdir -p "$tmp/nginx"
sed -e "s|@PREFIX@|$tmp/nginx|g" -e "s|@WORKERS@|$PROXY_CPUS|g" \
	-e "s|@LISTEN@|127.0.0.1:$nginx_port|g" -e "s|@BACKEND@|127.0.0.1:$mock_port|g" \
	"$here/nginx.conf.in" >"$tmp/nginx/nginx.conf"
if [[ $TLS == 1 ]]; then
	sed -i -e "s|backlog=4096;|backlog=4096 ssl; ssl_certificate $tmp/tls/cert.pem; ssl_certificate_key $tmp/tls/key.pem; ssl_protocols TLSv1.2 TLSv1.3; ssl_session_cache shared:SSL:10m;|" "$tmp/nginx/nginx.conf"
fi
timeout 20 nginx -t -q -p "$tmp/nginx" -e "$tmp/nginx/error.log" -c "$tmp/nginx/nginx.conf" ||
	die "nginx -t rejected $tmp/nginx/nginx.conf"
log "starting nginx on 127.0.0.1:$nginx_port (worker_processes $PROXY_CPUS)"
start nginx nginx -p "$tmp/nginx" -e "$tmp/nginx/error.log" -c "$tmp/nginx/nginx.conf"
wait_http nginx "$scheme://127.0.0.1:$nginx_port/health"

# ---- HAProxy -----------------------------------------------------------------
mkdir -p "$tmp/haproxy"
sed -e "s|@THREADS@|$PROXY_CPUS|g" -e "s|@LISTEN@|127.0.0.1:$haproxy_port|g" \
	-e "s|@BACKEND@|127.0.0.1:$mock_port|g" \
	"$here/haproxy.cfg.in" >"$tmp/haproxy/haproxy.cfg"
if [[ $TLS == 1 ]]; then
	sed -i -e "s|^    bind 127.0.0.1:$haproxy_port\$|    bind 127.0.0.1:$haproxy_port ssl crt $tmp/tls/both.pem alpn http/1.1|" "$tmp/haproxy/haproxy.cfg"
fi
timeout 20 haproxy -q -c -f "$tmp/haproxy/haproxy.cfg" || die "haproxy -c rejected $tmp/haproxy/haproxy.cfg"
log "starting HAProxy on 127.0.0.1:$haproxy_port (nbthread $PROXY_CPUS)"
start haproxy haproxy -db -f "$tmp/haproxy/haproxy.cfg"
wait_http haproxy "$scheme://127.0.0.1:$haproxy_port/health"

# ---- bare fasthttp forwarder (the floor) ---------------------------------------
if [[ " $TARGETS " == *" bare "* ]]; then
	log "starting the bare fasthttp forwarder on 127.0.0.1:$bare_port (GOMAXPROCS $PROXY_CPUS)"
	start bare env GOMAXPROCS="$PROXY_CPUS" "$tmp/bareproxy" -listen "127.0.0.1:$bare_port" -backend "127.0.0.1:$mock_port"
	wait_http bare "http://127.0.0.1:$bare_port/health"
fi
if [[ " $TARGETS " == *" epoll "* ]]; then
	log "starting the epoll forwarder on 127.0.0.1:$epoll_port (GOMAXPROCS $PROXY_CPUS, as many event loops)"
	start epoll env GOMAXPROCS="$PROXY_CPUS" "$tmp/epollproxy" -listen "127.0.0.1:$epoll_port" -backend "127.0.0.1:$mock_port"
	wait_http epoll "http://127.0.0.1:$epoll_port/health" # relayed to the mock
fi
if [[ " $TARGETS " == *" loopkvca "* ]]; then
	log "starting the epoll forwarder with kvca's routing work on 127.0.0.1:$loopkvca_port (GOMAXPROCS $PROXY_CPUS)"
	start loopkvca env GOMAXPROCS="$PROXY_CPUS" "$tmp/epollproxy" -route -listen "127.0.0.1:$loopkvca_port" -backend "127.0.0.1:$mock_port"
	wait_http loopkvca "http://127.0.0.1:$loopkvca_port/health"
fi

# ---- kvca --------------------------------------------------------------------
kvca_args=(serve --listen "127.0.0.1:$kvca_port" --backend "http://127.0.0.1:$mock_port"
	--policy kvca --admin-listen "127.0.0.1:$admin_port" --health-interval 0 --log-level warn)
[[ -n $PROFILE_DIR ]] && kvca_args+=(--pprof)
# shellcheck disable=SC2206 # word splitting is what KVCA_ARGS is for
[[ -n $KVCA_ARGS ]] && kvca_args+=($KVCA_ARGS)
[[ $TLS == 1 ]] && kvca_args+=(--tls-cert "$tmp/tls/cert.pem" --tls-key "$tmp/tls/key.pem")
log "starting kvca on 127.0.0.1:$kvca_port (GOMAXPROCS $PROXY_CPUS)"
start kvca env GOMAXPROCS="$PROXY_CPUS" "$tmp/kvca" "${kvca_args[@]}"
wait_http kvca "$scheme://127.0.0.1:$kvca_port/health"
if [[ " $TARGETS " == *" kvca_fasthttp "* ]]; then
	fh_args=(serve --listen "127.0.0.1:$kvcafh_port" --backend "http://127.0.0.1:$mock_port"
		--policy kvca --admin-listen "127.0.0.1:$kvcafh_admin_port" --health-interval 0 --log-level warn)
	# shellcheck disable=SC2206 # word splitting is what KVCA_ARGS is for
	[[ -n $KVCA_ARGS ]] && fh_args+=($KVCA_ARGS)
	fh_args+=(--io fasthttp)
	log "starting kvca --io fasthttp on 127.0.0.1:$kvcafh_port (GOMAXPROCS $PROXY_CPUS)"
	start kvca_fasthttp env GOMAXPROCS="$PROXY_CPUS" "$tmp/kvca" "${fh_args[@]}"
	wait_http kvca_fasthttp "http://127.0.0.1:$kvcafh_port/health"
fi

# ---- smoke test: every body through every target ----------------------------
for b in $BODIES; do
	for t in $TARGETS; do
		code=$(curl -sk -o "$tmp/smoke.out" --max-time 5 -w '%{http_code}' -H 'Content-Type: application/json' \
			--data-binary "@$tmp/bodies/$b.json" "${url[$t]}" || true)
		[[ $code == 200 ]] || { head -c 500 "$tmp/smoke.out" >&2; die "smoke: $b via $t answered '$code'"; }
		if [[ $b == *-stream ]]; then want='data: [DONE]'; else want='"choices"'; fi
		grep -qF "$want" "$tmp/smoke.out" || { head -c 500 "$tmp/smoke.out" >&2; die "smoke: $b via $t: no '$want' in the answer"; }
	done
done
log "smoke test passed: ${BODIES// /,} via ${TARGETS// /,}"

# ---- measurement helpers -------------------------------------------------------
hz=$(getconf CLK_TCK)

# proc_split PID...: "utime stime" (clock ticks) summed over PIDs and their children.
proc_split() {
	local p all=() s ut=0 st=0 rest
	for p in "$@"; do
		all+=("$p")
		for s in $(pgrep -P "$p" 2>/dev/null || true); do all+=("$s"); done
	done
	for p in "${all[@]}"; do
		s=$(cat "/proc/$p/stat" 2>/dev/null) || continue
		rest=${s##*) } # fields after "pid (comm) "; utime, stime are 12th, 13th
		read -r -a f <<<"$rest"
		ut=$((ut + f[11])) st=$((st + f[12]))
	done
	echo "$ut $st"
}
# proc_ticks PID...: utime+stime (clock ticks) summed over PIDs and their children.
proc_ticks() {
	local ut st
	read -r ut st <<<"$(proc_split "$@")"
	echo $((ut + st))
}
# machine_ticks: "busy total softirq" clock ticks of all CPUs from /proc/stat.
machine_ticks() {
	local cpu u n s i w q sq st
	read -r cpu u n s i w q sq st _ </proc/stat
	echo "$((u + n + s + q + sq + st)) $((u + n + s + i + w + q + sq + st)) $((q + sq))"
}
# times_secs "0m1.234s": seconds as a decimal.
times_secs() { awk -v t="$1" 'BEGIN { split(t, a, "m"); sub("s", "", a[2]); printf "%.3f", a[1] * 60 + a[2] }'; }

proxy_pid() {
	case $1 in
	direct) echo "" ;;
	*) local v=pid_$1; echo "${!v}" ;;
	esac
}

results=$tmp/results.tsv
printf 'body\ttarget\tround\trequests\trps\tp50_us\tp99_us\tproxy_us_req\tmock_us_req\twrk_cores\tmock_cores\tproxy_cores\tmachine_busy_cores\tnon2xx\terrors\tother_cores\tirq_cores\n' >"$results"

# run_one BODY TARGET ROUND
run_one() {
	local b=$1 t=$2 r=$3 u=${url[$2]} ppid out rc
	ppid=$(proxy_pid "$t")
	export KVCA_BODY=$tmp/bodies/$b.json
	if ((WARMUP > 0)); then
		timeout $((WARMUP + 20)) wrk -t"$THREADS" -c"$CONNS" -d"${WARMUP}s" -s "$here/post.lua" "$u" >/dev/null 2>&1 ||
			die "warm-up wrk failed: $b via $t"
	fi
	local p0 m0 mach0 p1 m1 mach1 pu0 ps0 pu1 ps1
	read -r pu0 ps0 <<<"$([[ -n $ppid ]] && proc_split "$ppid" || echo 0 0)"
	p0=$((pu0 + ps0))
	m0=$(proc_ticks "$pid_mock")
	mach0=$(machine_ticks)
	rc=0
	out=$( (
		timeout $((DURATION + 30)) wrk -t"$THREADS" -c"$CONNS" -d"${DURATION}s" --timeout 5s --latency -s "$here/post.lua" "$u"
		rc=$?
		echo TIMES_BEGIN
		times # no fork: the second line is this subshell's children, i.e. wrk
		exit $rc
	) 2>&1) || rc=$?
	mach1=$(machine_ticks)
	m1=$(proc_ticks "$pid_mock")
	read -r pu1 ps1 <<<"$([[ -n $ppid ]] && proc_split "$ppid" || echo 0 0)"
	p1=$((pu1 + ps1))
	printf '%s\n' "$out" >"$tmp/raw/$b.$t.$r.txt"
	((rc == 0)) || { printf '%s\n' "$out" >&2; die "wrk failed (rc $rc): $b via $t"; }
	local res non2xx wu ws
	res=$(grep '^KVCA_RESULT' <<<"$out") || { printf '%s\n' "$out" >&2; die "no KVCA_RESULT from wrk: $b via $t"; }
	non2xx=$(awk '/Non-2xx or 3xx responses:/ { print $NF }' <<<"$out")
	read -r wu ws <<<"$(awk '/^TIMES_BEGIN/ { getline; getline; print; exit }' <<<"$out")"
	wu=$(times_secs "$wu") ws=$(times_secs "$ws")
	local -A kv=()
	local f
	for f in ${res#KVCA_RESULT }; do kv[${f%%=*}]=${f#*=}; done
	read -r mb0 mt0 mq0 <<<"$mach0"
	read -r mb1 mt1 mq1 <<<"$mach1"
	awk -v b="$b" -v t="$t" -v r="$r" -v n="${kv[requests]}" -v d="${kv[duration_us]}" \
		-v p50="${kv[p50_us]}" -v p99="${kv[p99_us]}" -v pt=$((p1 - p0)) -v put=$((pu1 - pu0)) -v pst=$((ps1 - ps0)) -v mt=$((m1 - m0)) -v hz="$hz" \
		-v wcpu="$(awk -v a="$wu" -v b="$ws" 'BEGIN { print a + b }')" -v mb=$((mb1 - mb0)) -v mtot=$((mt1 - mt0)) -v mq=$((mq1 - mq0)) \
		-v ncpu="$(nproc)" -v non2xx="${non2xx:-0}" -v direct=$([[ $t == direct ]] && echo 1 || echo 0) \
		-v errs=$((kv[err_connect] + kv[err_read] + kv[err_write] + kv[err_timeout])) '
	BEGIN {
		secs = d / 1e6
		wall = mtot / hz / ncpu  # seconds of wall time seen by /proc/stat
		proxy_us = direct ? "-" : sprintf("%.1f", pt / hz * 1e6 / n)
		proxy_cores = direct ? "-" : sprintf("%.2f", pt / hz / wall)
		other = (mb - mq - mt - (direct ? 0 : pt)) / hz / wall - wcpu / wall
		user_us = direct ? "-" : sprintf("%.1f", put / hz * 1e6 / n)
		sys_us = direct ? "-" : sprintf("%.1f", pst / hz * 1e6 / n)
		printf "%s\t%s\t%d\t%d\t%.0f\t%d\t%d\t%s\t%.1f\t%.2f\t%.2f\t%s\t%.2f\t%d\t%d\t%.2f\t%.2f\t%s\t%s\n",
			b, t, r, n, n / secs, p50, p99, proxy_us, mt / hz * 1e6 / n,
			wcpu / wall, mt / hz / wall, proxy_cores, mb / hz / wall, non2xx, errs, (other < 0 ? 0 : other), mq / hz / wall, user_us, sys_us
	}' >>"$results"
	tail -1 "$results" | awk -F'\t' '{ printf "  %-14s %-8s round %d: %8s req/s  p50 %6sus  p99 %6sus  proxy CPU %6s us/req  non-2xx %s errors %s\n", $1, $2, $3, $5, $6, $7, $8, $14, $15 }' >&2
}

# ---- the runs --------------------------------------------------------------------
nb=$(wc -w <<<"$BODIES") nt=$(wc -w <<<"$TARGETS")
est=$((nb * nt * ROUNDS * (DURATION + WARMUP + 1)))
log "measuring: $nb bodies x $ROUNDS rounds x [$TARGETS], ${WARMUP}s warm-up + ${DURATION}s each, wrk -t$THREADS -c$CONNS (about $((est / 60)) min)"
started=$(date -u '+%Y-%m-%d %H:%M:%S UTC')
for b in $BODIES; do
	for ((r = 1; r <= ROUNDS; r++)); do
		for t in $TARGETS; do run_one "$b" "$t" "$r"; done
	done
done
finished=$(date -u '+%Y-%m-%d %H:%M:%S UTC')

# Any proxy that died during the runs invalidates them.
for i in "${!pids[@]}"; do
	kill -0 "${pids[i]}" 2>/dev/null || die "${names[i]} exited during the runs (log: $tmp/${names[i]}.log)"
done

# ---- optional kvca CPU profiles ------------------------------------------------
if [[ -n $PROFILE_DIR && " $TARGETS " == *" kvca "* ]]; then
	mkdir -p "$PROFILE_DIR"
	for b in $BODIES; do
		log "profiling kvca for $b (${DURATION}s)"
		export KVCA_BODY=$tmp/bodies/$b.json
		timeout $((DURATION + 30)) wrk -t"$THREADS" -c"$CONNS" -d"$((DURATION + 2))s" -s "$here/post.lua" "${url[kvca]}" >/dev/null 2>&1 &
		wrk_pid=$!
		sleep 1
		curl -s --max-time $((DURATION + 20)) -o "$PROFILE_DIR/kvca-$b.cpu.pprof" \
			"http://127.0.0.1:$admin_port/debug/pprof/profile?seconds=$DURATION" || log "profile for $b failed"
		wait "$wrk_pid" || true
	done
	cp "$tmp/kvca" "$PROFILE_DIR/kvca.bin"
	log "profiles in $PROFILE_DIR (go tool pprof -top $PROFILE_DIR/kvca.bin $PROFILE_DIR/kvca-BODY.cpu.pprof)"
fi

# ---- medians and the report -----------------------------------------------------------
median() { sort -g | awk '{ a[NR] = $1 } END { if (NR == 0) print "nan"; else if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
col() { awk -F'\t' -v b="$1" -v t="$2" -v c="$3" '$1 == b && $2 == t && $c != "-" { print $c }' "$results"; }
sumcol() { awk -F'\t' -v b="$1" -v t="$2" -v c="$3" '$1 == b && $2 == t { s += $c } END { print s + 0 }' "$results"; }

summary=$tmp/summary.tsv
: >"$summary"
for b in $BODIES; do
	for t in $TARGETS; do
		printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$b" "$t" \
			"$(col "$b" "$t" 5 | median)" "$(col "$b" "$t" 6 | median)" "$(col "$b" "$t" 7 | median)" \
			"$(col "$b" "$t" 8 | median)" "$(col "$b" "$t" 9 | median)" "$(col "$b" "$t" 10 | median)" \
			"$(col "$b" "$t" 11 | median)" "$(col "$b" "$t" 12 | median)" "$(col "$b" "$t" 13 | median)" \
			"$(sumcol "$b" "$t" 14)" "$(sumcol "$b" "$t" 15)" \
			"$(col "$b" "$t" 5 | sort -g | head -1)" "$(col "$b" "$t" 5 | sort -g | tail -1)" \
			"$(col "$b" "$t" 16 | median)" "$(col "$b" "$t" 17 | median)" \
			"$(col "$b" "$t" 18 | median)" "$(col "$b" "$t" 19 | median)" >>"$summary"
	done
done

# The results table (markdown); ratios use the medians of the same run.
table() {
	awk -F'\t' '
	function ratio(a, b) { return (a == "nan" || b == "nan" || b == 0 || a == "") ? "-" : sprintf("%.2f", a / b) }
	function us(x) { return x >= 10000 ? sprintf("%.1f ms", x / 1000) : sprintf("%d µs", x) }
	{ n++; B[n] = $1; T[n] = $2; rps[$1, $2] = $3; p50[$1, $2] = $4; p99[$1, $2] = $5; cpu[$1, $2] = $6
	  lo[$1, $2] = $14; hi[$1, $2] = $15; bad[$1, $2] = $12 + $13 }
	END {
		print "| body | target | req/s | req/s range | ×direct | ×nginx | p50 | p99 | p99 ×nginx | CPU µs/req | CPU ×nginx | non-2xx+errors |"
		print "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
		for (i = 1; i <= n; i++) {
			b = B[i]; t = T[i]
			c = cpu[b, t]; cs = (c == "nan" || c == "") ? "-" : sprintf("%.1f", c)
			printf "| %s | %s | %.0f | %.0f–%.0f | %s | %s | %s | %s | %s | %s | %s | %d |\n", b, t, rps[b, t], lo[b, t], hi[b, t],
				ratio(rps[b, t], rps[b, "direct"]), ratio(rps[b, t], rps[b, "nginx"]),
				us(p50[b, t]), us(p99[b, t]), ratio(p99[b, t], p99[b, "nginx"]), cs,
				(t == "direct") ? "-" : ratio(c, cpu[b, "nginx"]), bad[b, t]
		}
	}' "$summary"
}
cores_table() {
	awk -F'\t' '
	BEGIN { print "| body | target | wrk | mock backend | proxy | irq+softirq | other processes | whole machine | mock CPU µs/req |"
	        print "|---|---|---:|---:|---:|---:|---:|---:|---:|" }
	{ printf "| %s | %s | %.2f | %.2f | %s | %.2f | %.2f | %.2f | %.1f |\n", $1, $2, $8, $9, ($10 == "nan" ? "-" : sprintf("%.2f", $10)), $17, $16, $11, $7 }' "$summary"
}
# The floor: how much of kvca's distance to nginx a bare Go+fasthttp
# forwarder already has, and how much is kvca's own work.
floor_table() {
	awk -F'\t' '
	function r(a, b) { return (a == "" || b == "" || a == "nan" || b == "nan" || b == 0) ? "-" : sprintf("%.2f", a / b) }
	function f(x) { return (x == "" || x == "nan") ? "-" : sprintf("%.1f", x) }
	function d(a, b) { return (a == "" || b == "" || a == "nan" || b == "nan") ? "-" : sprintf("%+.1f", a - b) }
	{ rps[$1, $2] = $3; cpu[$1, $2] = $6; usr[$1, $2] = $18; sys[$1, $2] = $19; order[++n] = $1 }
	END {
		print "| body | bare/nginx req/s | kvca_fasthttp/nginx req/s | kvca_fasthttp/bare req/s | CPU µs/req nginx / bare / kvca_fasthttp | user µs/req nginx / bare / kvca_fasthttp | system µs/req nginx / bare / kvca_fasthttp | bare − nginx µs/req | kvca_fasthttp − bare µs/req |"
		print "|---|---:|---:|---:|---|---|---|---:|---:|"
		for (i = 1; i <= n; i++) {
			b = order[i]; if (done[b]++) continue
			k = "kvca_fasthttp"
			if (rps[b, "bare"] == "" || rps[b, "nginx"] == "" || rps[b, k] == "") continue
			printf "| %s | %s | %s | %s | %s / %s / %s | %s / %s / %s | %s / %s / %s | %s | %s |\n", b, r(rps[b, "bare"], rps[b, "nginx"]),
				r(rps[b, k], rps[b, "nginx"]), r(rps[b, k], rps[b, "bare"]),
				f(cpu[b, "nginx"]), f(cpu[b, "bare"]), f(cpu[b, k]),
				f(usr[b, "nginx"]), f(usr[b, "bare"]), f(usr[b, k]),
				f(sys[b, "nginx"]), f(sys[b, "bare"]), f(sys[b, k]),
				d(cpu[b, "bare"], cpu[b, "nginx"]), d(cpu[b, k], cpu[b, "bare"])
		}
	}' "$summary"
}
# The other floor: a Go forwarder with nginx's I/O model (event loops on
# epoll, no goroutine per connection), against nginx, HAProxy and bare.
epoll_table() {
	awk -F'\t' '
	function r(a, b) { return (a == "" || b == "" || a == "nan" || b == "nan" || b == 0) ? "-" : sprintf("%.2f", a / b) }
	function f(x) { return (x == "" || x == "nan") ? "-" : sprintf("%.1f", x) }
	{ rps[$1, $2] = $3; p99[$1, $2] = $5; cpu[$1, $2] = $6; usr[$1, $2] = $18; sys[$1, $2] = $19; order[++n] = $1 }
	END {
		print "| body | epoll/nginx req/s | epoll/HAProxy req/s | epoll/bare req/s | loopkvca/nginx req/s | loopkvca/HAProxy req/s | kvca/loopkvca req/s | epoll/nginx p99 | loopkvca/nginx p99 | CPU µs/req nginx / HAProxy / bare / epoll / loopkvca / kvca | user µs/req nginx / HAProxy / bare / epoll / loopkvca / kvca | system µs/req nginx / HAProxy / bare / epoll / loopkvca / kvca |"
		print "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---|"
		for (i = 1; i <= n; i++) {
			b = order[i]; if (done[b]++) continue
			if (rps[b, "epoll"] == "" && rps[b, "loopkvca"] == "") continue
			printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s / %s / %s / %s / %s / %s | %s / %s / %s / %s / %s / %s | %s / %s / %s / %s / %s / %s |\n", b,
				r(rps[b, "epoll"], rps[b, "nginx"]), r(rps[b, "epoll"], rps[b, "haproxy"]), r(rps[b, "epoll"], rps[b, "bare"]),
				r(rps[b, "loopkvca"], rps[b, "nginx"]), r(rps[b, "loopkvca"], rps[b, "haproxy"]), r(rps[b, "kvca"], rps[b, "loopkvca"]),
				r(p99[b, "epoll"], p99[b, "nginx"]), r(p99[b, "loopkvca"], p99[b, "nginx"]),
				f(cpu[b, "nginx"]), f(cpu[b, "haproxy"]), f(cpu[b, "bare"]), f(cpu[b, "epoll"]), f(cpu[b, "loopkvca"]), f(cpu[b, "kvca"]),
				f(usr[b, "nginx"]), f(usr[b, "haproxy"]), f(usr[b, "bare"]), f(usr[b, "epoll"]), f(usr[b, "loopkvca"]), f(usr[b, "kvca"]),
				f(sys[b, "nginx"]), f(sys[b, "haproxy"]), f(sys[b, "bare"]), f(sys[b, "epoll"]), f(sys[b, "loopkvca"]), f(sys[b, "kvca"])
		}
	}' "$summary"
}
targets_check() {
	awk -F'\t' '
	{ rps[$1, $2] = $3; p99[$1, $2] = $5; seen[$1] = 1; order[++n] = $1 }
	END {
		for (i = 1; i <= n; i++) {
			b = order[i]; if (done[b]++) continue
			if (rps[b, "kvca"] == "" || rps[b, "nginx"] == "" || rps[b, "haproxy"] == "") continue
			need = (b ~ /^128k/) ? 0.9 : 1.0
			rn = rps[b, "kvca"] / rps[b, "nginx"]; rh = rps[b, "kvca"] / rps[b, "haproxy"]; pn = p99[b, "kvca"] / p99[b, "nginx"]
			printf "| %s | %.2f | %.2f | %s | %.2f | %s |\n", b, rn, rh, (rn >= need && rh >= need) ? "met" : "**not met**", pn, (pn <= 1.0) ? "met" : "**not met**"
		}
	}' "$summary"
}

echo
echo "Medians of $ROUNDS rounds, wrk -t$THREADS -c$CONNS, ${DURATION}s per run:"
table
echo
cores_table
if [[ " $TARGETS " == *" bare "* ]]; then
	echo
	floor_table
fi
if [[ " $TARGETS " == *" "@(epoll|loopkvca)" "* ]]; then
	echo
	epoll_table
fi

if [[ $OUT != "-" ]]; then
	mkdir -p "$(dirname "$OUT")"
	cpu_model=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)
	nginx_v=$(nginx -v 2>&1 | sed 's/^nginx version: //')
	haproxy_v=$(haproxy -v 2>&1 | awk 'NR == 1 { print $3 }')
	wrk_v=$( (wrk -v 2>&1 || true) | awk 'NR == 1 { print $2 }') # wrk -v exits 1
	go_v=$(go version | awk '{ print $3 }')
	{
		if [[ $TLS == 1 ]]; then echo "# kvca against nginx and HAProxy, one run, all three terminating TLS"; else echo "# kvca against nginx and HAProxy, one run"; fi
		echo
		echo "Written by \`scripts/compare-proxies.sh\`; do not edit by hand."
		echo
		echo "- Date: $started – $finished"
		echo "- Command: \`$cmdline\`"
		echo "- Machine: $(nproc) CPUs ($cpu_model), $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo), kernel $(uname -r)"
		echo "- Versions: kvca $kvca_rev, $go_v; nginx $nginx_v; HAProxy $haproxy_v; wrk $wrk_v"
		echo "- Load: wrk -t$THREADS -c$CONNS --timeout 5s, ${DURATION}s measured after ${WARMUP}s of warm-up, $ROUNDS interleaved rounds of [$TARGETS] per body; the table shows medians (req/s range: slowest and fastest round)"
		echo
		echo "## Setup"
		echo
		echo "- Backend: \`kvca mock --fast\` (Go, fasthttp, all CPUs): it still parses every JSON body, then answers a fixed ~300-byte completion (its usage has no cached-token count: it keeps no cache, and a count of 0 would tell kvca every prefix it predicted there was evicted), or a ~1 KB SSE stream of 5 events when \`\"stream\":true\`; the stream is sent in one write with a Content-Length, so \"streaming\" here tests the SSE content type and size, not chunked relaying of a slow stream."
		echo "- nginx: \`worker_processes $PROXY_CPUS\`, \`proxy_pass\` to an upstream with \`keepalive 64\`, \`proxy_http_version 1.1\`, \`Connection \"\"\`, \`proxy_buffering off\`, request bodies buffered in memory (\`client_body_buffer_size 256k\`, so the 128 KB body never touches disk), \`access_log off\`, \`keepalive_requests\` raised so wrk's connections are never closed ([config](../../scripts/compare/nginx.conf.in))."
		echo "- HAProxy: \`nbthread $PROXY_CPUS\`, \`http-reuse always\`, keep-alive both sides, no logging ([config](../../scripts/compare/haproxy.cfg.in))."
		[[ " $TARGETS " != *" bare "* ]] || echo "- bare: the floor, [\`scripts/compare/bareproxy\`](../../scripts/compare/bareproxy/main.go), GOMAXPROCS=$PROXY_CPUS: a fasthttp server with kvca's server options forwarding every request with \`HostClient.Do\` over a keep-alive pool built like kvca's (hop-by-hop headers removed, no body parsing, no metrics, no upstream timeouts). What it costs per request is Go's runtime and fasthttp on this machine; kvca minus bare is kvca's own work (canonicalise, hash, table, scheduler, metrics, streaming relay)."
		memo_note=" Every run repeats one body, so strings of 256 bytes or more (every string of the bodies but the 1k body's system prompt) are found in the CBR memo after the first requests and compared rather than canonicalised and hashed again; \`KVCA_ARGS=\"--cbr-memo-bytes 0\"\` measures without it."
		[[ $KVCA_ARGS != *"cbr-memo-bytes 0"* ]] || memo_note=" The CBR memo is off: every string of every body is canonicalised and hashed."
		io_note=" Its public listener is served as deployed by default (\`--io auto\`): by its event loops (one per core, epoll, no goroutine per connection), TLS included."
		echo "- kvca: \`kvca serve --policy kvca --health-interval 0 --log-level warn${KVCA_ARGS:+ $KVCA_ARGS}\`, GOMAXPROCS=$PROXY_CPUS, one backend; it reads, canonicalises and hashes every body, which nginx and HAProxy do not.$memo_note$io_note"
		[[ " $TARGETS " != *" kvca_fasthttp "* ]] || echo "- kvca_fasthttp: the same with \`--io fasthttp\`: fasthttp's server and a goroutine per connection, as kvca served everything before its event loops."
		echo "- Bodies: from \`scripts/compare/genbody\` (deterministic): 1k = system prompt + one user message; 4k = system prompt plus three user turns with two assistant answers; 128k = a ~110 KB system prompt plus three turns; 512k and 1m = a 20 KB system prompt and turns of about 26 KB of plain text; tool512k and tool1m = an agent's late turn: six tool definitions, a system prompt of source code, then turns of an assistant tool call (arguments a JSON string) and its result (source code: escaped newlines, tabs and quotes, some non-ASCII); each is exactly 1024, 4096, 131072, 524288 or 1048576 bytes. agent = one agent session of that shape, 40 requests from 34 KB to 833 KB, each resending the last one's messages plus a tool call and its result, replayed in order (each request is the session's next turn). \`-stream\` sets \`\"stream\":true\`."
		[[ $TLS != 1 ]] || echo "- TLS: nginx, HAProxy and kvca terminate TLS 1.2/1.3 with the same throwaway P-256 certificate (openssl); wrk speaks HTTPS over keep-alive connections, so handshakes are rare and the cost measured is record encryption; the backend (and the direct target) stay plain HTTP."
		echo "- CPU per request: utime+stime of the proxy's processes (nginx master and workers, HAProxy's process, kvca's and the bare forwarder's process) from /proc/PID/stat before and after the measured run, divided by the requests wrk completed."
		echo
		echo "## How the $(nproc) cores were shared"
		echo
		other_med=$(tail -n +2 "$results" | cut -f16 | median)
		irq_med=$(tail -n +2 "$results" | cut -f17 | median)
		echo "Nothing is pinned. wrk (-t$THREADS), the mock backend and the proxy under test all run at once on the same $(nproc) cores, and each proxy gets as many workers/threads as there are cores, the same for all: nginx \`worker_processes $PROXY_CPUS\`, HAProxy \`nbthread $PROXY_CPUS\`, kvca and the bare and epoll forwarders \`GOMAXPROCS=$PROXY_CPUS\` (the epoll forwarder runs as many event loops). No proxy has a core to itself: its throughput is bounded by what wrk and the backend leave it, so a proxy that spends less CPU per request leaves more to the other two and serves more requests/s; that is the point of the comparison, and why CPU µs/request is the steadier figure. The proxies not under test sit idle in epoll. Pinning was not used: on $(nproc) cores any split (say proxy on one core, wrk and backend on the other) caps every proxy at one core and changes the direct baseline, and it cannot keep out other processes."
		echo
		echo "The machine is shared: other processes (other sessions' builds and tests, kernel threads) used a median of $other_med cores during the measured runs, and interrupts/softirq (mostly loopback TCP) $irq_med cores. Rounds are interleaved so that such load hits all targets alike, but single rounds still vary (see the req/s range column). Median cores used during the measured runs (CPU-seconds per second of wall time; \"whole machine\" is all busy CPU time from /proc/stat):"
		echo
		cores_table
		echo
		echo "## Results"
		echo
		echo "Ratios are taken between medians of the same run. On a shared, oversubscribed machine the p99 column mostly measures how long a runnable process waited for a core (scheduler slices of milliseconds), so it moves a lot between rounds; p50 and CPU µs/request are steadier."
		echo
		table
		echo
		if [[ " $TARGETS " == *" bare "* ]]; then
			echo "### The floor: a bare Go+fasthttp forwarder (same run)"
			echo
			echo "How much of the distance to nginx a Go+fasthttp proxy that does nothing but forward already has (bare − nginx), and how much is kvca's own work on fasthttp (kvca_fasthttp − bare)."
			echo
			floor_table
			echo
		fi
		if [[ " $TARGETS " == *" "@(epoll|loopkvca)" "* ]]; then
			echo "### The other floor: a Go event-loop forwarder (same run)"
			echo
			echo "[\`scripts/compare/epollproxy\`](../../scripts/compare/epollproxy/main.go), GOMAXPROCS=$PROXY_CPUS: nginx's I/O model written in Go, one event loop per core on its own OS thread (epoll, edge-triggered, its own SO_REUSEPORT listener and its own keep-alive backend connections, raw read and write system calls), no goroutine per connection, no HTTP library; headers forwarded as they came and bodies relayed as they arrive, Content-Length messages only. What separates it from bare is Go's scheduler and fasthttp; what separates it from nginx is Go itself. loopkvca is the same forwarder run with \`-route\`: on every request it reads the whole body and does kvca's routing work inline, with kvca's packages (canonicalise and hash with the CBR memo, scheduler pick with policy kvca and load reservation, the table learning the chain from a 2xx, the load released after the answer): what kvca's work costs on event loops. Neither is kvca: no retries, timeouts, health, metrics, chunked bodies or header rewriting."
			echo
			epoll_table
			echo
		fi
		echo "### Targets (same run)"
		echo
		echo "| body | kvca/nginx req/s | kvca/HAProxy req/s | throughput target (≥1.0, ≥0.9 at 128k) | kvca/nginx p99 | p99 target (≤1.0) |"
		echo "|---|---:|---:|---|---:|---|"
		targets_check
		echo
		echo "<details><summary>Every run</summary>"
		echo
		echo "| body | target | round | requests | req/s | p50 µs | p99 µs | proxy CPU µs/req | mock CPU µs/req | wrk cores | mock cores | proxy cores | machine cores | non-2xx | errors | other cores | irq cores | proxy user µs/req | proxy system µs/req |"
		echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
		tail -n +2 "$results" | awk -F'\t' '{ s = "|"; for (i = 1; i <= NF; i++) s = s " " $i " |"; print s }'
		echo
		echo "</details>"
	} >"$OUT.tmp"
	mv "$OUT.tmp" "$OUT"
	log "wrote $OUT"
fi

# Errors or non-2xx anywhere fail the run (after the report is written).
bad=$(awk -F'\t' 'NR > 1 { s += $14 + $15 } END { print s + 0 }' "$results")
((bad == 0)) || die "$bad non-2xx responses or socket errors during the runs (raw output: $tmp/raw)"
