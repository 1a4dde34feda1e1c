"""Keeping freed memory for the next batch (glibc's malloc).

A trainer reads samples of tens to hundreds of KiB, one ``bytes`` object
each, and frees them a batch later. glibc's malloc hands memory freed at
the top of its heap back to the kernel once more than 128 KiB of it is free
(``M_TRIM_THRESHOLD``), so the next batch's samples are faulted in afresh:
a page fault and a zeroed page per 4 KiB received or copied. With 64
samples of 100 KiB a request that is 1,600 faults, about as much of the
trainer's CPU as parsing the reply. :func:`retain_freed_memory` asks malloc
to keep up to ``RETAINED`` bytes of freed memory for reuse and to take
blocks of up to ``FROM_HEAP`` bytes from its heap, so that a batch reuses
the pages of the one before. :class:`shade.Client` calls it when it is made
(``retain_freed_memory=False`` leaves malloc as it is).
"""

import ctypes
import os
import threading

#: freed memory at the top of the heap malloc keeps for reuse
#: (M_TRIM_THRESHOLD; glibc's default is 128 KiB)
RETAINED = 256 << 20
#: blocks up to this size come from the heap, whose pages are reused, not
#: from mappings of their own, which are unmapped when freed
#: (M_MMAP_THRESHOLD: glibc's largest; its default starts at 128 KiB)
FROM_HEAP = 32 << 20

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
# The environment variables through which a user sets the same by hand.
_USER_SETTINGS = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_")

_lock = threading.Lock()
_applied = None


def retain_freed_memory() -> bool:
    """Make this process's malloc keep freed memory for reuse (see the
    module's doc), once per process; later calls return the first call's
    answer. Returns whether malloc took the settings: False where the C
    library is not glibc, or where the user set MALLOC_TRIM_THRESHOLD_ or
    MALLOC_MMAP_THRESHOLD_ (their choice stands). A forked child keeps
    the settings."""
    global _applied
    with _lock:
        if _applied is None:
            _applied = _apply()
        return _applied


def _apply() -> bool:
    if any(name in os.environ for name in _USER_SETTINGS):
        return False
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # glibc's alone: another libc's mallopt may differ
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return mallopt(_M_TRIM_THRESHOLD, RETAINED) == 1 and mallopt(_M_MMAP_THRESHOLD, FROM_HEAP) == 1
