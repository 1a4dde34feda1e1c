#!/usr/bin/env bash
# What an idle mesh costs: start a mesh of peers on loopback with no
# trainer and no dataset, let it settle, and count the peers' CPU and
# thread switches (voluntary and not, every thread) over a window. With
# several builds in BINS, each runs in turn, ROUNDS times, and the table
# gives each against the first. Usage:
#   test/bench/idle.sh [peers] [seconds] [gossip-profile]
# Environment: BINS (directories holding shade-peer; default bin), ROUNDS
# (default 2), SHADE_BASE_PORT (default 31946).
set -euo pipefail
cd "$(dirname "$0")/../.."
. test/bench/lib.sh
PEERS=${1:-3}
SECS=${2:-20}
PROFILE=${3:-lan}
BINS=${BINS:-bin}
ROUNDS=${ROUNDS:-2}
export SHADE_BASE_PORT=${SHADE_BASE_PORT:-31946}
[ "$BINS" != bin ] || [ -x bin/shade-peer ] || go build -o bin/ ./cmd/...
dir=$(mktemp -d)
cleanup() { [ -f "$dir/mesh/n0.pid" ] && deploy/local/mesh.sh stop "$dir/mesh" >/dev/null 2>&1; rm -rf "$dir"; }
trap cleanup EXIT

for r in $(seq "$ROUNDS"); do
	for b in $BINS; do
		SHADE_BIN=$b deploy/local/mesh.sh start "$PEERS" "$dir/mesh" --gossip-profile "$PROFILE" --log-level warn >/dev/null
		pids=()
		for i in $(seq 0 $((PEERS - 1))); do pids+=("$(cat "$dir/mesh/n$i.pid")"); done
		sleep 5 # joined, leader elected, start-up work done
		c0=$(cpu_seconds "${pids[@]}") s0=$(switches "${pids[@]}")
		sleep "$SECS"
		c1=$(cpu_seconds "${pids[@]}") s1=$(switches "${pids[@]}")
		echo "$b $r $(awk -v a="$c0" -v b="$c1" 'BEGIN {print b - a}') $((s1 - s0))" >>"$dir/runs"
		deploy/local/mesh.sh stop "$dir/mesh" >/dev/null
		rm -rf "$dir/mesh"
	done
done
awk -v secs="$SECS" -v peers="$PEERS" -v first="${BINS%% *}" '
	{ cpu[$1] += $3; sw[$1] += $4; n[$1]++; if (!($1 in seen)) { seen[$1] = 1; order[k++] = $1 } }
	END {
		printf "%-24s %14s %16s %10s\n", "build", "CPU/peer", "switches/s/peer", "CPU ratio"
		for (i = 0; i < k; i++) {
			b = order[i]; c = cpu[b] / n[b]; s = sw[b] / n[b]
			printf "%-24s %13.2f%% %16.0f %9.2fx\n", b, 100 * c / secs / peers, s / secs / peers, c / (cpu[first] / n[first])
		}
	}' "$dir/runs"
echo "($PEERS idle peers, gossip profile $PROFILE, ${SECS} s a round, $ROUNDS rounds; CPU as a share of one core)"
