#!/usr/bin/env bash
# Shade over S3, measured: Fashion-MNIST in a real Versity S3
# Gateway bucket on loopback, read by a PyTorch DataLoader two ways with the
# same settings (batch size, workers, seeded order, PIL decode):
#   boto3  a plain Dataset: one boto3 GetObject per sample (path-style),
#          after a sleep of LATENCY, the same latency the peer's throttle adds
#   boto3-threads  the same Dataset asked for whole batches (ds[[i, ...]]),
#          GETting a batch on THREADS threads per worker (16: 32 GETs in
#          flight with 2 workers; 32 threads a worker, as many GETs as the
#          peer's default allows itself, ran slower on 2 cores)
#   shade  shade.torch.ShadeDataset through one shade-peer serving
#          fmnist=s3://BUCKET/PREFIX with --source-throttle latency=LATENCY;
#          with PEERS=N (N > 1), through a local mesh of N such peers
#          (deploy/local/mesh.sh), each epoch's batches split among them in
#          turn as N trainers, one a peer, would split them
#   shade-alt  (only with ALT_FLAGS) the same through a peer started with
#          ALT_FLAGS as well, such as "--source-reads 16 --s3-max-in-flight
#          16", in the same run
# The gateway keeps connections open between requests (--keep-alive), as S3
# does. Per epoch: epoch time, data wait (time the loop waited for its next
# batch), the GetObject requests in the gateway's own access log, and for
# Shade the peer's hits and misses from SHADE.STATS. Usage:
#   test/bench/s3.sh [epochs]
# Environment: LIMIT (training images imported, default 6000; 0: all 60,000),
# BATCH (64), WORKERS (DataLoader workers, 2), LATENCY (20ms), THREADS (16),
# PEERS (1), CACHE_SIZE (each peer's --cache-size, 1GiB: the whole subset),
# SHADE_BASE_PORT (the mesh's first port, 28946), READERS (the
# readers run, default "boto3 boto3-threads shade"), ALT_FLAGS (none), BIN
# (bin), SHADE_VERSITYGW (the gateway binary; default: .ci/versitygw.sh
# builds it).
set -euo pipefail
cd "$(dirname "$0")/../.."
EPOCHS=${1:-3}
LIMIT=${LIMIT:-6000}
BATCH=${BATCH:-64}
WORKERS=${WORKERS:-2}
LATENCY=${LATENCY:-20ms}
THREADS=${THREADS:-16}
READERS=${READERS:-boto3 boto3-threads shade}
ALT_FLAGS=${ALT_FLAGS:-}
CACHE_SIZE=${CACHE_SIZE:-1GiB}
PEERS=${PEERS:-1}
BIN=${BIN:-bin}
export SHADE_BIN=$BIN SHADE_BASE_PORT=${SHADE_BASE_PORT:-28946}
PY=/usr/bin/python3
BUCKET=fmnist PREFIX=train
./.ci/deps.sh python3-torch python3-numpy python3-redis python3-msgpack python3-boto3 dataset-fashion-mnist
[ -x "$BIN/shade-peer" ] && [ -x "$BIN/shadectl" ] || go build -o "$BIN/" ./cmd/...
VGW=${SHADE_VERSITYGW:-$(.ci/versitygw.sh)}

work=$(mktemp -d)
pids=()
cleanup() {
	deploy/local/mesh.sh stop "$work/mesh" >/dev/null 2>&1 || true
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	rm -rf "$work"
}
trap cleanup EXIT

free_port() { $PY -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
export AWS_ACCESS_KEY_ID=shadebench AWS_SECRET_ACCESS_KEY=shade-bench-secret-key-0123456789 AWS_DEFAULT_REGION=us-east-1
endpoint=http://127.0.0.1:$(free_port)
mkdir -p "$work/root"
"$VGW" --access "$AWS_ACCESS_KEY_ID" --secret "$AWS_SECRET_ACCESS_KEY" --port "${endpoint#http://}" \
	--access-log "$work/access.log" --keep-alive posix "$work/root" >"$work/vgw.log" 2>&1 &
vgw=$!
pids+=($vgw)
for _ in $(seq 300); do
	$PY -c "import urllib.request, sys
try: urllib.request.urlopen('$endpoint/', timeout=1)
except urllib.error.HTTPError: sys.exit(0)
except Exception: sys.exit(1)" && break
	sleep 0.1
done

"$BIN/shadectl" dataset import-idx --limit "$LIMIT" --dst "$work/fmnist" >/dev/null 2>&1
"$BIN/shadectl" dataset upload "$work/fmnist/train" "s3://$BUCKET/$PREFIX" --s3-endpoint "$endpoint" --s3-path-style 2>/dev/null
echo "# $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); $(basename "$(dirname "$VGW")") on $endpoint (loopback, POSIX backend);" \
	"batch $BATCH, $WORKERS DataLoader workers, $EPOCHS epochs; latency $LATENCY per GET on both sides;" \
	"$PEERS peer(s), cache $CACHE_SIZE each"

secs=$($PY -c "import re; v, u = re.fullmatch(r'([0-9.]+)(ms|s)', '$LATENCY').groups(); print(float(v) / (1000 if u == 'ms' else 1))")
common=(--endpoint "$endpoint" --bucket "$BUCKET" --prefix "$PREFIX" --access-log "$work/access.log"
	--epochs "$EPOCHS" --batch "$BATCH" --workers "$WORKERS")
start=$(date +%s)
: >"$work/rows.jsonl"
. test/bench/lib.sh
# requests: the requests the mesh's peers sent each other so far, and
# their frame bytes (each peer's /metrics).
requests() {
	for i in $(seq 0 $((PEERS - 1))); do
		$PY -c "import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1]).read().decode())" \
			"http://127.0.0.1:$((SHADE_BASE_PORT + 100 + i))/metrics"
	done | awk '/^shade_peer_requests_total/ {r += $2} /^shade_peer_bytes_total.*direction="out"/ {b += $2}
		END {printf "%d requests, %.1f MB sent", r, b / 1e6}'
}
delta() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.1f", a - b}'; }
# shade LABEL [FLAGS...]: a fresh peer (or mesh of PEERS peers) with the
# throttle and FLAGS, read by the shade reader, its rows labelled LABEL;
# stopped after.
shade() {
	local label=$1 sock=$work/$1.sock
	shift
	local flags=(--dataset "fmnist=s3://$BUCKET/$PREFIX" --s3-endpoint "$endpoint" --s3-path-style
		--source-throttle "latency=$LATENCY" --cache-size "$CACHE_SIZE" --log-level warn "$@")
	if [ "$PEERS" -gt 1 ]; then
		deploy/local/mesh.sh start "$PEERS" "$work/mesh" "${flags[@]}" >/dev/null
		sock=$(seq -s, -f "$work/mesh/n%g.sock" 0 $((PEERS - 1)))
	else
		"$BIN/shade-peer" --name bench --socket "$sock" --admin-addr off "${flags[@]}" 2>>"$work/peer.log" &
		pids+=($!)
		for _ in $(seq 300); do [ -S "$sock" ] && break; sleep 0.1; done
	fi
	local peers=("${pids[-1]}") peers0 gw0
	[ "$PEERS" -gt 1 ] && mapfile -t peers < <(cat "$work"/mesh/n*.pid)
	peers0=$(cpu_seconds "${peers[@]}") gw0=$(cpu_seconds "$vgw")
	OMP_NUM_THREADS=1 $PY test/bench/s3_epochs.py shade "${common[@]}" --socket "$sock" --label "$label" |
		tee -a "$work/rows.jsonl"
	echo "# $label: CPU over its epochs: the peers $(delta "$(cpu_seconds "${peers[@]}")" "$peers0") s" \
		"(starting: $peers0 s), the gateway $(delta "$(cpu_seconds "$vgw")" "$gw0") s"
	[ "$PEERS" -gt 1 ] && echo "# $label: requests between the peers (start included): $(requests)"
	if [ "$PEERS" -gt 1 ]; then
		deploy/local/mesh.sh stop "$work/mesh"
	else
		kill -TERM "${pids[-1]}"
		wait "${pids[-1]}" || true
	fi
}
for r in $READERS; do
	case $r in
	boto3) OMP_NUM_THREADS=1 $PY test/bench/s3_epochs.py boto3 "${common[@]}" --latency "$secs" | tee -a "$work/rows.jsonl" ;;
	boto3-threads) OMP_NUM_THREADS=1 $PY test/bench/s3_epochs.py boto3-threads "${common[@]}" --latency "$secs" \
		--threads "$THREADS" | tee -a "$work/rows.jsonl" ;;
	shade) shade shade ;;
	*) echo "READERS: unknown reader $r" >&2; exit 2 ;;
	esac
done
# shellcheck disable=SC2086 # ALT_FLAGS is a list of flags
[ -z "$ALT_FLAGS" ] || shade shade-alt $ALT_FLAGS
echo "# all runs took $(($(date +%s) - start)) s"
echo

$PY - "$work/rows.jsonl" "$ALT_FLAGS" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
alt_flags = sys.argv[2]
by = {(r["mode"], r["epoch"]): r for r in rows}
epochs = sorted({r["epoch"] for r in rows})
modes = [m for m in ["boto3", "boto3-threads", "shade", "shade-alt"] if any(r["mode"] == m for r in rows)]
others = [m for m in modes if m != "shade"]
n = rows[0]["samples"]
print(f"{n} samples per epoch; seconds; GETs from the gateway's access log; hit ratio from the peer's SHADE.STATS")
if alt_flags:
    print(f"shade-alt: the peer with {alt_flags}")
width = {m: max(12, len(m) + 8) for m in others}
print(f'{"epoch":<8}' + "".join(f'{m + " time":>20}{"wait":>8}{"GETs":>6}' for m in modes)
      + (f'{"hit ratio":>10}' + "".join(f'{m + "/shade":>{width[m]}}' for m in others) if "shade" in modes else ""))
for e in epochs:
    label = f"{e} " + ("cold" if e == 0 else "warm")
    line = f"{label:<8}" + "".join(f'{by[(m, e)]["epoch_time"]:20.2f}{by[(m, e)]["data_wait"]:8.2f}{by[(m, e)]["gets"]:6d}'
                                   for m in modes)
    if "shade" in modes:
        s = by[("shade", e)]
        line += f'{100 * s["hit_ratio"]:9.1f}%' + "".join(
            f'{by[(m, e)]["epoch_time"] / s["epoch_time"]:{width[m] - 1}.1f}x' for m in others)
    print(line)
if "shade" not in modes:
    sys.exit(0)
s0 = by[("shade", 0)]
print()
for m in [m for m in modes if m.startswith("shade")]:
    # Every sample is asked for once an epoch: more GETs than samples in
    # the cold epoch are reads the store served twice.
    r = by[(m, 0)]
    print(f"{m}: cold epoch {r['gets']} GETs for {r['samples']} samples ({r['gets'] / r['samples']:.3f} a sample);"
          f" {r['peer_source_reads']} source reads counted by the peers; {r['hits_from_other_peers']} hits in other"
          f" peers' memory")
for m in [m for m in others if m.startswith("boto3")]:
    b0 = by[(m, 0)]
    ok = s0["epoch_time"] <= b0["epoch_time"]
    print(f"target: Shade's cold epoch no slower than {m}'s: {s0['epoch_time']:.2f}s vs {b0['epoch_time']:.2f}s:"
          f" {'met' if ok else 'missed'}")
for e in epochs[1:]:
    s = by[("shade", e)]
    bound = (1 - s["hit_ratio"]) * s["samples"]
    bound = round(bound, 6)  # hits / reads x N is a whole number up to float error
    print(f"target: warm epoch {e} GETs <= (1 - hit ratio) x N = (1 - {s['hit_ratio']:.4f}) x {s['samples']}"
          f" = {bound:.0f}: {s['gets']} GETs: {'met' if s['gets'] <= bound else 'missed'}"
          f" (peer: {s['peer_hits']} hits, {s['peer_misses']} misses, {s['peer_source_reads']} source reads,"
          f" {s['evictions']} evictions, {s['rejected_admissions']} rejected admissions; after it"
          f" {s['cache_entries']} samples cached in {s['cache_used']} bytes;"
          f" hit ratio over all epochs so far {100 * s['hit_ratio_total']:.1f}%)")
EOF
