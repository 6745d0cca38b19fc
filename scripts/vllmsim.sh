#!/usr/bin/env bash
# Replays the bench's synthetic multi-turn chat through kvca in front of 4
# instances of llm-d's vLLM simulator (github.com/llm-d/llm-d-inference-sim,
# an independent Go implementation of vLLM's OpenAI API, prefix cache and
# Prometheus names), once per policy on fresh simulators, and prints the
# simulators' own prefix-cache hit rate beside kvca's prediction, and the
# client's TTFT. Not part of `make test`: it needs git, network access to
# GitHub and the Go module proxy for the first build, and about 8 minutes.
#
#   scripts/vllmsim.sh                          # build (once) and run
#   scripts/vllmsim.sh --policies kvca-cost,round-robin --json out.json
#   VLLMSIM_ARGS="--block-size 16 --kv-cache-size 4096 --max-num-seqs 6 ..." \
#     scripts/vllmsim.sh --sessions 96 ...   # other engines (docs/placement.md)
#
# Extra arguments go to `kvca-bench bench` and override the defaults below.
# The simulator is built at a pinned commit into $VLLMSIM_DIR (default
# ~/.cache/kvca-vllmsim), never into the checkout or kvca's go.mod.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [[ -x /usr/local/go/bin/go ]]; then
	PATH="/usr/local/go/bin:$PATH"
fi
for tool in go git; do
	command -v "$tool" >/dev/null || { echo "vllmsim: $tool not found" >&2; exit 1; }
done

# The commit measured in docs/bench.md (v0.10.2-41-geec055a).
sim_repo=${VLLMSIM_REPO:-https://github.com/llm-d/llm-d-inference-sim.git}
sim_commit=${VLLMSIM_COMMIT:-eec055a39e6bbc1adbcb54f88f24f36b7f94e781}
router_repo=${VLLMSIM_ROUTER_REPO:-https://github.com/llm-d/llm-d-router.git}
dir=${VLLMSIM_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kvca-vllmsim}
sim="$dir/llm-d-inference-sim-${sim_commit:0:12}"
mkdir -p "$dir"

if [[ ! -x "$sim" ]]; then
	src="$dir/src"
	if [[ ! -d "$src/.git" ]]; then
		git clone --quiet "$sim_repo" "$src"
	fi
	git -C "$src" fetch --quiet origin
	git -C "$src" checkout --quiet --force "$sim_commit"
	echo "vllmsim: building the simulator at ${sim_commit:0:12}" >&2
	if ! (cd "$src" && go build -o "$sim" ./cmd/llm-d-inference-sim); then
		# A module proxy without github.com/llm-d/llm-d-router: build its
		# required version from source instead.
		ver=$(cd "$src" && go mod edit -print | awk '$1 == "github.com/llm-d/llm-d-router" { print $2 }')
		echo "vllmsim: building against llm-d-router $ver from source" >&2
		if [[ ! -d "$dir/router/.git" ]]; then
			git clone --quiet "$router_repo" "$dir/router"
		fi
		git -C "$dir/router" fetch --quiet --tags origin
		git -C "$dir/router" checkout --quiet --force "$ver"
		(cd "$src" && go mod edit -replace "github.com/llm-d/llm-d-router=$dir/router" &&
			go build -o "$sim" ./cmd/llm-d-inference-sim)
	fi
fi

echo "vllmsim: building kvca-bench" >&2
(cd "$root" && go build -o "$dir/kvca-bench" ./cmd/kvca-bench)

# KVCA_* variables are read by every kvca flag; one left in the caller's
# environment would silently reconfigure the proxies.
while read -r v; do unset "$v"; done < <(compgen -e | grep '^KVCA_' || true)

# The simulator: the bench's model name, its built-in tokenizer (one token
# per word or punctuation mark, which counts the bench's filler text as
# the mocks do; no HuggingFace lookup or render service), its prefix cache
# on (ZMQ events off; POD_IP names it in them), 768 blocks of 16 tokens (12288 tokens,
# 17% of the working set over the 4), 4 sequences at once (a request that
# does not fit the KV blocks still free fails with a 500 there, where vLLM
# would queue it), prefill 5 ms + 100 µs per uncached token, 2 ms per
# output token. Its durations are real time: --time-scale 1.
# VLLMSIM_ARGS replaces the cache, batch and timing flags (the part from
# --block-size on). --engine-command is split at spaces, hence no quoting
# inside it.
sim_args=${VLLMSIM_ARGS:-"--block-size 16 --kv-cache-size 768 --max-num-seqs 4 --max-model-len 65536 \
--prefill-overhead 5ms --prefill-time-per-token 100us --inter-token-latency 2ms"}
engine="env POD_IP=127.0.0.1 $sim --port {port} --model mock --force-dummy-tokenizer --enable-kvcache --zmq-endpoint= $sim_args"

exec "$dir/kvca-bench" bench --engines 4 --engine-command "$engine" --block-tokens 16 \
	--time-scale 1 --arrival-scale 0.5 --sessions 300 --rate 5 --system-tokens 1024 \
	--user-tokens 128 --output-tokens 32 --max-turns 8 --think-time 5s \
	--policies kvca-cost,ttft,cost,round-robin,least-loaded,sticky-oracle,kvca-cost/no-telemetry "$@"
