"""Fixtures: real shade-peer processes serving a small Fashion-MNIST import.

The binaries are built with `go build` into a temporary folder, or taken from
$SHADE_BIN_DIR (holding shade-peer and shadectl) when it is set. The tests are
skipped only when the Fashion-MNIST package or the Go toolchain is missing.
$SHADE_OLD_BIN_DIR, when set, holds a shade-peer built before SHADE.ORDER
WITHWEIGHTS, for the test of the client's fallback (skipped without it).
"""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]  # client/python/tests -> repository root
sys.path.insert(0, str(HERE.parent))  # usable without installing

IDX_DIR = Path("/usr/share/datasets/fashion-mnist")
TRAIN, TEST = "fmnist-train", "fmnist-test"


def _go():
    return shutil.which("go") or next(
        (p for p in ("/usr/local/go/bin/go", "/usr/lib/go/bin/go") if os.access(p, os.X_OK)), None)


@pytest.fixture(scope="session")
def workdir():
    # Short: a Unix socket path must stay under 108 bytes.
    d = tempfile.mkdtemp(prefix="shade-py-")
    yield Path(d)
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="session")
def bins(workdir):
    if not IDX_DIR.is_dir():
        pytest.skip(f"{IDX_DIR} is absent (Debian package dataset-fashion-mnist)")
    env_dir = os.environ.get("SHADE_BIN_DIR")
    if env_dir:
        return Path(env_dir)
    go = _go()
    if go is None:
        pytest.skip("the Go toolchain (go) is not installed and SHADE_BIN_DIR is not set")
    out = workdir / "bin"
    out.mkdir()
    r = subprocess.run([go, "build", "-o", str(out) + "/", "./cmd/shade-peer", "./cmd/shadectl"],
                       cwd=REPO, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        pytest.fail(f"go build failed (set SHADE_BIN_DIR to use built binaries):\n{r.stderr}")
    return out


@pytest.fixture(scope="session")
def fmnist(bins, workdir):
    """Path of an import of the first 200 train and 200 test images."""
    dst = workdir / "fmnist"
    subprocess.run([str(bins / "shadectl"), "dataset", "import-idx", "--dst", str(dst),
                    "--limit", "200"], check=True, capture_output=True, timeout=120)
    return dst


class Peer:
    """One shade-peer process on a socket; restartable on the same socket."""

    def __init__(self, bins, data, sock, *extra):
        self.cmd = [str(bins / "shade-peer"), "--name", "t", "--socket", str(sock),
                    "--dataset", f"{TRAIN}={data / 'train'}", "--dataset", f"{TEST}={data / 'test'}",
                    "--cache-size", "64MiB", "--policy", "app", "--pads", "on",
                    "--log-format", "json", *extra]
        self.sock = str(sock)
        self.log = open(Path(sock).with_suffix(".log"), "ab")
        self.proc = None

    def start(self, wait=True):
        self.proc = subprocess.Popen(self.cmd, stdout=self.log, stderr=subprocess.STDOUT)
        if wait:
            self.wait_ready()
        return self

    def wait_ready(self, limit=10.0):
        import socket
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"shade-peer exited with {self.proc.returncode}; see {self.log.name}")
            try:
                with socket.socket(socket.AF_UNIX) as s:
                    s.connect(self.sock)
                return
            except OSError:
                time.sleep(0.02)
        raise RuntimeError(f"shade-peer not answering on {self.sock} after {limit}s")

    def kill(self, sig=signal.SIGKILL):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(10)

    def stop(self):
        self.kill(signal.SIGTERM)
        self.log.close()


@pytest.fixture(scope="session")
def peer(bins, fmnist, workdir):
    """The session's peer, stopped with SIGTERM at the end."""
    p = Peer(bins, fmnist, workdir / "s.sock").start()
    yield p
    p.stop()
    assert p.proc.returncode == 0, f"shade-peer exited with {p.proc.returncode} on SIGTERM"


@pytest.fixture
def make_peer(bins, fmnist, workdir):
    """Factory of private peers (for restarts and options); all stopped after the test."""
    made = []

    def make(name, *extra):
        p = Peer(bins, fmnist, workdir / f"{name}.sock", *extra)
        made.append(p)
        return p

    yield make
    for p in made:
        p.stop()


@pytest.fixture
def client(peer):
    import shade
    c = shade.Client(peer.sock, retry_for=10)
    yield c
    c.close()
