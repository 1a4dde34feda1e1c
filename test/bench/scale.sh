#!/usr/bin/env bash
# Scale on paper: a mesh of PEERS peers simulated in one process, without
# network, through the node's own ring (mesh/ring) and sampling code. Prints
# the samples that move when one peer joins or leaves beside the ideal 1/N,
# the load spread before and after a failure, and the leader's work for one
# epoch of SAMPLES samples beside the epoch's time and link budget, with a
# CPU profile of that epoch. Usage:
#   test/bench/scale.sh [peers] [samples]
# Three runs: shadectl scale's defaults (271 partitions, a mesh of earlier
# builds) with an 8-rank job; the leader with one rank per peer; the ring
# with 16381 partitions, what a new mesh takes.
set -euo pipefail
cd "$(dirname "$0")/../.."
PEERS=${1:-1000}
SAMPLES=${2:-1280000}
BIN=${BIN:-bin}
go build -o "$BIN/" ./cmd/shadectl
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
common=(--peers "$PEERS" --samples "$SAMPLES" --replicas 2 --trials 5 --seed 1)

echo "### 1. the ring of 271 partitions (a mesh of earlier builds) and the leader of an 8-rank job"
echo "\$ shadectl scale ${common[*]} --world 8 --cpuprofile leader.prof"
"$BIN/shadectl" scale "${common[@]}" --world 8 --cpuprofile "$dir/leader.prof" 2>/dev/null
echo
echo "### 2. the leader with one rank on every peer"
echo "\$ shadectl scale ${common[*]} --world $PEERS --only leader"
"$BIN/shadectl" scale "${common[@]}" --world "$PEERS" --only leader 2>/dev/null
echo
echo "### 3. the ring with 16381 partitions (a new mesh's)"
echo "\$ shadectl scale ${common[*]} --partitions 16381 --only ring"
"$BIN/shadectl" scale "${common[@]}" --partitions 16381 --only ring 2>/dev/null
echo
echo "### 4. CPU profile of run 1's leader epoch (each broadcast encoded once and framed 8 times, not once per peer)"
go tool pprof -top -nodecount=30 "$BIN/shadectl" "$dir/leader.prof" 2>/dev/null | sed -n '/^Duration/p;/flat%/,$p'
echo
go tool pprof -top -cum -nodecount=40 "$BIN/shadectl" "$dir/leader.prof" 2>/dev/null | sed -n '/flat%/,$p' | grep -E 'main\.|sampling\.|ring\.|msgpack/v5\.\(\*Encoder\)\.Encode$|CheckMsgpack|Unmarshal|consistent|flat%'
