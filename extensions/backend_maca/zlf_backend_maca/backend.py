"""The ``maca`` backend: MetaX GPUs, which mcPytorch exposes as ``torch.cuda``.

Everything that runs work (events, streams, CUDAGraph, torch.cuda.graph) is the cuda backend's;
what differs is detection, the vendor tool (``mx-smi``), the Triton target (``maca``, warp 64)
and the IR it produces. Untested on real MetaX hardware (see docs/backends.md).
"""
from __future__ import annotations

import os

from zlf.backends.base import Backend, run_vendor_cli
from zlf.backends.cuda import CudaBackend

from . import mxsmi
from .detect import maca_signals


def _torch_cuda_usable() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available()) and torch.version.hip is None
    except Exception:
        return False


class MacaBackend(CudaBackend):
    name = "maca"
    description = "MetaX GPU through mcPytorch's torch.cuda; events around each sample; mx-smi for state"
    priority = 20  # above cuda: on a detected MetaX machine torch.cuda is MACA, not NVIDIA
    supersedes = ("cuda",)  # and cuda, whose torch.cuda also answers there, stands aside
    timer_name = "maca_event"
    visible_devices_env = "CUDA_VISIBLE_DEVICES"
    # FlagTree's metax backend stages: ttir -> ttgir -> mlir -> llir -> mcfatbin.
    ir_kinds = ("ttir", "ttgir", "mlir", "llir", "mcfatbin")
    triton_target = "maca"
    warp_size = 64
    smi_command = "mx-smi"
    # MACA's CUPTI counterpart (MCPTI, "CUDA-compatible" per public reports; not NVIDIA's CUPTI,
    # which the cuda backend's "cupti" would claim): no zlf timer speaks it yet.
    activity_api = "mcpti"

    @classmethod
    def is_available(cls) -> bool:
        return _torch_cuda_usable() and bool(maca_signals())

    @classmethod
    def available_when_forced(cls) -> bool:
        # torch alone cannot tell MetaX from NVIDIA: --backend maca is the user's word for it.
        return _torch_cuda_usable()

    @classmethod
    def unavailable_reason(cls) -> str:
        if not _torch_cuda_usable():
            return ("backend 'maca' is not available: torch sees no device through torch.cuda "
                    "(MetaX's mcPytorch exposes MACA GPUs there)")
        return ("backend 'maca' was not detected (no GEMS_VENDOR=metax, no working mx-smi, no MetaX Triton "
                "backend); select it with --backend maca")

    def device_state(self) -> dict:
        out = run_vendor_cli(self.smi_command)
        return mxsmi.device_state(out, self._smi_index(), os.getpid()) if out else {}

    def busy_warnings(self) -> list:
        state = self.device_state()
        warnings = []
        if state.get("other_processes"):
            warnings.append(f"another process is using MetaX GPU {self._smi_index()}: " + "; ".join(state["other_processes"]))
        if state.get("state") and state["state"] != "Available":
            warnings.append(f"MetaX GPU {self._smi_index()} reports state {state['state']!r}")
        return warnings

    def fingerprint(self) -> dict:
        import torch

        info = Backend.fingerprint(self)  # not cuda's: nvidia-smi fields mean nothing here
        info["maca_detection"] = maca_signals() or ["forced with --backend maca / ZLF_BACKEND=maca"]
        info["torch_version_cuda"] = getattr(torch.version, "cuda", None)
        info.update(self.device_properties())
        state = self.device_state()
        keys = ("driver_version", "maca_version", "bios_version", "mx_smi_version", "pci.bus_id")
        info.update({k: state[k] for k in keys if k in state})
        return info
