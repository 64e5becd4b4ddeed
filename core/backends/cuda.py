"""The ``cuda`` backend: NVIDIA GPUs through torch.cuda, timed with CUDA events."""
from __future__ import annotations

import os

from .base import Backend, ClockSampler, run_vendor_cli

#: clock readings while a point is timed: NVML reads are microseconds; nvidia-smi is a process each.
NVML_INTERVAL_S = 0.015
SMI_INTERVAL_S = 0.25

_SMI_GPU_FIELDS = (
    "name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,temperature.gpu,power.draw,"
    "utilization.gpu,clocks_throttle_reasons.active,pci.bus_id,uuid"
)


FLUSH_ROWS = 1024  # the L2 flush buffer's rows (256 MB in all)


class CudaBackend(Backend):
    name = "cuda"
    description = "NVIDIA GPU through torch.cuda; CUDA events around each sample"
    priority = 10
    timer_name = "cuda_event"
    activity_api = "cupti"
    visible_devices_env = "CUDA_VISIBLE_DEVICES"
    ir_kinds = ("ttir", "ttgir", "llir", "ptx", "cubin")
    triton_target = "cuda"
    smi_command = "nvidia-smi"

    def __init__(self, device_index: int = 0):
        super().__init__(device_index)
        self._cache = None
        # Looked up now, before any op under test runs: see flush_l2.
        self._read_kernel = native_kernel("aten::sum.IntList_out", "CUDA")

    @classmethod
    def is_available(cls) -> bool:
        try:
            import torch

            return torch.cuda.is_available() and torch.version.hip is None
        except Exception:
            return False

    @classmethod
    def unavailable_reason(cls) -> str:
        return "backend 'cuda' is not available: torch sees no CUDA GPU on this machine"

    def setup(self) -> None:
        import torch

        if self.index >= torch.cuda.device_count():
            from ..errors import UsageError

            raise UsageError(
                f"--device {self.index}: only {torch.cuda.device_count()} CUDA device(s) visible"
            )
        torch.cuda.set_device(self.index)

    @property
    def device(self) -> str:
        return f"cuda:{self.index}"

    @property
    def torch_device_module(self):
        import torch

        return torch.cuda

    def synchronize(self) -> None:
        import torch

        torch.cuda.synchronize(self.index)

    def event(self):
        import torch

        return torch.cuda.Event(enable_timing=True)

    def new_stream(self):
        import torch

        return torch.cuda.Stream(device=self.index)

    def stream_context(self, stream):
        import torch

        return torch.cuda.stream(stream)

    def current_stream(self):
        import torch

        return torch.cuda.current_stream(self.index)

    def new_graph(self):
        import torch

        return torch.cuda.CUDAGraph()

    def graph_capture(self, graph, stream=None, pool=None):
        import torch

        return torch.cuda.graph(graph, pool=pool, stream=stream)

    def graph_pool_handle(self):
        import torch

        return torch.cuda.graph_pool_handle()

    def discard_graph_pool(self, pool, graph=None) -> None:
        import torch

        if graph is not None:
            try:
                graph.pool()
                return  # the capture ended: the graph releases its pool when destroyed
            except RuntimeError:
                pass
        # CUDAGraph::capture_end raises on an invalidated capture *before* it tells the caching
        # allocator the capture is over; the stale entry then fails every later empty_cache()
        # (and so every later capture) with "captures_underway.empty() INTERNAL ASSERT FAILED".
        end = getattr(torch._C, "_cuda_endAllocateToPool", None) or getattr(
            torch._C, "_cuda_endAllocateCurrentStreamToPool", None)
        if end is None:
            return
        try:
            end(self.index, pool)
        except RuntimeError:
            return  # not allocating to it: the capture never began, nothing to undo
        release = getattr(torch._C, "_cuda_releasePool", None)
        if release is not None:
            release(self.index, pool)

    def flush_l2(self) -> None:
        import torch

        if self._cache is None:
            # 256 MB: several times the H100/H200 L2 (50-60 MB), as triton.testing does; float32
            # rows summed into float32 row sums, so torch's reduction reads the buffer in place
            # (an int32 buffer summed into int64 was first copied to int64: 512 MB more, written).
            self._cache = torch.ones(FLUSH_ROWS, 256 * 1024 * 1024 // 4 // FLUSH_ROWS, dtype=torch.float32,
                                     device=self.device)
            self._sink = torch.empty(FLUSH_ROWS, dtype=torch.float32, device=self.device)
            self._keys = torch._C.DispatchKeySet(torch._C.DispatchKey.CUDA)
        # Read the buffer rather than write it (triton.testing zeroes it): afterwards L2 holds only
        # clean lines, which the timed kernel evicts for free, as after Nsight Compute's cache
        # invalidation. Dirty lines left by a write cost the timed kernel their write-back.
        # torch's own kernel, looked up when the backend started and called directly: a library
        # that registers aten kernels of its own while a point is timed (FlagGems' use_gems()
        # replaces sum, fill_ and copy_ among hundreds of ops) must not change what the flush runs.
        if self._read_kernel is not None:
            self._read_kernel.call_boxed(self._keys, self._cache, [1], False, dtype=None, out=self._sink)
        else:
            torch.sum(self._cache, dim=1, out=self._sink)

    def is_oom(self, exc: BaseException) -> bool:
        import torch

        return isinstance(exc, torch.cuda.OutOfMemoryError) or "out of memory" in str(exc).lower()

    def free_memory(self) -> None:
        import torch

        torch.cuda.empty_cache()

    def device_name(self) -> str:
        import torch

        return torch.cuda.get_device_name(self.index)

    def _smi_index(self) -> str:
        # nvidia-smi numbers physical GPUs; map through CUDA_VISIBLE_DEVICES when it is a list.
        vis = os.environ.get("CUDA_VISIBLE_DEVICES", "")
        ids = [v.strip() for v in vis.split(",") if v.strip()]
        if ids and self.index < len(ids):
            return ids[self.index]
        return str(self.index)

    def fingerprint(self) -> dict:
        import torch

        info = super().fingerprint()
        info.update(cuda_runtime=torch.version.cuda, **self.device_properties())
        info.update({k: v for k, v in self.device_state().items() if k in ("driver_version", "uuid", "pci.bus_id")})
        return info

    def device_state(self) -> dict:
        out = run_vendor_cli(self.smi_command, ["-i", self._smi_index(), f"--query-gpu={_SMI_GPU_FIELDS}", "--format=csv,noheader,nounits"])
        state = {}
        if out:
            values = [v.strip() for v in out.strip().splitlines()[0].split(",")]
            state = dict(zip(_SMI_GPU_FIELDS.split(","), values))
        apps = run_vendor_cli(self.smi_command, ["-i", self._smi_index(), "--query-compute-apps=pid,process_name,used_memory", "--format=csv,noheader"])
        if apps is not None:
            own = os.getpid()
            others = []
            for line in apps.strip().splitlines():
                parts = [p.strip() for p in line.split(",")]
                if parts and parts[0].isdigit() and int(parts[0]) != own:
                    others.append(", ".join(parts))
            state["other_processes"] = others
        return state

    def busy_warnings(self) -> list:
        state = self.device_state()
        warnings = []
        if state.get("other_processes"):
            warnings.append(
                f"another process is using GPU {self._smi_index()}: " + "; ".join(state["other_processes"])
            )
        reasons = state.get("clocks_throttle_reasons.active", "")
        # 0x0 = none, 0x1 = GPU idle; anything else (power cap, thermal ...) distorts timings.
        if reasons and reasons not in ("0x0000000000000000", "0x0000000000000001", "[N/A]", "N/A"):
            warnings.append(f"GPU clocks are throttled (reasons {reasons})")
        return warnings

    # ---------------------------------------------------------------- clocks while sampling
    def clock_sampler(self):
        """NVML (``nvidia-ml-py``) where it is installed and answers, else ``nvidia-smi``; None
        when neither can read this device."""
        return self._nvml_sampler() or self._smi_sampler()

    def _nvml_sampler(self):
        try:
            import pynvml

            pynvml.nvmlInit()
        except Exception:
            return None
        try:
            handle = self._nvml_handle(pynvml)
            reasons = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
                pynvml.nvmlDeviceGetCurrentClocksThrottleReasons

            def read():
                return pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM), reasons(handle)

            read()  # fails here, not in every point, when the device cannot be read
        except Exception:
            try:
                pynvml.nvmlShutdown()
            except Exception:
                pass
            return None
        return ClockSampler(read, NVML_INTERVAL_S, "nvml", close=pynvml.nvmlShutdown)

    def _nvml_handle(self, pynvml):
        # NVML numbers GPUs in PCI order, CUDA (by default) fastest first: match by UUID.
        try:
            import torch

            uuid = str(torch.cuda.get_device_properties(self.index).uuid)
            return pynvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")
        except Exception:
            pass
        index = self._smi_index()
        if index.startswith(("GPU-", "MIG-")):
            return pynvml.nvmlDeviceGetHandleByUUID(index)
        return pynvml.nvmlDeviceGetHandleByIndex(int(index))

    def _smi_sampler(self):
        args = ["-i", self._smi_index(), "--query-gpu=clocks.sm,clocks_throttle_reasons.active",
                "--format=csv,noheader,nounits"]

        def read():
            out = run_vendor_cli(self.smi_command, args, timeout=5)
            if not out:
                return None, 0
            mhz, _, mask = out.strip().splitlines()[0].partition(",")
            mask = mask.strip()
            return float(mhz), int(mask, 16) if mask.startswith("0x") else 0

        try:
            if read()[0] is None:
                return None
        except ValueError:  # [N/A] or an unexpected format
            return None
        return ClockSampler(read, SMI_INTERVAL_S, "nvidia-smi")


def native_kernel(op: str, dispatch_key: str):
    """The kernel registered for ``op`` at ``dispatch_key`` now, callable later with
    ``call_boxed(keyset, *args)`` even after another library registers its own kernel for the same
    op and key (torch.library.get_kernel). None where this torch cannot hand kernels out."""
    try:
        import torch

        return torch.library.get_kernel(op, dispatch_key)
    except Exception:
        return None
