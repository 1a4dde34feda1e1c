#!/usr/bin/env python3
"""What a rank pays for its slice of each epoch's order and for each
minibatch's report: PACKED (ids, weights and losses as binary) against an
element per id, side by side in one run.

    test/bench/packed.py [--samples 1280000] [--world 3] [--rounds 7] [--batches 64,256,1024]

One local peer (deploy/local/mesh.sh) serves a dataset of --samples files
(test/bench/order_wait.py's, built once under .data/). Epoch 0 is
published, then asked again --rounds times each way, the ways in turn:

- the peer's side: the time from the request to the reply's last byte,
  over a raw socket (the reply's length found once beforehand; the timed
  reads only count bytes), with and without PACKED;
- the trainer's side: shade.Client.order(), which parses the reply into
  lists of ints and floats, PACKED (the default) and an element per id
  (the path the client takes with a peer that predates PACKED).

Both with and without WITHWEIGHTS. Then shade.Client.report() of a
minibatch of each --batches size (random ids and losses), 200 reports a
round, PACKED and an argument per id and loss in turn. It prints the
medians and the ratio packed / element per id, and checks that both ways
give the same order and merge every pair.
"""

import argparse
import os
import random
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "client", "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import shade  # noqa: E402
from order_wait import command, dataset  # noqa: E402


def reply_size(sock, args):
    """The length of the peer's reply to args (arrays, integers and bulk
    strings), read and parsed once, untimed."""
    s = socket.socket(socket.AF_UNIX)
    s.connect(sock)
    s.sendall(command(*args))
    buf = bytearray()

    def need(n):
        while len(buf) < n:
            chunk = s.recv(1 << 22)
            if not chunk:
                raise ConnectionError("the peer closed the connection")
            buf.extend(chunk)

    def value(pos):  # the end of the RESP value at pos
        while buf.find(b"\r\n", pos) < 0:
            need(len(buf) + 1)
        end = buf.find(b"\r\n", pos)
        kind, n = buf[pos:pos + 1], buf[pos + 1:end]
        if kind == b"-":
            raise RuntimeError(bytes(buf[pos:end]).decode())
        if kind == b"$":
            need(end + 2 + int(n) + 2)
            return end + 2 + int(n) + 2
        if kind == b"*":
            p = end + 2
            for _ in range(int(n)):
                p = value(p)
            return p
        return end + 2

    size = value(0)
    s.close()
    return size


def peer_time(sock, args, size):
    """Seconds from sending args to the last of the reply's size bytes."""
    s = socket.socket(socket.AF_UNIX)
    s.connect(sock)
    t = time.perf_counter()
    s.sendall(command(*args))
    got = 0
    while got < size:
        chunk = s.recv(1 << 22)
        if not chunk:
            raise ConnectionError("the peer closed the connection")
        got += len(chunk)
    took = time.perf_counter() - t
    s.close()
    return took


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", type=int, default=1280000)
    ap.add_argument("--world", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--batches", default="64,256,1024", help="report sizes, comma-separated")
    ap.add_argument("--bin", default=os.path.join(ROOT, "bin"), help="directory of shade-peer")
    ap.add_argument("--port", type=int, default=28946, help="gossip port of the peer")
    a = ap.parse_args()
    if not os.path.exists(os.path.join(a.bin, "shade-peer")):
        subprocess.run(["go", "build", "-o", a.bin + "/", "./cmd/shade-peer"], cwd=ROOT, check=True)
    data = dataset(a.samples)
    d = tempfile.mkdtemp(prefix="shade-packed-")
    env = dict(os.environ, SHADE_BIN=a.bin, SHADE_BASE_PORT=str(a.port))
    mesh = os.path.join(ROOT, "deploy", "local", "mesh.sh")
    subprocess.run([mesh, "start", "1", d, "--dataset", "big=" + data, "--cache-size", "256MiB",
                    "--log-level", "warn"], env=env, check=True, stdout=subprocess.DEVNULL)
    try:
        sock = os.path.join(d, "n0.sock")
        packed, text = shade.Client(sock), shade.Client(sock)
        text._packed_refused = True  # as with a peer that predates PACKED
        ids = packed.order("big", 0, 0, a.world)  # publishes epoch 0
        print("# %d samples, world %d: %d ids a rank; %d cores, load %s" % (
            a.samples, a.world, len(ids), os.cpu_count(), open("/proc/loadavg").read().split()[0]))
        for weighted in (False, True):
            base = ["SHADE.ORDER", "big", 0, 0, a.world] + (["WITHWEIGHTS"] if weighted else [])
            sizes = {"text": reply_size(sock, base), "packed": reply_size(sock, base + ["PACKED"])}
            times = {k: [] for k in ("peer text", "peer packed", "client text", "client packed")}
            for _ in range(a.rounds):
                times["peer text"].append(peer_time(sock, base, sizes["text"]))
                times["peer packed"].append(peer_time(sock, base + ["PACKED"], sizes["packed"]))
                t = time.perf_counter()
                got_text = text.order("big", 0, 0, a.world, with_weights=weighted)
                times["client text"].append(time.perf_counter() - t)
                t = time.perf_counter()
                got_packed = packed.order("big", 0, 0, a.world, with_weights=weighted)
                times["client packed"].append(time.perf_counter() - t)
            if weighted:
                same = got_text[0] == got_packed[0] and struct.pack(
                    "<%df" % len(got_text[1]), *got_text[1]) == struct.pack("<%df" % len(got_packed[1]), *got_packed[1])
            else:
                same = got_text == got_packed
            if not same or packed.packed_refused:
                print("the packed order differs from the text one")
                sys.exit(1)
            med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
            print("\n## %s: replies of %d bytes, %d PACKED" % (
                "ids and weights (WITHWEIGHTS)" if weighted else "ids", sizes["text"], sizes["packed"]))
            for side in ("peer", "client"):
                print("%-7s element per id %8.1f ms   PACKED %8.1f ms   ratio %.3f" % (
                    side, med[side + " text"], med[side + " packed"], med[side + " packed"] / med[side + " text"]))
        print("\n(medians of %d rounds; peer: request to the reply's last byte over a raw socket; "
              "client: shade.Client.order, parsed into lists; the same order both ways)" % a.rounds)
        rng = random.Random(1)
        print("\n## shade.Client.report() of a minibatch")
        for batch in (int(b) for b in a.batches.split(",")):
            ids = [rng.randrange(a.samples) for _ in range(batch)]
            losses = [rng.random() * 3 for _ in range(batch)]
            times = {"text": [], "packed": []}
            for _ in range(a.rounds):
                for name, c in (("text", text), ("packed", packed)):
                    t = time.perf_counter()
                    for _ in range(200):
                        if c.report("big", 0, ids, losses) != batch:
                            print("a report was not merged whole")
                            sys.exit(1)
                    times[name].append((time.perf_counter() - t) / 200)
            if packed.packed_refused:
                print("the peer refused a PACKED report")
                sys.exit(1)
            med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
            print("%5d pairs: argument each %7.3f ms   PACKED %7.3f ms   ratio %.3f" % (
                batch, med["text"], med["packed"], med["packed"] / med["text"]))
        print("(medians of %d rounds of 200 reports, a round trip each)" % a.rounds)
    finally:
        subprocess.run([mesh, "stop", d], env=env, stdout=subprocess.DEVNULL)
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
