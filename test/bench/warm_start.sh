#!/usr/bin/env bash
# Warm start, measured: train a job cold on a peer that keeps its scores in
# a state directory, restart the peer, train the same job again, and print
# the hit ratio per epoch side by side. Usage:
#   test/bench/warm_start.sh [dataset-root] [epochs] [cache-size]
# dataset-root holds train/ and test/ (shadectl dataset import-idx --dst).
set -euo pipefail
cd "$(dirname "$0")/../.."
. test/bench/lib.sh
DATA=${1:-.data/fashion-mnist}
EPOCHS=${2:-3}
CACHE=${3:-330KiB}
BIN=${BIN:-bin}
[ -x "$BIN/shade-peer" ] || go build -o "$BIN/" ./cmd/...
dir=$(mktemp -d)
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; rm -rf "$dir"; }
trap cleanup EXIT

run() { # label -> appends to $dir/runs.csv
	"$BIN/shade-peer" --name warm --socket "$dir/s.sock" --dataset "fmnist-train=$DATA/train" \
		--cache-size "$CACHE" --state-dir "$dir/state" --prefetch 0 --log-level warn 2>>"$dir/peer.log" &
	pid=$!
	wait_socket "$dir/s.sock" || { cat "$dir/peer.log"; exit 1; }
	PYTHONPATH=client/python /usr/bin/python3 test/train/train_fmnist.py --sockets "$dir/s.sock" --world 3 \
		--epochs "$EPOCHS" --test-dir "$DATA/test" --csv "$dir/runs.csv" --label "$1" | grep '^epoch' | sed "s/^/$1 /"
	kill -TERM "$pid"; wait "$pid" || true; pid=
}
run cold
run warm
echo
awk -F, 'NR>1 {h[$1","$2]=$3; e[$2]=1} END {
	printf "%-6s %10s %10s\n", "epoch", "cold", "restarted";
	for (k = 0; (k "") in e; k++) printf "%-6d %9.2f%% %9.2f%%\n", k, 100*h["cold,"k], 100*h["warm,"k] }' "$dir/runs.csv"
echo "(hit ratio per epoch; cache $CACHE; the restarted job starts from the scores the cold one saved in --state-dir)"
