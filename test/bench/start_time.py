#!/usr/bin/python3
"""How long a peer takes to start and to stop, two shade-peer builds side
by side: each round launches a standalone peer of each build in turn
(alternating which goes first) with --cache-size SIZE, and times it from
launch to its first PING answered on the trainer socket; it also reads the
CPU the peer had spent by then (user + system, every thread, from /proc).
Most of both is faulting the cache in. Then it sends SIGTERM and times the
peer's exit, most of which is the kernel freeing the cache's pages (about
a quarter of a second a GiB in 4 KiB pages, far less in huge pages: the
README's "Huge pages"). Prints each round, the medians, and B against A.

    test/bench/start_time.py --a <dir> [--b <dir>] [--cache-size 4GiB] [--rounds 2]

--a and --b are folders holding a shade-peer binary (the base first). The
machine needs the cache's memory free, and the peer refuses a cache larger
than its memory limit allows.
"""

import argparse
import os
import socket
import statistics
import subprocess
import tempfile
import time

from read_through import cpu_seconds


def start(binary, size):
    """Seconds from launch to the first PING answered, the CPU seconds the
    peer had used then, and seconds from SIGTERM to its exit."""
    tmp = tempfile.mkdtemp(prefix="shade-start-")
    path = os.path.join(tmp, "s.sock")
    log = open(os.path.join(tmp, "peer.log"), "w+")
    t0 = time.monotonic()
    peer = subprocess.Popen([binary, "--name", "start", "--socket", path, "--cache-size", size,
                             "--admin-addr", "off", "--log-level", "warn"], stderr=log)
    ready = None
    try:
        while peer.poll() is None and time.monotonic() - t0 < 600:
            with socket.socket(socket.AF_UNIX) as s:
                try:
                    s.connect(path)
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        ready = time.monotonic() - t0, cpu_seconds(peer.pid)
                        break
                except OSError:
                    pass
            time.sleep(0.01)
        if ready is None:
            log.seek(0)
            raise SystemExit(f"{binary}: no answer to PING; its log ends:\n{log.read()[-500:]}")
    finally:
        t1 = time.monotonic()
        peer.terminate()
        peer.wait()
        stop = time.monotonic() - t1
        log.close()
        for name in os.listdir(tmp):
            os.remove(os.path.join(tmp, name))
        os.rmdir(tmp)
    return ready + (stop,)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", required=True, help="folder of the base shade-peer")
    ap.add_argument("--b", help="folder of the shade-peer to compare (default: --a)")
    ap.add_argument("--cache-size", default="4GiB")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    builds = {"A": args.a, "B": args.b or args.a}
    runs = {"A": [], "B": []}
    print(f"# {os.cpu_count()} cores, load {' '.join(open('/proc/loadavg').read().split()[:3])}; "
          f"--cache-size {args.cache_size}, {args.rounds} rounds")
    for r in range(args.rounds):
        for name in ("AB" if r % 2 == 0 else "BA"):
            ready, cpu, stop = start(os.path.join(builds[name], "shade-peer"), args.cache_size)
            runs[name].append((ready, cpu, stop))
            print(f"round {r + 1} {name}: ready in {ready:.2f} s, CPU {cpu:.2f} s, stopped in {stop:.3f} s")
    med = {n: [statistics.median(x[i] for x in v) for i in range(3)] for n, v in runs.items()}
    for name in "AB":
        print(f"{name} {builds[name]}: ready in {med[name][0]:.2f} s, CPU {med[name][1]:.2f} s, "
              f"stopped in {med[name][2]:.3f} s (medians)")
    print(f"B / A: ready {med['B'][0] / med['A'][0]:.2f}x, CPU {med['B'][1] / med['A'][1]:.2f}x, "
          f"stop {med['B'][2] / med['A'][2]:.2f}x")


if __name__ == "__main__":
    main()
