"""Tensors the checker owns and the candidate's worker uses: shared memory, never copies.

The checker (:mod:`zlf_taskpkg.checker`) allocates every buffer the candidate gets -- input
copies and guarded output buffers -- in memory both processes map, and keeps everything else
(the pristine inputs, the baseline's outputs) where the candidate's process cannot reach it:

- CUDA tensors are allocated in a memory pool of their own (``torch.cuda.MemPool``), so the
  allocation segments exported by CUDA IPC (``torch.multiprocessing``'s tensor reductions) hold
  nothing but the shared buffers; the checker keeps them alive while the worker uses them.
- CPU tensors live in files under ``/dev/shm`` mapped by both processes (``torch.from_file``,
  ``shared=True``); the checker deletes the files once the case is over (the mappings stay).

A description (:meth:`SharedArena.describe`) travels to the worker as base64 pickle: only from
the checker to the worker, never the other way.
"""
from __future__ import annotations

import base64
import contextlib
import os
import pickle
import secrets
import tempfile
from pathlib import Path

SHM_DIR = "/dev/shm"


def shm_root() -> Path:
    return Path(SHM_DIR if os.path.isdir(SHM_DIR) and os.access(SHM_DIR, os.W_OK) else tempfile.gettempdir())


def _is_tensor(x) -> bool:
    import torch

    return isinstance(x, torch.Tensor)


def _span(t) -> int:
    """Elements of storage a strided tensor reaches (its storage offset not counted)."""
    if t.numel() == 0:
        return 0
    return 1 + sum((size - 1) * stride for size, stride in zip(t.shape, t.stride()))


_POOLS: list = []


def _pool():
    """The process's one pool for shared CUDA buffers (never destroyed: the worker may still map
    its blocks when a case ends)."""
    import torch

    if not hasattr(torch.cuda, "MemPool"):
        return None
    if not _POOLS:
        _POOLS.append(torch.cuda.MemPool())
    return _POOLS[0]


class SharedArena:
    """The shared buffers of one case, on the checker's side."""

    def __init__(self, device: str, label: str = "case"):
        import torch

        self.device = torch.device(device)
        self.kind = self.device.type
        if self.kind not in ("cpu", "cuda"):
            raise RuntimeError(f"device {device!r}: the judge shares buffers with the candidate's process on "
                               "cpu (shared memory) and cuda (CUDA IPC) only")
        self.files: list = []
        self.tensors: list = []  # every shared base tensor, alive until close()
        self.pool = _pool() if self.kind == "cuda" else None
        self.prefix = f"zlf-task-{os.getpid()}-{label}-{secrets.token_hex(4)}"

    @contextlib.contextmanager
    def _allocating(self):
        import torch

        if self.pool is not None:
            with torch.cuda.use_mem_pool(self.pool, device=self.device):
                yield
        else:
            yield

    def empty(self, shape, stride, dtype):
        """A tensor of ``shape``/``stride`` in shared memory (uninitialised)."""
        import torch

        probe = torch.empty_strided(shape, stride, dtype=dtype, device="meta")
        elems = _span(probe)
        if self.kind == "cuda":
            with self._allocating():
                base = torch.empty(max(elems, 1), dtype=dtype, device=self.device)
        else:
            path = shm_root() / f"{self.prefix}-{len(self.files)}"
            self.files.append(path)
            nbytes = max(elems, 1) * probe.element_size()
            base = torch.from_file(str(path), shared=True, size=nbytes, dtype=torch.uint8).view(dtype)
        self.tensors.append(base)
        return base.as_strided(shape, stride)

    def copy_of(self, t):
        """A shared copy of ``t`` with ``clone()``'s strides."""
        like = t.clone() if t.numel() else t
        out = self.empty(tuple(like.shape), tuple(like.stride()), like.dtype)
        out.copy_(like)
        return out

    def describe(self, args) -> str:
        """``args`` (shared tensors and plain values) as text the worker turns back into them."""
        items = []
        for a in args:
            if _is_tensor(a) and a.numel() and a.device.type != "meta":
                items.append(("tensor", self._handle(a)))
            else:
                items.append(("value", a))
        return base64.b64encode(pickle.dumps(items)).decode()

    def _handle(self, t):
        if self.kind == "cuda":
            from torch.multiprocessing.reductions import reduce_tensor

            return ("cuda", reduce_tensor(t))
        k = next(k for k, b in enumerate(self.tensors)
                 if b.untyped_storage().data_ptr() == t.untyped_storage().data_ptr())
        base, path = self.tensors[k], self.files[k]
        return ("file", str(path), base.untyped_storage().nbytes(), t.dtype, tuple(t.shape), tuple(t.stride()),
                t.storage_offset())

    def unlink(self) -> None:
        """Delete the CPU files (both processes keep their mappings)."""
        for path in self.files:
            with contextlib.suppress(OSError):
                path.unlink()

    def close(self) -> None:
        self.unlink()
        self.tensors.clear()


def open_shared(text: str) -> list:
    """The worker's side of :meth:`SharedArena.describe`: the arguments, mapped."""
    import torch

    args = []
    for kind, payload in pickle.loads(base64.b64decode(text)):
        if kind == "value":
            args.append(payload)
        elif payload[0] == "cuda":
            rebuild, rebuild_args = payload[1]
            args.append(rebuild(*rebuild_args))
        else:
            _, path, nbytes, dtype, shape, stride, offset = payload
            if not os.path.isfile(path) or os.path.getsize(path) != nbytes:
                raise RuntimeError(f"shared buffer {path} is gone (the checker removed it)")
            base = torch.from_file(path, shared=True, size=nbytes, dtype=torch.uint8).view(dtype)
            args.append(base.as_strided(shape, stride, offset))
    return args
