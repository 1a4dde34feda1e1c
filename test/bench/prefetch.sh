#!/usr/bin/env bash
# Prefetch, measured: how long PyTorch trainers wait for data per epoch when
# the dataset lives on a slow remote store, with the peers' read-ahead of the
# published order off and on. Usage:
#   test/bench/prefetch.sh [dataset-root] [epochs]
# dataset-root holds train/ and test/ (shadectl dataset import-idx --dst); by
# default the first 6,000 images of Fashion-MNIST are imported into a
# temporary directory.
#
# A local mesh of 3 peers (--replicas 1), 3 ranks (one per peer) training the
# CNN of test/train/train_fmnist.py with PADS + APP. Four runs, each on a
# fresh mesh with the same seed:
#   floor     20% cache, source not throttled (local disk), no prefetch
#   floor+pf  the same with --prefetch $PREFETCH: what loading costs the
#             trainer when the source is out of the way
#   source    source throttled, no cache (4 KiB per peer), no prefetch: the
#             remote store alone
#   off       source throttled, 20% cache, no prefetch
#   on        source throttled, 20% cache, --prefetch $PREFETCH
# Each rank reports per epoch the seconds its loop waited for the next
# minibatch (data wait) and that share of the epoch; the table prints both
# (averaged over the ranks) and the ratios. Environment: THROTTLE (default
# rate=4MiB/s,latency=20ms,concurrency=32, per peer), FRACTION (0.2),
# PREFETCH (1024), WORKERS (DataLoader workers per rank, 1), BIN (bin),
# SHADE_BASE_PORT (27946).
set -euo pipefail
cd "$(dirname "$0")/../.."
DATA=${1:-}
EPOCHS=${2:-6}
THROTTLE=${THROTTLE:-rate=4MiB/s,latency=20ms,concurrency=32}
FRACTION=${FRACTION:-0.2}
PREFETCH=${PREFETCH:-1024}
WORKERS=${WORKERS:-1}
BIN=${BIN:-bin}
PEERS=3
export SHADE_BIN=$BIN SHADE_BASE_PORT=${SHADE_BASE_PORT:-27946}
[ -x "$BIN/shade-peer" ] && [ -x "$BIN/shadectl" ] || go build -o "$BIN/" ./cmd/...
work=$(mktemp -d)
cleanup() { deploy/local/mesh.sh stop "$work/mesh" >/dev/null 2>&1 || true; rm -rf "$work"; }
trap cleanup EXIT
if [ -z "$DATA" ]; then
	"$BIN/shadectl" dataset import-idx --limit 6000 --dst "$work/fmnist" 2>/dev/null
	DATA=$work/fmnist
fi
bytes=$("$BIN/shadectl" dataset index --json "$DATA/train" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["bytes"])')
cache=$(/usr/bin/python3 -c "print(max(65536, int($FRACTION * $bytes / $PEERS) // 4096 * 4096))")
echo "# $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); dataset $DATA/train ($bytes bytes);" \
	"$PEERS peers, cache $cache bytes each ($FRACTION of the data over the mesh); source throttle $THROTTLE per peer"

. test/bench/lib.sh
cpu() { # seconds of CPU (user + system) the peers used so far
	local pids=()
	for f in "$work"/mesh/n*.pid; do pids+=("$(cat "$f")"); done
	cpu_seconds "${pids[@]}"
}

run() { # label cache-size prefetch throttle
	deploy/local/mesh.sh start "$PEERS" "$work/mesh" --dataset "fmnist-train=$DATA/train" --cache-size "$2" \
		--replicas 1 --prefetch "$3" --source-throttle "$4" --policy app --pads on --seed 0 --log-level warn >/dev/null
	local socks="$work/mesh/n0.sock,$work/mesh/n1.sock,$work/mesh/n2.sock"
	if ! OMP_NUM_THREADS=1 /usr/bin/python3 test/train/train_fmnist.py --sockets "$socks" --world "$PEERS" \
		--epochs "$EPOCHS" --workers "$WORKERS" --test-dir "$DATA/test" --csv "$work/runs.csv" --label "$1" \
		>"$work/$1.log" 2>&1; then
		echo "training ($1) failed:" >&2
		tail -20 "$work/$1.log" >&2
		exit 1
	fi
	grep '^epoch' "$work/$1.log" | sed "s/^/$1 /"
	echo "$1 peers' CPU: $(cpu) s"
	deploy/local/mesh.sh stop "$work/mesh"
}

probe() { # what loading one minibatch costs a trainer here, every sample in the peer's memory
	"$BIN/shade-peer" --name probe --socket "$work/probe.sock" --dataset "fmnist-train=$DATA/train" \
		--cache-size 64MiB --prefetch 0 --admin-addr off --log-level warn 2>>"$work/probe.log" &
	local pid=$!
	for _ in $(seq 100); do [ -S "$work/probe.sock" ] && break; sleep 0.1; done
	OMP_NUM_THREADS=1 /usr/bin/python3 - "$work/probe.sock" <<'PY' || true
import random, sys, time
sys.path.insert(0, "client/python")
import shade
from shade.torch import _image_array, _images_tensor
sock, name = sys.argv[1], "fmnist-train"
n = len(shade.Client(sock).manifest(name))
ids = list(range(n))
random.Random(1).shuffle(ids)
ids = ids[:2048]
out = []
for shared in (False, True):
    c = shade.Client(sock, shared_memory=shared)
    c.mget(name, ids)  # now every one is in the peer's memory
    tm = td = 0.0
    for b in range(0, len(ids), 64):
        t0 = time.perf_counter()
        blobs = c.mget(name, ids[b:b + 64])
        t1 = time.perf_counter()
        _images_tensor([_image_array(x) for x in blobs])
        td += time.perf_counter() - t1
        tm += t1 - t0
    k = len(ids) // 64
    out.append(f"{'zero-copy' if shared else 'MGET'} {1000 * tm / k:.1f} ms + PNG decode {1000 * td / k:.1f} ms")
print("probe: one minibatch of 64 samples from the peer's memory costs a trainer here: " + "; ".join(out))
PY
	kill -TERM "$pid"
	wait "$pid" || true
}
start=$(date +%s)
run floor "$cache" 0 off
run floor+pf "$cache" "$PREFETCH" off
run source 4KiB 0 "$THROTTLE"
run off "$cache" 0 "$THROTTLE"
run on "$cache" "$PREFETCH" "$THROTTLE"
probe
echo
/usr/bin/python3 - "$work/runs.csv" <<'EOF'
import csv, sys
rows = {}
for r in csv.DictReader(open(sys.argv[1])):
    rows.setdefault(r["label"], {})[int(r["epoch"])] = r
labels = ["floor", "floor+pf", "source", "off", "on"]
def cell(r):
    return f'{float(r["data_wait"]):4.2f}/{float(r["epoch_time"]):5.2f}s {100 * float(r["data_wait_fraction"]):5.1f}%'
print("data wait / epoch time per epoch, and the wait's share of the epoch (mean over the ranks)")
print(f'{"epoch":<7}' + "".join(f"{l:>21}" for l in labels) + f'{"off/on":>8}{"source/on":>10}')
def frac(l, e):
    return float(rows[l][e]["data_wait_fraction"])
epochs = sorted(rows["on"])
for e in epochs:
    print(f"{e:<7}" + "".join(f"{cell(rows[l][e]):>21}" for l in labels)
          + f'{frac("off", e) / frac("on", e):7.1f}x{frac("source", e) / frac("on", e):9.1f}x')
steady = [e for e in epochs if e > 0] or epochs
mean = {l: sum(frac(l, e) for e in steady) / len(steady) for l in labels}
t = {l: sum(float(rows[l][e]["epoch_time"]) for e in steady) / len(steady) for l in labels}
ahead = sum(float(rows["on"][e]["prefetch_hit_ratio"]) for e in steady) / len(steady)
hit = {l: sum(float(rows[l][e]["hit_ratio"]) for e in steady) / len(steady) for l in labels}
print(f"\nepochs {steady[0]}..{steady[-1]} (epoch 0 also starts the DataLoader workers):")
for l in labels:
    print(f"  {l:<8} data wait {100 * mean[l]:5.1f}% of the epoch ({100 * (mean[l] - mean['floor']):+5.1f} points over the floor),"
          f" epoch {t[l]:5.2f}s, cache hit ratio {100 * hit[l]:5.1f}%")
print(f"  prefetch on: {100 * ahead:.1f}% of reads served from the read-ahead; wait off/on {mean['off'] / mean['on']:.1f}x,"
      f" source/on {mean['source'] / mean['on']:.1f}x")
target = 0.10
verdict = "met" if mean["on"] < target else f"missed by {100 * (mean['on'] - target):.1f} points"
print(f"  target: data wait under {100 * target:.0f}% of the epoch with prefetch on: {verdict};"
      f" the remote store adds {100 * (mean['on'] - mean['floor+pf']):+.1f} points to the same with a local disk")
EOF
echo "# all runs took $(($(date +%s) - start)) s"
