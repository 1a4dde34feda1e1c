#!/usr/bin/env python3
"""How long ranks wait for each epoch's order, with orders ahead by default
and with them turned off, side by side in one run.

    test/bench/order_wait.py [--samples 1280000] [--epochs 10] [--train 0.5] [--stagger 0]

A dataset of --samples files of 16 bytes (built once under .data/: for
1.28 M, about a minute and, at a block a file, 5 GiB of disk) is served by a mesh of 3 local peers
(deploy/local/mesh.sh), twice: first with --order-ahead-at 0 (every order
drawn once the ranks finished the epoch before), then with the default,
which turns orders ahead on once two draws in a row took too long
(epoch 0's and the order of epoch 1 drawn while epoch 0 trains, at the
earliest). Each run, 3 ranks (one process each, one per peer) ask
for their slice of each epoch's order (SHADE.ORDER ... PACKED, as the
clients ask it), "train" --train
seconds and send SHADE.DONE. The wait between two epochs is the time from
the done's request to its reply's first byte (the clients wait for it)
plus the same for the next order. Then each rank asks another peer for its slices of the
last two epochs, which must be the same bytes. With --stagger S, rank r
starts r*S seconds after rank 0, as a job's processes start apart: the
last rank's wait for epoch 0 is then what the join that completes the
world waits for (the others wait for it to join too).

It prints the waits per epoch, their mean and median over the epochs from
--from on (after the default's switch) and the ratio default/off. On a
small machine the 3 peers and 3 ranks share its cores: the leader's draw
of the order ahead then competes with the replies, and the floor is what
an installed order of that size takes to answer (printed too).
"""

import argparse
import hashlib
import multiprocessing
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WORLD = 3


def dataset(samples):
    """Returns a directory of samples files of 16 bytes, made once."""
    d = os.path.join(ROOT, ".data", "order-wait-%d" % samples)
    done = os.path.join(d, ".complete")
    if os.path.exists(done):
        return os.path.join(d, "files")
    shutil.rmtree(d, ignore_errors=True)
    files = os.path.join(d, "files")
    per = 1000
    for k in range((samples + per - 1) // per):
        sub = os.path.join(files, "%05d" % k)
        os.makedirs(sub)
        for i in range(k * per, min(samples, (k + 1) * per)):
            with open(os.path.join(sub, "%08d.bin" % i), "wb") as f:
                f.write(b"%016d" % i)
    open(done, "w").close()
    return files


def command(*args):
    out = b"*%d\r\n" % len(args)
    for a in args:
        a = str(a).encode()
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    return out


def call(s, *args):
    """Sends one command; returns the seconds to the reply's first byte and
    the whole reply (a simple string, an error, an integer or a bulk
    string: SHADE.ORDER is asked PACKED, as the clients ask it)."""
    t0 = time.monotonic()
    s.sendall(command(*args))
    buf = bytearray(s.recv(1 << 20))
    first = time.monotonic() - t0
    if not buf:
        raise ConnectionError("the peer closed the connection")
    while b"\r\n" not in buf:
        buf += s.recv(1 << 20)
    if buf[:1] != b"$":
        while not buf.endswith(b"\r\n"):
            buf += s.recv(1 << 20)
        return first, bytes(buf)
    end = buf.index(b"\r\n") + 2 + int(buf[1:buf.index(b"\r\n")]) + 2
    while len(buf) < end:
        chunk = s.recv(1 << 20)
        if not chunk:
            raise ConnectionError("the peer closed the connection mid-reply")
        buf += chunk
    return first, bytes(buf)


def rank(r, socks, epochs, train, stagger, q):
    time.sleep(r * stagger)  # ranks start apart, as a job's processes do
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(120)
    s.connect(socks[r])
    digests = {}
    for e in range(epochs):
        w, reply = call(s, "SHADE.ORDER", "big", e, r, WORLD, "PACKED")
        if reply[:1] == b"-":
            q.put(("error", r, "epoch %d: %s" % (e, reply.decode().strip())))
            return
        q.put(("wait", r, (e, w)))
        digests[e] = hashlib.sha256(reply).hexdigest()
        time.sleep(train)
        d, reply = call(s, "SHADE.DONE", "big", e, r)
        if reply[:1] == b"-":
            q.put(("error", r, "done of epoch %d: %s" % (e, reply.decode().strip())))
            return
        q.put(("done", r, (e, d)))
    o = socket.socket(socket.AF_UNIX)
    o.settimeout(120)
    o.connect(socks[(r + 1) % WORLD])
    for e in range(epochs - 2, epochs):
        _, reply = call(o, "SHADE.ORDER", "big", e, r, WORLD, "PACKED")
        same = hashlib.sha256(reply).hexdigest() == digests[e]
        q.put(("check", r, (e, same)))


def run(bin_dir, data, flags, epochs, train, stagger, port):
    d = tempfile.mkdtemp(prefix="shade-order-wait-")
    env = dict(os.environ, SHADE_BIN=bin_dir, SHADE_BASE_PORT=str(port))
    mesh = os.path.join(ROOT, "deploy", "local", "mesh.sh")
    subprocess.run([mesh, "start", str(WORLD), d, "--dataset", "big=" + data, "--cache-size", "256MiB",
                    "--replicas", "1", "--log-level", "info"] + flags, env=env, check=True, stdout=subprocess.DEVNULL)
    try:
        socks = [os.path.join(d, "n%d.sock" % i) for i in range(WORLD)]
        q = multiprocessing.Queue()
        ps = [multiprocessing.Process(target=rank, args=(r, socks, epochs, train, stagger, q)) for r in range(WORLD)]
        for p in ps:
            p.start()
        waits, dones, checks, errors = {}, {}, [], []
        while any(p.is_alive() for p in ps) or not q.empty():
            try:
                kind, r, v = q.get(timeout=1)
            except Exception:
                continue
            if kind == "wait":
                waits[(v[0], r)] = v[1]
            elif kind == "done":
                dones[(v[0], r)] = v[1]
            elif kind == "check":
                checks.append(v[1])
            else:
                errors.append("rank %d: %s" % (r, v))
        for p in ps:
            p.join()
        # What an installed order takes to answer, nothing else running.
        s = socket.socket(socket.AF_UNIX)
        s.connect(socks[0])
        floor = min(call(s, "SHADE.ORDER", "big", epochs - 1, 0, WORLD, "PACKED")[0] for _ in range(3))
        switched = []
        for i in range(WORLD):
            with open(os.path.join(d, "n%d.log" % i)) as f:
                switched += [line for line in f if "orders now run an epoch ahead" in line]
        return waits, dones, checks, errors, floor, switched
    finally:
        subprocess.run([mesh, "stop", d], env=env, stdout=subprocess.DEVNULL)
        shutil.rmtree(d, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", type=int, default=1280000)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--train", type=float, default=0.5, help="seconds each rank trains an epoch")
    ap.add_argument("--stagger", type=float, default=0.0,
                    help="seconds between the ranks' starts: rank r asks for epoch 0 r times this after rank 0")
    ap.add_argument("--from", dest="start", type=int, default=4, help="first epoch of the means")
    ap.add_argument("--bin", default=os.path.join(ROOT, "bin"), help="directory of shade-peer")
    ap.add_argument("--port", type=int, default=27946, help="first gossip port of the mesh")
    a = ap.parse_args()
    if not 0 <= a.start < a.epochs - 1:
        ap.error("--from must leave at least two epochs")
    if not os.path.exists(os.path.join(a.bin, "shade-peer")):
        subprocess.run(["go", "build", "-o", a.bin + "/", "./cmd/shade-peer"], cwd=ROOT, check=True)
    t0 = time.monotonic()
    data = dataset(a.samples)
    print("# %d samples ready in %.0f s; %d cores, load %s" % (a.samples, time.monotonic() - t0, os.cpu_count(),
                                                               open("/proc/loadavg").read().split()[0]))
    results = {}
    ok = True
    for name, flags in (("off", ["--order-ahead-at", "0"]), ("default", [])):
        waits, dones, checks, errors, floor, switched = run(a.bin, data, flags, a.epochs, a.train, a.stagger, a.port)
        print("\n## %s (%s)" % (name, " ".join(flags) or "default flags"))
        nan = float("nan")
        for e in range(a.epochs):
            print("epoch %2d: order per rank %s s; done of the epoch before %s s" % (
                e, " ".join("%.3f" % waits.get((e, r), nan) for r in range(WORLD)),
                " ".join("%.3f" % dones.get((e - 1, r), 0.0 if e == 0 else nan) for r in range(WORLD))))
        # A rank between two epochs waits for its done's reply, then its
        # order: the clients send SHADE.DONE and wait for its answer.
        # Epoch 0 has no epoch before it: its ranks wait for the order alone.
        tail = [w + dones.get((e - 1, r), 0.0 if e == 0 else nan) for (e, r), w in waits.items() if e >= a.start]
        results[name] = tail
        print("epochs %d..%d, done of the epoch before + order: mean %.3f s, median %.3f s, longest %.3f s; "
              "an installed order answers in %.3f s" % (
                  a.start, a.epochs - 1, statistics.mean(tail), statistics.median(tail), max(tail), floor))
        print("slices asked again of another peer: %d identical of %d" % (sum(checks), len(checks)))
        for line in switched:
            print("switched: " + line.strip())
        for err in errors:
            print("error: " + err)
        ok = ok and not errors and checks and all(checks)
    print("\nwait with the default / with orders ahead off, epochs %d..%d: mean %.2fx, median %.2fx" % (
        a.start, a.epochs - 1, statistics.mean(results["default"]) / statistics.mean(results["off"]),
        statistics.median(results["default"]) / statistics.median(results["off"])))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
