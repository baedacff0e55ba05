"""Output buffers that do not pay 4 KiB page faults: the one allocator of the kernels.

:func:`empty` returns large tensors backed by an anonymous mapping advised for transparent huge
pages (``MADV_HUGEPAGE``, scoped to that buffer only; nothing machine-wide is changed), so filling
a fresh 100 MB output faults 50 huge pages instead of 25,000 small ones; a freed buffer's mapping
is kept in a small pool for the next buffer of the same size.  :func:`zeros`,
:func:`empty_maybe_zero`, :func:`zeros_f32` and :func:`empty_f32_tensor` are views of the same
allocator; :func:`prefault` faults a fresh buffer's pages on the calling thread.
"""

from __future__ import annotations

import collections
import errno
import mmap
import os
import threading
import weakref

import numpy as np
import torch

_HUGE = 2 << 20  # x86-64 transparent huge page size
_HUGE_MIN = 8 << 20  # below this, malloc's heap serves allocations without fresh page faults



def _pool_bytes() -> int:
    """An eighth of the machine's memory, between 512 MiB and 4 GiB (512 MiB where the size is not known)."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # pragma: no cover - not POSIX
        return 512 << 20
    return int(min(4 << 30, max(512 << 20, total // 8)))


#: Freed output mappings kept for reuse by the next buffer of the same size (bytes, entries);
#: POOL_BYTES = 0 turns the reuse off.  With four entries, the four 9 MB outputs of decoding
#: ResNet-50's largest convolutions evicted the whole-step buffer of the compress before, so every
#: compress mapped and faulted 100 MB afresh (the identity compressor at 8x a copy in the cnn suite
#: instead of 1.2x).  With sixteen entries and 512 MiB, a GPT-2-sized step (25 outputs of 9 MB and
#: more per worker, 2.4 GB of them in a one-step two-worker case) still faulted most outputs afresh:
#: a one-step ``gcbench run --model hf:gpt2`` spent 32–33 s of its 72–76 s in the kernel (page faults);
#: with 256 entries and 4 GiB, 22.5 s of 63.5 s (docs/timing.md).  The bytes are an eighth of the
#: machine's memory, so a small machine keeps less freed memory back.
POOL_BYTES = _pool_bytes()
POOL_ENTRIES = 256
#: A pooled mapping serves a buffer up to 1/POOL_SLACK (and one huge page) smaller than it holds.
POOL_SLACK = 8
_returned: collections.deque[tuple[int, mmap.mmap]] = collections.deque()  # filled by finalizers
_pool: list[tuple[int, mmap.mmap]] = []
_pool_lock = threading.Lock()


def _huge_ok(nbytes: int) -> bool:
    return nbytes >= _HUGE_MIN and hasattr(mmap, "MADV_HUGEPAGE") and os.name == "posix"


def _recycle(capacity: int, mm: mmap.mmap) -> None:
    """Finalizer of a buffer's array: hand its mapping back (no lock: it may run inside any
    allocation, in any thread; ``deque.append`` is atomic)."""
    _returned.append((capacity, mm))


def _take_mapping(nbytes: int) -> mmap.mmap | None:
    """The smallest freed mapping that holds ``nbytes`` with at most :data:`POOL_SLACK` of it to
    spare, if one is pooled (the pool is trimmed here).

    Not only an exact size: a sparsifier's body changes size with its count from step to step
    (threshold's first step selects fewer than the next), and a mapping kept but never taken
    again only holds memory (the bench's peak grew by a whole body when reuse needed the exact size).
    """
    with _pool_lock:
        while _returned:
            _pool.append(_returned.popleft())
        total = sum(len(mm) for _, mm in _pool)
        while _pool and (len(_pool) > POOL_ENTRIES or total > POOL_BYTES):
            total -= len(_pool.pop(0)[1])  # the oldest goes; it is unmapped when collected
        best = -1
        for i, (cap, _) in enumerate(_pool):
            if nbytes <= cap <= nbytes + nbytes // POOL_SLACK + _HUGE and (best < 0 or cap <= _pool[best][0]):  # the latest freed of equals
                best = i
        if best >= 0:
            return _pool.pop(best)[1]
    return None


def _buffer(nbytes: int) -> tuple[torch.Tensor, bool]:
    """(uint8 tensor of ``nbytes`` on huge pages, whether its memory was used before)."""
    mm = _take_mapping(nbytes) if POOL_BYTES > 0 else None
    reused = mm is not None
    if mm is None:  # whole huge pages and the alignment's slack: a slightly larger buffer fits it later
        try:
            mm = mmap.mmap(-1, -(-nbytes // _HUGE) * _HUGE + _HUGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        except OSError as exc:  # out of address space or memory: the error every other allocator raises
            if exc.errno != errno.ENOMEM:
                raise
            raise MemoryError(f"cannot map a {nbytes}-byte buffer: {exc.strerror}") from exc
    raw = np.frombuffer(mm, dtype=np.uint8)  # the array (and every view of it) keeps ``mm`` alive
    off = (-raw.ctypes.data) % _HUGE
    if not reused:
        try:
            mm.madvise(mmap.MADV_HUGEPAGE, off, len(mm) - off)
        except (OSError, ValueError):  # pragma: no cover - no THP: small pages, still correct
            pass
    if POOL_BYTES > 0:
        weakref.finalize(raw, _recycle, len(mm) - off, mm).atexit = False
    return torch.from_numpy(raw[off : off + nbytes]), reused


def empty(n: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A new flat CPU tensor of ``n`` elements whose pages are cheap to fault in.

    Large buffers come from their own anonymous mapping, aligned to 2 MiB and advised
    ``MADV_HUGEPAGE`` (a per-buffer hint that the machine's THP mode "madvise" honours): the
    first write faults 2 MiB at a time (a fresh 100 MB output: 6 ms here against 22–28 ms with
    4 KiB pages).  When the tensor (and every view of it) is freed, the mapping goes to a small
    pool (:data:`POOL_BYTES`, :data:`POOL_ENTRIES`) and the next buffer of about the same size
    (:data:`POOL_SLACK`) reuses it without faulting again — a caching allocator for these outputs only: a buffer is reused
    only after its last reference is gone, so nothing a caller holds is ever overwritten.
    Small buffers, and systems without the advice, use ``torch.empty``.
    """
    nbytes = int(n) * dtype.itemsize
    if not _huge_ok(nbytes):
        return torch.empty(int(n), dtype=dtype)
    return _buffer(nbytes)[0].view(dtype)


def zeros(n: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A zero-filled flat tensor: a fresh mapping reads as zero, a reused one is cleared; small
    ones are zeroed by the C allocator on this thread (``torch.zeros`` may start a parallel fill)."""
    itemsize = torch.empty(0, dtype=dtype).element_size()
    nbytes = int(n) * itemsize
    if not _huge_ok(nbytes):
        return torch.from_numpy(np.zeros(nbytes, np.uint8)).view(dtype)
    buf, reused = _buffer(nbytes)
    if reused:
        buf.zero_()
    return buf.view(dtype)


def empty_maybe_zero(n: int, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, bool]:
    """:func:`zeros` without the clearing: a new flat tensor and whether it already reads as zero.

    False only for a reused pooled mapping (it holds an earlier, freed output): a kernel that
    writes every element anyway clears it part by part, while the part is in cache, instead of
    paying a separate pass.  (``zeros`` clears with a torch fill, whose OpenMP workers keep
    spinning afterwards against the next kernel's threads when no core is spare: the sparse decode
    scatter right after it took 17 ms instead of 9.5–12.5.)  A fresh mapping, or a small buffer
    from ``np.zeros``, reads as zero.
    """
    itemsize = torch.empty(0, dtype=dtype).element_size()
    nbytes = int(n) * itemsize
    if not _huge_ok(nbytes):
        return torch.from_numpy(np.zeros(nbytes, np.uint8)).view(dtype), True
    buf, reused = _buffer(nbytes)
    return buf.view(dtype), not reused



def prefault(arr: np.ndarray) -> np.ndarray:
    """Touch one byte per 2 MiB of a fresh array on the calling thread, so its pages are faulted in.

    Worker threads that fault fresh huge pages of one buffer at the same time were 3–6× slower
    here than one thread faulting them first (the decode of a 25.6M-element payload: 130 ms from
    2 threads on fresh memory, 26 ms with this, 7 ms of it the kernel zeroing the pages).
    """
    if arr.nbytes >= 2 * _HUGE:
        arr.reshape(-1).view(np.uint8)[::_HUGE] = 0
    return arr


def zeros_f32(n: int, touch: bool = True) -> np.ndarray:
    """:func:`zeros` of ``n`` float32 as a NumPy array.

    ``touch`` faults its pages in on the calling thread (:func:`prefault`); leave it False when
    only a few entries will be written.
    """
    out = zeros(n).numpy()
    return prefault(out) if touch else out


def empty_f32_tensor(n: int) -> torch.Tensor:
    """:func:`empty` of ``n`` float32 with its pages faulted in on the calling thread."""
    out = empty(n)
    prefault(out.numpy())
    return out


