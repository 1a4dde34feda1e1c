#!/usr/bin/env bash
# QUIC batch fetch between two peers against TCP on the same machine, side
# by side in one run: BenchmarkBatchFetch (transport/peer) moves batches of
# samples (default 256 and 32 samples of 100 KiB; 32 x 100 KiB is about
# what one read-ahead request of the mesh asks an owner for; and, stream
# layouts only, 1 sample of 1 KiB, a single read from a peer) between two
# nodes on loopback, in the mesh's stream layout (wire.MethodFetchStream: a
# msgpack head, then the samples' bytes as they are) and its msgpack layout
# (wire.MethodFetch: every value encoded into one frame), over
#   quic-stream      the peer transport: QUIC, mutual TLS 1.3, RawReply
#   quic-msgpack     the peer transport, msgpack layout
#   tcp-tls-stream   the same frames and stream layout over TLS 1.3 on TCP
#   tcp-tls-msgpack  the same frames and msgpack over TLS 1.3 on TCP
#   tcp-stream       the same frames and stream layout over plain TCP
#   tcp-msgpack      the same frames and msgpack over plain TCP
#   tcp-raw          the samples' bytes alone over plain TCP
# and prints the median MB/s of the rounds' runs, the CPU both ends spent per
# batch, and each figure against quic-stream's, with the process's thread
# switches per batch (threads the Go scheduler woke at hand-offs between
# goroutines, and that slept again: where a small request's CPU goes, see
# test/results/quic-vs-tcp.md); then the ratio that counts
# (QUIC against TLS over TCP, same layout) and a CPU profile of the
# quic-stream case split by where the time goes. Usage:
#   [BENCH_FETCH_MTU=9000] test/bench/quic_vs_tcp.sh [iterations-per-run] [rounds]
# BENCH_FETCH_MTU (root, iproute2) runs both ends in two network namespaces
# joined by a veth pair of that MTU, as two hosts on one link, instead of on
# loopback (where QUIC's packets grow to 65,000 bytes): 9000 for a
# jumbo-frame network, 1500 for Ethernet's.
set -euo pipefail
cd "$(dirname "$0")/../.."
N=${1:-20}
COUNT=${2:-3}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo "# $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); $COUNT rounds, every transport once a round, $N batches a run"
go test -c -o "$out/peer.test" ./transport/peer/
# The runs go round by round, every transport once a round, in the
# opposite order every other round: on a shared machine whose load moves,
# the transports compared are measured side by side, not one run after
# the other's three.
variants="quic-stream quic-msgpack tcp-tls-stream tcp-tls-msgpack tcp-stream tcp-msgpack tcp-raw"
bench() { # samples size iterations variant...
	local samples=$1 size=$2 iters=$3 v
	shift 3
	for v in "$@"; do
		BENCH_FETCH_SAMPLES=$samples BENCH_FETCH_SIZE=$size "$out/peer.test" -test.run '^$' \
			-test.bench "BatchFetch/^$v\$" -test.benchtime "${iters}x" -test.count 1 >>"$out/bench.txt" ||
			{ cat "$out/bench.txt"; exit 1; }
	done
}
for round in $(seq "$COUNT"); do
	order=$variants
	small="quic-stream tcp-tls-stream"
	if [ $((round % 2)) = 0 ]; then
		order=$(echo "$variants" | tr ' ' '\n' | tac | tr '\n' ' ')
		small="tcp-tls-stream quic-stream"
	fi
	bench 256 102400 "$N" $order
	bench 32 102400 "$N" $order
	# One sample of 1 KiB a request: a read from a peer that no
	# read-ahead batches, where the per-request costs (packets,
	# goroutines, contexts) are all there is; 100 times as many requests.
	bench 1 1024 "$((N * 100))" $small
done
/usr/bin/python3 - "$out/bench.txt" <<'EOF'
import re, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    m = re.match(r"BenchmarkBatchFetch/([\w-]+)/(\S+?)-\d+\s+\d+\s+\d+ ns/op\s+([\d.]+) MB/s\s+([\d.]+) MB/cpu-s\s+([\d.]+) cpu-ms/op\s+([\d.]+) switches/op", line)
    if m:
        runs.setdefault((m[2], m[1]), []).append((float(m[3]), float(m[4]), float(m[5]), float(m[6])))
variants = ["quic-stream", "quic-msgpack", "tcp-tls-stream", "tcp-tls-msgpack", "tcp-stream", "tcp-msgpack", "tcp-raw"]
print(f'{"batch":<12}{"transport":<17}{"MB/s":>9}{"x quic":>8}{"cpu-ms/batch":>14}{"MB/cpu-s":>10}{"x quic":>8}{"switches/batch":>16}')
ratios = []
def med_ms(batch, v):
    return statistics.median(r[2] for r in runs[(batch, v)])
for batch in sorted({k[0] for k in runs}, key=lambda b: -int(b.split("x")[0])):
    for q_, t_ in (("quic-stream", "tcp-tls-stream"), ("quic-msgpack", "tcp-tls-msgpack")):
        if (batch, q_) in runs and (batch, t_) in runs:
            ratios.append(f"{batch:<12}{q_} {med_ms(batch, q_):.3g} cpu-ms/batch, {t_} {med_ms(batch, t_):.3g}: QUIC takes {med_ms(batch, q_) / med_ms(batch, t_):.2f}x the CPU of TLS over TCP")
    q = runs[(batch, "quic-stream")]
    qs, qc = statistics.median(r[0] for r in q), statistics.median(r[1] for r in q)
    for v in variants:
        rs = runs.get((batch, v))
        if not rs:
            continue
        s, c, ms, sw = (statistics.median(r[i] for r in rs) for i in range(4))
        print(f"{batch:<12}{v:<17}{s:9.0f}{s / qs:7.1f}x{ms:14.3g}{c:10.0f}{c / qc:7.1f}x{sw:16.3g}")
print()
print("# QUIC against TLS over TCP with the same layout (target: QUIC's CPU per batch at most TLS over TCP's)")
print("\n".join(ratios))
EOF
echo
echo "# where QUIC's CPU goes (quic-stream, 256 x 100 KiB batches; cumulative shares of both ends' samples, overlapping)"
BENCH_FETCH_SAMPLES=256 "$out/peer.test" -test.run '^$' -test.bench 'BatchFetch/quic-stream' -test.benchtime "${N}x" \
	-test.cpuprofile "$out/quic.prof" >/dev/null
go tool pprof -top -cum -nodecount=2000 "$out/peer.test" "$out/quic.prof" 2>/dev/null | /usr/bin/python3 -c '
import re, sys
areas = [
    ("UDP send (sendmsg with GSO)", r"internal/quic\.\(\*sconn\)\.Write$"),
    ("UDP receive (recvmmsg)", r"internal/quic\.\(\*oobConn\)\.ReadPacket$"),
    ("AEAD seal (AES-GCM, per packet)", r"handshake\.\(\*xorNonceAEAD\)\.Seal$"),
    ("AEAD open (AES-GCM, per packet)", r"handshake\.\(\*xorNonceAEAD\)\.Open$"),
    ("packing packets", r"internal/quic\.\(\*packetPacker\)\.AppendPacket$"),
    ("handling received packets", r"internal/quic\.\(\*Conn\)\.handlePackets$"),
    ("STREAM frames copied out of packets", r"wire\.ParseStreamFrame$"),
    ("msgpack encode into the frame", r"peer\.appendFrame$"),
    ("frame read into the buffer", r"peer\.readFrame$"),
    ("values written to the stream", r"peer\.writeValues$"),
    ("values read into the buffer (stream)", r"io\.ReadFull$"),
    ("owner copies values out of memory", r"peer\.\(\*benchSamples\)\.streamReply$"),
    ("reading the stream (quic-go Stream.Read)", r"internal/quic\.\(\*ReceiveStream\)\.Read$"),
    ("msgpack decode", r"msgpack/v5\.Unmarshal$"),
    ("checksums (CRC-32C)", r"crc32c\.Update$"),
    ("zeroing new buffers (memclr)", r"runtime\.memclrNoHeapPointers$"),
    ("growing buffers (growslice)", r"runtime\.growslice$"),
    ("garbage collection", r"runtime\.gcBgMarkWorker$"),
]
lines = sys.stdin.read().splitlines()
for name, pat in areas:
    for l in lines:
        f = l.split()
        if len(f) >= 6 and re.search(pat, f[-1]):
            print(f"  {f[4]:>7}  {name}")
            break
'
