"""A minimal Triton driver for a GPU target on a machine without that GPU.

Activated with ``triton.runtime.driver.set_active(FakeGpuDriver(target))``, it lets Triton's real
JIT path run on CPU tensors: binding and specialization, the autotuner, ``triton.compile`` down to
the target's binary (ptxas ships in the wheel), loading, and launch hooks. Nothing executes: a
launch calls the launch hooks and returns, so outputs are never written.
"""
from __future__ import annotations

import functools
import itertools
import re
import subprocess
from typing import Optional

#: ``cuda:90`` style targets: backend -> warp size.
WARP_SIZE = {"cuda": 32, "hip": 64}
#: device limits the loader checks (H100/H200-like, generous enough for every built-in config).
MAX_SHARED_MEM = 232448
MAX_THREADS = 1024


def parse_target(text: str):
    """``cuda:90`` / ``hip:gfx942`` -> ``triton.backends.compiler.GPUTarget``.

    Refuses (``ValueError``, naming ``--target``) what can be told without compiling, so that a
    typo is one line before anything is written, not one compiler error per point after: a cuda
    arch must be one the ptxas of Triton's wheel generates code for, a hip arch a ``gfx`` name of
    an AMD family Triton's backend supports (9, 10, 11, 12). What only compiling tells (a ``gfx``
    name LLVM has no processor for) :func:`zlf_ir_dump.preflight.check_target` asks next.
    """
    from triton.backends.compiler import GPUTarget

    backend, sep, arch = text.partition(":")
    if not sep or not arch or backend not in WARP_SIZE:
        raise ValueError(f"--target {text!r}: expected BACKEND:ARCH with BACKEND one of {', '.join(WARP_SIZE)} (e.g. cuda:90)")
    if backend == "cuda":
        known = cuda_archs()
        if not (arch.isascii() and arch.isdecimal()) or len(arch) > 4:
            raise ValueError(f"--target {text!r}: a cuda arch is a compute capability such as 80, 90, 100")
        if int(arch) not in known:
            raise ValueError(f"--target {text!r}: ptxas compiles for cuda:{', cuda:'.join(map(str, sorted(known)))}")
        return GPUTarget("cuda", int(arch), WARP_SIZE[backend])
    if not HIP_ARCH.fullmatch(arch):
        raise ValueError(f"--target {text!r}: a hip arch is a gfx name of an AMD family 9 to 12 (gfx90a, gfx942, gfx1100)")
    return GPUTarget(backend, arch, WARP_SIZE[backend])


#: ``gfx`` + major (9..12) + minor + stepping (hex), as Triton's AMD backend splits them.
HIP_ARCH = re.compile(r"gfx(9|1[012])[0-9][0-9a-f]")
#: compute capabilities Triton's own backend builds for when its ptxas cannot be asked.
CUDA_ARCHS = frozenset({75, 80, 86, 87, 89, 90, 100, 101, 103, 120, 121})


@functools.lru_cache(maxsize=None)
def cuda_archs() -> frozenset:
    """The compute capabilities (``sm_N``) the ptxas shipped with Triton generates code for, read
    from its ``--help``; :data:`CUDA_ARCHS` when it cannot be run."""
    try:
        from triton import knobs

        done = subprocess.run([knobs.nvidia.ptxas.path, "--help"], capture_output=True, text=True, timeout=60)
    except (OSError, RuntimeError, subprocess.SubprocessError):
        return CUDA_ARCHS
    found = frozenset(int(n) for n in re.findall(r"'sm_([0-9]+)'", done.stdout))
    return found or CUDA_ARCHS


def constant_bench(kernel_call, quantiles=None, **_ignored):
    """Autotuner benchmarker without a device: runs the config once (so it is compiled and its
    launch is seen) and reports the same time for every config, so the first config wins --
    deterministically, on every side."""
    kernel_call()
    return [1.0, 1.0, 1.0] if quantiles else 1.0


class _Utils:
    def __init__(self):
        self._handles = itertools.count(0x1000)

    def get_device_properties(self, device):
        return {"max_shared_mem": MAX_SHARED_MEM, "multiprocessor_count": 132, "max_num_regs": 65536,
                "warpSize": 32, "sm_clock_rate": 1980000, "mem_clock_rate": 2619000, "mem_bus_width": 5120}

    def unload_module(self, module):
        pass  # a fake handle owns nothing

    def load_binary(self, name, kernel, shared, device):
        # Distinct fake handles so launch hooks can tell kernels apart (function -> hash).
        return next(self._handles), next(self._handles), 0, 0, MAX_THREADS


class _NoOpLauncher:
    """Stands for the compiled launcher: calls the launch hooks like the real one, runs nothing."""

    def __init__(self, src, metadata):
        self.name = getattr(metadata, "name", "?")

    def __call__(self, gridX, gridY, gridZ, stream, function, packed_metadata, launch_metadata,
                 launch_enter_hook, launch_exit_hook, *args):
        if launch_enter_hook is not None and launch_metadata is not None:
            launch_enter_hook(launch_metadata)
        if launch_exit_hook is not None and launch_metadata is not None:
            launch_exit_hook(launch_metadata)


def make_driver(target):
    """A ``DriverBase`` instance reporting ``target`` as the current device (index 0, stream 0).

    The class is built here so that importing this module does not import Triton.
    """
    from triton.backends.driver import DriverBase

    class FakeGpuDriver(DriverBase):
        @classmethod
        def is_active(cls):
            return False  # never picked by Triton's own driver discovery

        def __init__(self):
            super().__init__()
            self.target = target
            self.utils = _Utils()
            self.launcher_cls = _NoOpLauncher

        def map_python_to_cpp_type(self, ty: str) -> str:
            return "void*" if ty.startswith("*") else {"i1": "bool", "i32": "int32_t", "i64": "int64_t",
                                                        "fp32": "float", "fp64": "double"}.get(ty, "int32_t")

        def get_current_target(self):
            return self.target

        def get_active_torch_device(self):
            import torch

            return torch.device("cpu")

        def get_current_device(self):
            return 0

        def set_current_device(self, device):
            pass

        def get_current_stream(self, device=None):
            return 0

        def get_device_capability(self, device=0):
            arch = self.target.arch
            return (arch // 10, arch % 10) if isinstance(arch, int) else (0, 0)

        def get_benchmarker(self):
            return constant_bench

        def get_empty_cache_for_benchmark(self):
            import torch

            return torch.empty(1, dtype=torch.int32)

        def clear_cache(self, cache):
            pass

    return FakeGpuDriver()


def activate(target_text: str = "cuda:90", target: Optional[object] = None):
    """Make a fake driver for ``target_text`` Triton's active driver; returns it."""
    from triton.runtime import driver

    fake = make_driver(target if target is not None else parse_target(target_text))
    driver.set_active(fake)
    return fake


def deactivate(fake, previous) -> None:
    """Make ``previous`` Triton's active driver again (``None``: Triton picks its own, lazily) and
    forget what was made for ``fake``'s target, so that a later command in this process starts
    clean: each JIT function's compiled kernels and binder for the target (a real launch would get
    a fake handle, a real compile the fake target) and every autotuner's choice (the first config,
    never timed)."""
    import gc

    from triton.runtime import driver, jit
    from triton.runtime.autotuner import Autotuner

    touched = False
    for fn in _jit_functions(jit, gc):
        caches = getattr(fn, "device_caches", None) or {}
        for device, entry in list(caches.items()):
            try:  # (kernels, keys, target, backend, binder) in Triton 3.9; other versions: left be
                kernels, target = entry[0], entry[2]
            except (TypeError, IndexError, KeyError):
                continue
            if target is not fake.target or not isinstance(kernels, dict):
                continue
            for kernel in kernels.values():
                if getattr(kernel, "module", None) is not None:
                    kernel.module = None  # its handle came from the fake loader: nothing to unload
            del caches[device]
            touched = True
    if touched:
        for obj in _instances(gc, Autotuner):
            obj.cache.clear()
    driver._active = previous


def _jit_functions(jit, gc) -> list:
    """Every ``JITFunction`` of the process: Triton's registry where it keeps one (3.9 does), else a
    walk of the collector's objects (3.6 and earlier keep none)."""
    registry = getattr(jit, "_triton_jit_function_registry", None)
    if isinstance(registry, dict):
        return list(registry.values())
    return _instances(gc, getattr(jit, "JITFunction", None))


def _instances(gc, kind) -> list:
    """The collector's objects whose type is ``kind`` or a subclass of it. By ``type()``, never
    ``isinstance()``: that reads ``__class__``, which a dead ``weakref.proxy`` elsewhere in the
    process answers with an exception."""
    if kind is None:
        return []
    return [obj for obj in gc.get_objects() if issubclass(type(obj), kind)]
