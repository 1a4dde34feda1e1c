"""shade.malloc: a Client made in a process has its malloc keep freed
memory, so that a batch's samples reuse the pages of the batch before
instead of being faulted in afresh. Each case runs in a fresh interpreter,
whose malloc no other test has touched."""

import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

CLIENT = Path(__file__).resolve().parents[1]

# Makes a Client (which connects to nothing until a command), then frees
# and allocates batches of 64 samples of 100 KiB, as a trainer does, and
# prints the page faults per batch after the first.
BATCHES = """
import resource, sys
import shade
shade.Client("/nonexistent/shade.sock", retain_freed_memory=sys.argv[1] == "retain")
def batch():
    samples = [bytes([i]) * 102400 for i in range(64)]
    del samples
batch()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    batch()
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 20)
"""


def faults_per_batch(mode, env=None):
    environ = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    environ.update(env or {}, PYTHONPATH=str(CLIENT))
    out = subprocess.run([sys.executable, "-c", BATCHES, mode], env=environ, check=True,
                         capture_output=True, text=True).stdout
    return float(out)


@pytest.fixture(scope="module")
def left():
    """Page faults a batch where malloc is left as it is."""
    n = faults_per_batch("leave")
    if n < 400:
        pytest.skip(f"this malloc faults {n} pages a batch in anyway: nothing to keep")
    return n


def test_client_keeps_freed_memory(left):
    # 6.4 MB a batch: 1,600 pages, faulted in again without the setting.
    assert faults_per_batch("retain") < 40, f"a batch still faults pages in ({left} without the setting)"


def test_user_setting_stands(left):
    # A user's own MALLOC_TRIM_THRESHOLD_ (here glibc's default) is left
    # alone: the batches fault pages in as without the setting.
    assert faults_per_batch("retain", {"MALLOC_TRIM_THRESHOLD_": str(128 << 10)}) >= left / 2


def test_retain_freed_memory_once():
    out = subprocess.run(
        [sys.executable, "-c", "import shade.malloc as m; print(m.retain_freed_memory(), m.retain_freed_memory())"],
        env={**os.environ, "PYTHONPATH": str(CLIENT)}, check=True, capture_output=True, text=True).stdout
    glibc = platform.libc_ver()[0] == "glibc" and not any(k in os.environ for k in ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_"))
    assert out.split() == [str(glibc)] * 2
