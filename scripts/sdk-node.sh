#!/usr/bin/env bash
# Drives kvca with the official `openai` npm package on Node.js (>= 20):
# builds kvca, starts three mock engines and two kvca proxies on loopback,
# installs scripts/sdk-node's locked dependencies, runs test.mjs, and stops
# everything on any exit. Needs Go, Node.js 20+ and npm (registry access for
# the first install). Exits non-zero if anything fails.
#
#   scripts/sdk-node.sh            # from anywhere in the checkout
#   KEEP_LOGS=1 scripts/sdk-node.sh  # print the processes' logs even on success
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dir="$root/scripts/sdk-node"
if [[ -x /usr/local/go/bin/go ]]; then
	PATH="/usr/local/go/bin:$PATH"
fi
for tool in go node npm timeout; do
	command -v "$tool" >/dev/null || { echo "sdk-node: $tool not found" >&2; exit 1; }
done
node_major=$(node -p 'process.versions.node.split(".")[0]')
if ((node_major < 20)); then
	echo "sdk-node: Node.js 20 or later required, found $(node --version)" >&2
	exit 1
fi

# KVCA_* variables are read by every kvca flag; one left in the caller's
# environment (KVCA_LISTEN, KVCA_BACKEND, …) would silently reconfigure
# the processes below.
while read -r v; do unset "$v"; done < <(compgen -e | grep '^KVCA_' || true)

work=$(mktemp -d "${TMPDIR:-/tmp}/kvca-sdk-node.XXXXXX")
pids=()
status=1

stop() {
	# Ask politely, wait a bounded time, then insist: a stuck process must
	# not hang CI, and none may outlive the script.
	local pid
	for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
	for _ in $(seq 50); do
		local alive=0
		for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
		((alive)) || break
		sleep 0.1
	done
	for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
	for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
	if ((status != 0)) || [[ -n "${KEEP_LOGS:-}" ]]; then
		for f in "$work"/*.log; do
			[[ -e "$f" ]] || continue
			echo "----- $(basename "$f")" >&2
			tail -n 50 "$f" >&2
		done
	fi
	rm -rf "$work"
}
trap stop EXIT
trap 'exit 130' INT TERM

echo "sdk-node: building kvca" >&2
(cd "$root" && go build -o "$work/kvca" ./cmd/kvca)

# Six free loopback ports, held open together while chosen so that no two
# are the same, then released for the processes below.
read -r p_e0 p_e1 p_e2 p_kvca p_admin p_broken < <(node -e '
const net = require("net");
const servers = Array.from({ length: 6 }, () => net.createServer());
Promise.all(servers.map((s) => new Promise((ok) => s.listen(0, "127.0.0.1", ok)))).then(() => {
  console.log(servers.map((s) => s.address().port).join(" "));
  servers.forEach((s) => s.close());
});')

start() { # name, command...
	local name=$1
	shift
	"$@" >"$work/$name.log" 2>&1 &
	pids+=($!)
}

# Fast engines: the test asserts content, usage and routing, never timing.
mock_flags=(--prefill-overhead 1ms --prefill-per-token 1us --decode-per-token 1ms)
start e0 "$work/kvca" mock --listen "127.0.0.1:$p_e0" --name e0 --model mock --model mock-e0 "${mock_flags[@]}"
start e1 "$work/kvca" mock --listen "127.0.0.1:$p_e1" --name e1 --model mock --model mock-e1 "${mock_flags[@]}"
# e2 cuts every stream after 3 events, behind its own kvca.
start e2 "$work/kvca" mock --listen "127.0.0.1:$p_e2" --name e2 --model mock --kill-after-chunks 3 "${mock_flags[@]}"

# Engines first, as in a real rollout: kvca asks them for their models at
# start (and then only every 30s), so they should be up when it does.
wait_ready() { # url
	local url=$1
	for _ in $(seq 150); do
		for pid in "${pids[@]}"; do
			kill -0 "$pid" 2>/dev/null || { echo "sdk-node: a process exited during start-up" >&2; return 1; }
		done
		if node -e 'fetch(process.argv[1]).then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))' "$url"; then
			return 0
		fi
		sleep 0.2
	done
	echo "sdk-node: $url not ready after 30s" >&2
	return 1
}
for p in "$p_e0" "$p_e1" "$p_e2"; do wait_ready "http://127.0.0.1:$p/health"; done

# Small blocks so the tests' short conversations span several of them.
serve_flags=(--block-size 64 --hash-key 000102030405060708090a0b0c0d0e0f --health-interval 1s --log-level warn --route-header)
start kvca "$work/kvca" serve --listen "127.0.0.1:$p_kvca" --admin-listen "127.0.0.1:$p_admin" \
	--backend "http://127.0.0.1:$p_e0" --backend "http://127.0.0.1:$p_e1" "${serve_flags[@]}"
start kvca-broken "$work/kvca" serve --listen "127.0.0.1:$p_broken" --admin-listen "" \
	--backend "http://127.0.0.1:$p_e2" "${serve_flags[@]}"

# Both proxies ready, i.e. each sees a healthy engine.
wait_ready "http://127.0.0.1:$p_kvca/ready"
wait_ready "http://127.0.0.1:$p_broken/ready"

echo "sdk-node: installing the openai package (locked)" >&2
cd "$dir"
if [[ -f package-lock.json ]]; then
	timeout 300 npm ci --no-audit --no-fund --loglevel=error
else
	timeout 300 npm install --no-audit --no-fund --loglevel=error
fi

echo "sdk-node: running test.mjs on $(node --version) with openai $(node -p 'require("./node_modules/openai/package.json").version')" >&2
KVCA_BASE_URL="http://127.0.0.1:$p_kvca/v1" \
	KVCA_BROKEN_URL="http://127.0.0.1:$p_broken/v1" \
	KVCA_ADMIN_URL="http://127.0.0.1:$p_admin" \
	timeout 180 node --test --test-reporter=spec test.mjs
status=0
