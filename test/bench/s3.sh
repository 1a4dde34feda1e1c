#!/usr/bin/env bash
# Shade over S3, measured (issue 13): Fashion-MNIST in a real Versity S3
# Gateway bucket on loopback, read by a PyTorch DataLoader two ways with the
# same settings (batch size, workers, seeded order, PIL decode):
#   boto3  a plain Dataset: one boto3 GetObject per sample (path-style), after
#          a sleep of LATENCY, the same latency the peer's throttle adds
#   boto3-threads  the same Dataset asked for whole batches (ds[[i, ...]]),
#          GETting a batch on THREADS threads per worker (16, the peer's
#          own limit of S3 requests per dataset; 32 in all with 2 workers)
#   shade  shade.torch.ShadeDataset through one shade-peer serving
#          fmnist=s3://BUCKET/PREFIX with --source-throttle latency=LATENCY
# Per epoch: epoch time, data wait (time the loop waited for its next batch),
# the GetObject requests in the gateway's own access log, and for Shade the
# peer's hits and misses from SHADE.STATS. Usage:
#   test/bench/s3.sh [epochs]
# Environment: LIMIT (training images imported, default 6000; 0: all 60,000),
# BATCH (64), WORKERS (DataLoader workers, 2), LATENCY (20ms), THREADS (16),
# CACHE_SIZE (the peer's --cache-size, 1GiB: the whole subset), BIN (bin),
# SHADE_VERSITYGW (the gateway binary; default: .ci/versitygw.sh builds it).
set -euo pipefail
cd "$(dirname "$0")/../.."
EPOCHS=${1:-3}
LIMIT=${LIMIT:-6000}
BATCH=${BATCH:-64}
WORKERS=${WORKERS:-2}
LATENCY=${LATENCY:-20ms}
THREADS=${THREADS:-16}
CACHE_SIZE=${CACHE_SIZE:-1GiB}
BIN=${BIN:-bin}
PY=/usr/bin/python3
BUCKET=fmnist PREFIX=train
[ -x "$BIN/shade-peer" ] && [ -x "$BIN/shadectl" ] || go build -o "$BIN/" ./cmd/...
VGW=${SHADE_VERSITYGW:-$(.ci/versitygw.sh)}

work=$(mktemp -d)
pids=()
cleanup() {
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
	--access-log "$work/access.log" posix "$work/root" >"$work/vgw.log" 2>&1 &
pids+=($!)
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
	"batch $BATCH, $WORKERS DataLoader workers, $EPOCHS epochs; latency $LATENCY per GET on both sides; peer cache $CACHE_SIZE"

secs=$($PY -c "import re; v, u = re.fullmatch(r'([0-9.]+)(ms|s)', '$LATENCY').groups(); print(float(v) / (1000 if u == 'ms' else 1))")
common=(--endpoint "$endpoint" --bucket "$BUCKET" --prefix "$PREFIX" --access-log "$work/access.log"
	--epochs "$EPOCHS" --batch "$BATCH" --workers "$WORKERS")
start=$(date +%s)
OMP_NUM_THREADS=1 $PY test/bench/s3_epochs.py boto3 "${common[@]}" --latency "$secs" | tee "$work/rows.jsonl"
OMP_NUM_THREADS=1 $PY test/bench/s3_epochs.py boto3-threads "${common[@]}" --latency "$secs" --threads "$THREADS" |
	tee -a "$work/rows.jsonl"

"$BIN/shade-peer" --name bench --socket "$work/shade.sock" --dataset "fmnist=s3://$BUCKET/$PREFIX" \
	--s3-endpoint "$endpoint" --s3-path-style --source-throttle "latency=$LATENCY" \
	--cache-size "$CACHE_SIZE" \
	--admin-addr off --log-level warn 2>>"$work/peer.log" &
pids+=($!)
for _ in $(seq 300); do [ -S "$work/shade.sock" ] && break; sleep 0.1; done
OMP_NUM_THREADS=1 $PY test/bench/s3_epochs.py shade "${common[@]}" --socket "$work/shade.sock" | tee -a "$work/rows.jsonl"
echo "# all runs took $(($(date +%s) - start)) s"
echo

$PY - "$work/rows.jsonl" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
by = {(r["mode"], r["epoch"]): r for r in rows}
epochs = sorted({r["epoch"] for r in rows})
modes = ["boto3", "boto3-threads", "shade"]
n = rows[0]["samples"]
print(f"{n} samples per epoch; seconds; GETs from the gateway's access log; hit ratio from the peer's SHADE.STATS")
print(f'{"epoch":<8}' + "".join(f'{m + " time":>20}{"wait":>8}{"GETs":>6}' for m in modes)
      + f'{"hit ratio":>10}{"boto3/shade":>12}{"threads/shade":>14}')
for e in epochs:
    r = [by[(m, e)] for m in modes]
    label = f"{e} " + ("cold" if e == 0 else "warm")
    print(f"{label:<8}" + "".join(f'{x["epoch_time"]:20.2f}{x["data_wait"]:8.2f}{x["gets"]:6d}' for x in r)
          + f'{100 * r[2]["hit_ratio"]:9.1f}%{r[0]["epoch_time"] / r[2]["epoch_time"]:11.1f}x'
          f'{r[1]["epoch_time"] / r[2]["epoch_time"]:13.1f}x')
s0 = by[("shade", 0)]
print()
for m in modes[:2]:
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
