#!/usr/bin/env bash
# Side by side: redis-benchmark against shade-peer and against redis-server,
# both on a Unix socket, in one run, with the ratio. Usage:
#   test/bench/socket_vs_redis.sh [requests] [pipeline]
set -euo pipefail
cd "$(dirname "$0")/../.."
N=${1:-200000}
P=${2:-16}
BIN=${BIN:-bin}
[ -x "$BIN/shade-peer" ] || go build -o "$BIN/" ./cmd/...
command -v redis-benchmark >/dev/null || ./.ci/deps.sh redis-server redis-tools

dir=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done; rm -rf "$dir"; }
trap cleanup EXIT

redis-server --port 0 --unixsocket "$dir/redis.sock" --unixsocketperm 660 --save "" --appendonly no \
	--daemonize no --logfile "$dir/redis.log" &
pids+=($!)
"$BIN/shade-peer" --name bench --socket "$dir/shade.sock" --cache-size 4GiB --log-level warn 2>"$dir/shade.log" &
pids+=($!)
for s in redis.sock shade.sock; do
	for _ in $(seq 100); do [ -S "$dir/$s" ] && break; sleep 0.1; done
	[ -S "$dir/$s" ] || { echo "no socket $s"; cat "$dir"/*.log; exit 1; }
done

rps() { # socket size test -> requests per second
	redis-benchmark -s "$1" -t "$3" -d "$2" -P "$P" -n "$N" -c 8 -r 1000 --csv 2>/dev/null |
		awk -F'"' -v t="$(echo "$3" | tr a-z A-Z)" '$2==t {print $4}'
}
printf '%-6s %-9s %14s %14s %8s\n' test value redis-server shade-peer ratio
for size in 4096 102400; do
	for t in set get; do
		r=$(rps "$dir/redis.sock" $size $t)
		s=$(rps "$dir/shade.sock" $size $t)
		printf '%-6s %-9s %14.0f %14.0f %8.2f\n' $t $size "$r" "$s" "$(awk -v a="$s" -v b="$r" 'BEGIN{print a/b}')"
	done
done
echo "(redis-benchmark -s <socket> -P $P -n $N -c 8 -r 1000; rps = requests per second; ratio = shade-peer / redis-server)"
