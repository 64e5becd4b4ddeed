"""Tensors the checker owns and the candidate's worker uses: shared memory, never copies.

The checker (:mod:`zlf_taskpkg.checker`) allocates every buffer the candidate gets -- input
copies and guarded output buffers -- in memory both processes map, and keeps everything else
(the pristine inputs, the baseline's outputs) where the candidate's process cannot reach it:

- CUDA tensors are allocated in a memory pool of their own (``torch.cuda.MemPool``), so the
  allocation segments exported by CUDA IPC (``torch.multiprocessing``'s tensor reductions) hold
  nothing but the shared buffers; the checker keeps them alive while the worker uses them.
- CPU tensors live in files under ``/dev/shm`` mapped by both processes (``torch.from_file``,
  ``shared=True``); the checker deletes the files once the case is over (the mappings stay).
- Any other device (a vendor backend: no IPC torch can use) is *staged*: the checker's buffers
  are host staging files as for CPU; the worker allocates device tensors of the same layout
  (:class:`Staging`), copies the staging files in before the candidate runs and the device
  tensors back out after each checked call, and the checker reads the staging files.

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
#: for tests only: ``staged`` makes every device use staged sharing (so CPU runs exercise it)
SHARING_ENV = "ZLF_TASK_SHARING"
IPC, SHM, STAGED = "ipc", "shm", "staged"
SHARING_WHY = {IPC: "CUDA IPC: the worker maps the checker's device buffers",
               SHM: "shared memory: both processes map the same /dev/shm files",
               STAGED: "staged: the checker's host buffers in /dev/shm, copied to and from the worker's "
                       "device tensors by the worker, outside the timed calls"}


def sharing_mode(device: str) -> str:
    """How buffers cross for ``device``: ``ipc`` (cuda), ``shm`` (cpu), ``staged`` (any other
    device type, or every device when ``$ZLF_TASK_SHARING`` is ``staged``, for tests). Read from
    the string: a vendor's device type (``musa``) is one torch knows only once its module is loaded."""
    if os.environ.get(SHARING_ENV) == STAGED:
        return STAGED
    return {"cuda": IPC, "cpu": SHM}.get(str(device).split(":")[0], STAGED)


#: the pair's shared-memory directory, set by the judge for the checker and the worker (the
#: worker's sandbox sees it as its /dev/shm): only this pair's buffers are in it
SHM_DIR_ENV = "ZLF_TASK_SHM_DIR"


def shm_root() -> Path:
    given = os.environ.get(SHM_DIR_ENV)
    if given:
        return Path(given)
    return Path(SHM_DIR if os.path.isdir(SHM_DIR) and os.access(SHM_DIR, os.W_OK) else tempfile.gettempdir())


def _link_ref_counter(rebuild_args) -> None:
    """Legacy CUDA IPC keeps a reference count in a POSIX shared-memory file (``/dev/shm/torch_...``)
    the worker opens by name: linked into the pair's directory, the worker's private /dev/shm."""
    root = shm_root()
    if str(root) == SHM_DIR:
        return
    for handle in rebuild_args:
        if isinstance(handle, bytes) and handle.startswith(b"/torch_"):
            name = handle.decode()[1:]
            with contextlib.suppress(OSError):
                if not (root / name).exists():
                    os.link(os.path.join(SHM_DIR, name), root / name)


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
        self.device = str(device)
        self.mode = sharing_mode(device)
        self.kind = "cuda" if self.mode == IPC else "cpu"  # where the shared buffers live
        self.files: list = []
        self.tensors: list = []  # every shared base tensor, alive until close()
        self.pool = _pool() if self.kind == "cuda" else None
        self.prefix = f"zlf-task-{os.getpid()}-{label}-{secrets.token_hex(4)}"

    @contextlib.contextmanager
    def _allocating(self):
        import torch

        if self.pool is not None:
            with torch.cuda.use_mem_pool(self.pool, device=torch.device(self.device)):
                yield
        else:
            yield

    def empty(self, shape, stride, dtype):
        """A tensor of ``shape``/``stride`` in shared memory (uninitialised); on the host when staged."""
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

            reduced = reduce_tensor(t)
            _link_ref_counter(reduced[1])
            return ("cuda", reduced)
        k = next(k for k, b in enumerate(self.tensors)
                 if b.untyped_storage().data_ptr() == t.untyped_storage().data_ptr())
        base, path = self.tensors[k], self.files[k]
        return ("staged" if self.mode == STAGED else "file", path.name, base.untyped_storage().nbytes(), t.dtype, tuple(t.shape), tuple(t.stride()),
                t.storage_offset())

    def unlink(self) -> None:
        """Delete the CPU files (both processes keep their mappings)."""
        for path in self.files:
            with contextlib.suppress(OSError):
                path.unlink()

    def close(self) -> None:
        self.unlink()
        self.tensors.clear()


class Staging:
    """The worker's device tensors of a staged case, each paired with the checker's host staging
    buffer (the whole buffer: an output's canaries and an input's every byte travel)."""

    def __init__(self, device: str):
        self.device = device
        self.pairs: list = []  # (host staging bytes, device bytes)

    def add(self, host):
        """A device tensor with the bytes of ``host`` (a staging file's uint8 base)."""
        import torch

        dev = torch.empty(host.numel(), dtype=torch.uint8, device=self.device)
        self.pairs.append((host, dev))
        return dev

    def upload(self) -> None:
        """Staging files → device tensors (the checker's inputs, canaries, poison)."""
        for host, dev in self.pairs:
            dev.copy_(host)

    def download(self) -> None:
        """Device tensors → staging files (outputs with their canaries, inputs): what the checker reads."""
        for host, dev in self.pairs:
            host.copy_(dev)


def open_shared(text: str, staging: "Staging | None" = None) -> list:
    """The worker's side of :meth:`SharedArena.describe`: the arguments, mapped (staged ones on
    ``staging``'s device, paired with their staging files)."""
    import torch

    args = []
    for kind, payload in pickle.loads(base64.b64decode(text)):
        if kind == "value":  # a plain value, or an empty tensor (no buffer): put on the device
            if staging is not None and _is_tensor(payload) and payload.device.type != "meta":
                payload = payload.to(staging.device)
            args.append(payload)
        elif payload[0] == "cuda":
            rebuild, rebuild_args = payload[1]
            args.append(rebuild(*rebuild_args))
        else:
            how, name, nbytes, dtype, shape, stride, offset = payload
            path = str(shm_root() / os.path.basename(name))  # the worker's view of the pair's directory
            if not os.path.isfile(path) or os.path.getsize(path) != nbytes:
                raise RuntimeError(f"shared buffer {path} is gone (the checker removed it)")
            base = torch.from_file(path, shared=True, size=nbytes, dtype=torch.uint8)
            if how == STAGED:
                if staging is None:
                    raise RuntimeError("staged buffers need the worker's Staging")
                base = staging.add(base)
            args.append(base.view(dtype).as_strided(shape, stride, offset))
    return args
