#!/usr/bin/env bash
# Start or stop a mesh of shade-peer processes on this machine, on loopback.
#
#   deploy/local/mesh.sh start N DIR [shade-peer flags...]
#   deploy/local/mesh.sh stop DIR
#   deploy/local/mesh.sh status DIR
#
# Peer i is named n<i>, listens on DIR/n<i>.sock for trainers, gossips on
# 127.0.0.1:$((BASE+2*i)) and speaks QUIC on the next port, serves
# /metrics, /healthz and /readyz on 127.0.0.1:$((BASE+100+i)); all share a
# development CA in DIR/tls. Logs go to DIR/n<i>.log, PIDs to DIR/n<i>.pid.
# Environment: SHADE_BIN (default bin), SHADE_BASE_PORT (default 17946).
set -euo pipefail
BIN=${SHADE_BIN:-bin}
BASE=${SHADE_BASE_PORT:-17946}

usage() { sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }

start() {
	local n=$1 dir=$2
	shift 2
	mkdir -p "$dir/tls"
	[ -x "$BIN/shade-peer" ] || { echo "no $BIN/shade-peer: run 'make build'" >&2; exit 1; }
	for i in $(seq 0 $((n - 1))); do
		local gossip=$((BASE + 2 * i)) quic=$((BASE + 2 * i + 1))
		"$BIN/shade-peer" --name "n$i" --socket "$dir/n$i.sock" \
			--gossip-addr "127.0.0.1:$gossip" --peer-addr "127.0.0.1:$quic" --seeds "127.0.0.1:$BASE" \
			--admin-addr "127.0.0.1:$((BASE + 100 + i))" \
			--dev-tls-dir "$dir/tls" --gossip-profile local --expect "$n" --log-format json "$@" \
			>"$dir/n$i.log" 2>&1 &
		echo $! >"$dir/n$i.pid"
	done
	# Ready when every peer answers PING, sees all n members and shares
	# its datasets with all of them (a joining peer advertises its datasets
	# a moment after it joins).
	for _ in $(seq 300); do
		local ready=0
		for i in $(seq 0 $((n - 1))); do
			local members
			members=$(redis-cli -s "$dir/n$i.sock" SHADE.STATS 2>/dev/null |
				/usr/bin/python3 -c 'import json,sys; st=json.load(sys.stdin); print(min([len(st["members"])] + [len(d.get("sharing", st["members"])) for d in st["datasets"]]))' 2>/dev/null || echo 0)
			[ "$members" = "$n" ] && ready=$((ready + 1))
		done
		if [ "$ready" = "$n" ]; then
			echo "mesh of $n peers ready: sockets $dir/n0.sock .. $dir/n$((n - 1)).sock"
			return 0
		fi
		for i in $(seq 0 $((n - 1))); do
			if ! kill -0 "$(cat "$dir/n$i.pid")" 2>/dev/null; then
				echo "peer n$i exited:" >&2
				tail -5 "$dir/n$i.log" >&2
				stop "$dir"
				exit 1
			fi
		done
		sleep 0.1
	done
	echo "mesh not ready after 30s" >&2
	stop "$dir"
	exit 1
}

stop() {
	local dir=$1 pids=()
	for f in "$dir"/n*.pid; do
		[ -e "$f" ] || continue
		pids+=("$(cat "$f")")
		rm -f "$f"
	done
	[ ${#pids[@]} -eq 0 ] && return 0
	kill -TERM "${pids[@]}" 2>/dev/null || true
	for _ in $(seq 100); do
		local alive=0
		for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
		[ $alive = 0 ] && return 0
		sleep 0.1
	done
	kill -KILL "${pids[@]}" 2>/dev/null || true
}

status() {
	local dir=$1
	for f in "$dir"/n*.pid; do
		[ -e "$f" ] || continue
		local name pid
		name=$(basename "$f" .pid)
		pid=$(cat "$f")
		if kill -0 "$pid" 2>/dev/null; then echo "$name pid $pid running"; else echo "$name pid $pid dead"; fi
	done
}

case "${1:-}" in
start) [ $# -ge 3 ] || usage; shift; start "$@" ;;
stop) [ $# -eq 2 ] || usage; stop "$2" ;;
status) [ $# -eq 2 ] || usage; status "$2" ;;
*) usage ;;
esac
