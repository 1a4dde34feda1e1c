#!/usr/bin/env bash
# A cache warming up: redis-benchmark SETs small values under random keys
# into a fresh peer, so that every SET of a new key is admitted (the store
# allocates and indexes it, the policy takes it in), and reports the
# client's latency, the longest above all: while the peer's index or its
# policy grows, every request that needs them waits. With several builds
# in BINS, each runs in turn, ROUNDS times, and the table gives each
# build's rounds and its medians against the first's. Usage:
#   BINS="<dir> <dir>" test/bench/fill_latency.sh [requests] [value-bytes]
# requests SETs (default 3,000,000) over as many random keys (about 63%
# distinct: 1.9 million residents), pipelines of 16, 8 clients.
# "anon MiB" is the peer's anonymous memory once the keys are in
# (RssAnon: its Go heap and runtime, not the cache's shared memory);
# "index B" and "policy B" the bytes a key held of the cache's index and
# of the policy's tables (SHADE.STATS cache_index_bytes, policy_bytes),
# outside the Go heap, in the last round.
# Environment: BINS (directories holding shade-peer; default bin), ROUNDS
# (default 2), CACHE (the peer's --cache-size; default 2GiB).
set -euo pipefail
cd "$(dirname "$0")/../.."
. test/bench/lib.sh
N=${1:-3000000}
SIZE=${2:-64}
BINS=${BINS:-bin}
ROUNDS=${ROUNDS:-2}
command -v redis-benchmark >/dev/null || ./.ci/deps.sh redis-server redis-tools
[ "$BINS" != bin ] || [ -x bin/shade-peer ] || go build -o bin/ ./cmd/...
dir=$(mktemp -d)
pid=
cleanup() { [ -z "$pid" ] || { kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; }; rm -rf "$dir"; }
trap cleanup EXIT

for r in $(seq "$ROUNDS"); do
	for b in $BINS; do
		"$b/shade-peer" --name bench --socket "$dir/shade.sock" --cache-size "${CACHE:-2GiB}" \
			--admin-addr off --log-level warn 2>"$dir/shade.log" &
		pid=$!
		wait_socket "$dir/shade.sock" || { cat "$dir/shade.log"; exit 1; }
		# "SET",rps,avg,min,p50,p95,p99,max (ms)
		line=$(redis-benchmark -s "$dir/shade.sock" -t set -n "$N" -r "$N" -d "$SIZE" -P 16 -c 8 --csv | tail -1 | tr -d '"')
		held=$(redis-cli -s "$dir/shade.sock" dbsize)
		stats=$(redis-cli -s "$dir/shade.sock" shade.stats)
		index=$(grep -o '"cache_index_bytes":[0-9]*' <<<"$stats" | cut -d: -f2)
		policy=$(grep -o '"policy_bytes":[0-9]*' <<<"$stats" | cut -d: -f2)
		anon=$(awk '$1 == "RssAnon:" {print int($2 / 1024)}' "/proc/$pid/status")
		kill "$pid"
		wait "$pid" 2>/dev/null || true
		pid=
		rm -f "$dir/shade.sock"
		echo "$b $r $held $anon ${index:-0} ${policy:-0} ${line#SET,}" | tr ',' ' ' >>"$dir/runs"
	done
done
awk -v first="${BINS%% *}" '
	function median(s,   v, n, i, j, t) {
		n = split(s, v, " ")
		for (i = 2; i <= n; i++) for (j = i; j > 1 && v[j - 1] + 0 > v[j] + 0; j--) { t = v[j]; v[j] = v[j - 1]; v[j - 1] = t }
		return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
	}
	{
		if (!($1 in seen)) { seen[$1] = 1; order[k++] = $1 }
		rps[$1] = rps[$1] " " $7; p99[$1] = p99[$1] " " $12; mx[$1] = mx[$1] " " $13; held[$1] = $3; anon[$1] = anon[$1] " " $4
		ib[$1] = $3 > 0 ? $5 / $3 : 0; pb[$1] = $3 > 0 ? $6 / $3 : 0
	}
	END {
		printf "%-28s %10s %20s %8s %9s %26s %26s %30s %9s\n", "build", "keys held", "anon MiB (rounds)", "index B", "policy B", "SETs/s (rounds)", "p99 ms (rounds)", "longest ms (rounds)", "longest x"
		for (i = 0; i < k; i++) {
			b = order[i]
			printf "%-28s %10s %20s %8.1f %9.1f %26s %26s %30s %9.2f\n", b, held[b], anon[b], ib[b], pb[b], rps[b], p99[b], mx[b], median(mx[b]) / median(mx[first])
		}
		print "(redis-benchmark -t set -P 16 -c 8 --csv: p99 and longest are the client'"'"'s latencies of a pipeline of 16;"
		print " longest x: the median of the build'"'"'s longest over the first build'"'"'s)"
	}' "$dir/runs"
