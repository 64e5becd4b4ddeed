"""The ``musa`` backend: Moore Threads GPUs through torch_musa, timed with MUSA events.

torch_musa mirrors torch.cuda under ``torch.musa`` (Event, Stream, synchronize, MUSAGraph,
graph). Written against that public API; untested on real MUSA hardware (see
docs/backends.md).
"""
from __future__ import annotations

import importlib.util
import os
import sys

from zlf.backends.base import Backend, run_vendor_cli

from . import gmi


def _torch_musa_installed() -> bool:
    try:
        return "torch_musa" in sys.modules or importlib.util.find_spec("torch_musa") is not None
    except (ImportError, ValueError):
        return False


def _musa():
    """``torch.musa`` (importing torch_musa is what registers it)."""
    import torch
    import torch_musa  # noqa: F401

    return torch.musa


class MusaBackend(Backend):
    name = "musa"
    description = "Moore Threads GPU through torch_musa (torch.musa); MUSA events around each sample"
    priority = 20
    timer_name = "musa_event"
    # the MUSA toolkit's activity API (libmupti), by public reports CUPTI-like: no zlf timer speaks it yet
    activity_api = "mupti"
    visible_devices_env = "MUSA_VISIBLE_DEVICES"
    # FlagTree's mthreads backend stages: ttir -> ttgir -> llir -> mubin.
    ir_kinds = ("ttir", "ttgir", "llir", "mubin")
    triton_target = "musa"
    warp_size = 32
    smi_command = "mthreads-gmi"

    def __init__(self, device_index: int = 0):
        super().__init__(device_index)
        self._cache = None

    # ---------------------------------------------------------------- detection
    @classmethod
    def is_available(cls) -> bool:
        if not _torch_musa_installed():
            return False  # without this check every auto-detection would try the import
        try:
            return bool(_musa().is_available())
        except Exception:
            return False

    @classmethod
    def unavailable_reason(cls) -> str:
        if not _torch_musa_installed():
            return ("backend 'musa' is not available: torch_musa is not installed "
                    "(Moore Threads' PyTorch plug-in that provides torch.musa)")
        try:
            musa = _musa()
        except Exception as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            return f"backend 'musa' is not available: import torch_musa failed: {type(exc).__name__}: {first}"
        return f"backend 'musa' is not available: torch_musa sees no MUSA device ({musa.device_count()} visible)"

    # ---------------------------------------------------------------- lifecycle
    def setup(self) -> None:
        musa = _musa()
        if self.index >= musa.device_count():
            from zlf import UsageError

            raise UsageError(f"--device {self.index}: only {musa.device_count()} MUSA device(s) visible")
        musa.set_device(self.index)

    @property
    def device(self) -> str:
        return f"musa:{self.index}"

    @property
    def torch_device_module(self):
        return _musa()

    # ---------------------------------------------------------------- execution
    def synchronize(self) -> None:
        _musa().synchronize(self.index)

    def event(self):
        return _musa().Event(enable_timing=True)

    def new_stream(self):
        return _musa().Stream(device=self.index)

    def stream_context(self, stream):
        return _musa().stream(stream)

    def current_stream(self):
        return _musa().current_stream(self.index)

    def new_graph(self):
        return _musa().MUSAGraph()

    def graph_capture(self, graph, stream=None, pool=None):
        # The 3.1-based vendor Tritons refuse capture on the default stream: callers pass a new_stream().
        if pool is None:
            return _musa().graph(graph, stream=stream)
        return _musa().graph(graph, pool=pool, stream=stream)

    def graph_pool_handle(self):
        handle = getattr(_musa(), "graph_pool_handle", None)
        return handle() if handle is not None else None

    def discard_graph_pool(self, pool) -> None:
        # torch_musa mirrors torch's private allocator bindings with "cuda" renamed to "musa"
        # (as _musa_isCurrentStreamCapturing); best effort, like the cuda backend's cleanup.
        bindings = getattr(sys.modules.get("torch_musa"), "_MUSAC", None)
        end = getattr(bindings, "_musa_endAllocateToPool", None) or getattr(
            bindings, "_musa_endAllocateCurrentStreamToPool", None)
        for step in (end, getattr(bindings, "_musa_releasePool", None)):
            if step is None:
                continue
            try:
                step(self.index, pool)
            except RuntimeError:
                pass  # already ended / released: the capture failed before reaching the allocator

    def flush_l2(self) -> None:
        import torch

        if self._cache is None:
            # 256 MB: many times the L2 of current MUSA parts, as triton.testing does on CUDA.
            self._cache = torch.empty(256 * 1024 * 1024 // 4, dtype=torch.int32, device=self.device)
        self._cache.zero_()

    def is_oom(self, exc: BaseException) -> bool:
        oom_type = getattr(_musa(), "OutOfMemoryError", None)
        return (oom_type is not None and isinstance(exc, oom_type)) or "out of memory" in str(exc).lower()

    def free_memory(self) -> None:
        _musa().empty_cache()

    # ---------------------------------------------------------------- environment
    def device_name(self) -> str:
        return _musa().get_device_name(self.index)

    def _gmi_index(self) -> str:
        # mthreads-gmi numbers physical GPUs; map through MUSA_VISIBLE_DEVICES when it is a list.
        ids = [v.strip() for v in os.environ.get(self.visible_devices_env, "").split(",") if v.strip()]
        return ids[self.index] if ids and self.index < len(ids) else str(self.index)

    def device_state(self) -> dict:
        out = run_vendor_cli(self.smi_command, ["-q", "-i", self._gmi_index()])
        return gmi.device_state(out, os.getpid()) if out else {}

    def busy_warnings(self) -> list:
        state = self.device_state()
        warnings = []
        if state.get("other_processes"):
            warnings.append(f"another process is using MUSA GPU {self._gmi_index()}: " + "; ".join(state["other_processes"]))
        if state.get("throttle"):
            warnings.append(f"MUSA GPU clocks are throttled ({state['throttle']})")
        return warnings

    def fingerprint(self) -> dict:
        import torch

        info = super().fingerprint()
        _musa()  # imports torch_musa, whose version is recorded
        torch_musa = sys.modules.get("torch_musa")
        info["torch_musa"] = getattr(torch_musa, "__version__", "?")
        info["musa_runtime"] = getattr(torch.version, "musa", None)
        info.update(self.device_properties())
        state = self.device_state()
        info.update({k: state[k] for k in ("driver_version", "mtbios_version", "uuid", "pci.bus_id") if k in state})
        return info
