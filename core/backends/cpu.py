"""The ``cpu`` backend: Triton kernels under the interpreter, timed with the host clock.

It exists so that the whole pipeline (ops, correctness, timing, records, compare, replay) runs
on a laptop with no GPU. Its times are host wall-clock of interpreted kernels, never GPU
kernel times, and every record says so through its timer name ``host_wall``.
"""
from __future__ import annotations

import os
import platform
import statistics
import time

from .base import Backend


def cpu_bench(fn, quantiles=None, return_mode="median", **_ignored):
    """A drop-in for Triton's autotuner benchmarker that times with the host clock.

    Returns ``[p50, p20, p80]`` in ms when ``quantiles`` is given (what the autotuner asks for),
    otherwise the median.
    """
    fn()
    samples = []
    budget_end = time.perf_counter() + 0.05
    while len(samples) < 3 or (time.perf_counter() < budget_end and len(samples) < 20):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e3)
    samples.sort()

    def q(p):
        return samples[min(len(samples) - 1, int(p * (len(samples) - 1) + 0.5))]

    if quantiles:
        return [q(p) for p in quantiles]
    return statistics.median(samples)


def enable_interpreter() -> None:
    """Make ``@triton.jit`` return interpreted kernels and let ``@triton.autotune`` tune on CPU.

    Must run before any kernel is decorated: ``TRITON_INTERPRET`` is read at decoration time.
    """
    os.environ["TRITON_INTERPRET"] = "1"
    from triton.runtime import interpreter

    from ..triton_tuner import bench_with

    # The interpreter holds scalars as 1-element arrays and converts them with int(array), which
    # numpy >= 2.4 refuses for ndim > 0 (a loop bound such as range(0, K, BLOCK_K) then fails).
    if not getattr(interpreter, "_zlf_index_fix", False):
        import numpy as np

        original = interpreter._patch_lang_tensor

        def patch_lang_tensor(tensor, scope):
            original(tensor, scope)
            scope.set_attr(tensor, "__index__", lambda self: int(np.asarray(self.handle.data).reshape(-1)[0]))

        interpreter._patch_lang_tensor = patch_lang_tensor
        interpreter._zlf_index_fix = True

    # Triton imported compiled before this (an in-process zlf ir) keeps triton.language's own
    # functions (tl.max, tl.sum, tl.cdiv ...) as JIT functions, which refuse a call from an
    # interpreted kernel: while the interpreter is on, such a call runs them interpreted.
    # (A Triton before 3.4 has no triton.knobs, and no in-process zlf ir: nothing to do there.)
    import triton
    from triton.runtime.jit import JITFunction

    knobs = getattr(triton, "knobs", None)
    if knobs is not None and not getattr(JITFunction, "_zlf_interpreted_call", False):
        compiled_call = JITFunction.__call__

        def call(self, *args, **kwargs):
            if not knobs.runtime.interpret:
                return compiled_call(self, *args, **kwargs)
            interpreted = self.__dict__.get("_zlf_interpreted")
            if interpreted is None:
                interpreted = self._zlf_interpreted = interpreter.InterpretedFunction(self.fn)
            return interpreted(*args, **kwargs)

        JITFunction.__call__ = call
        JITFunction._zlf_interpreted_call = True

    # The tuner asks the (absent) GPU driver for a benchmarker; give it the host clock.
    bench_with(cpu_bench)


class CpuBackend(Backend):
    name = "cpu"
    description = "Triton interpreter on the host CPU; times are host wall-clock, not GPU kernel times"
    priority = 0
    timer_name = "host_wall"
    host_timing = True
    ir_kinds = ()
    warmup_ms = 5.0
    rep_ms = 50.0
    #: interpreted kernels are orders of magnitude slower than on a device.
    point_time_limit_s = 1800.0
    flush_l2_default = False

    @classmethod
    def is_available(cls) -> bool:
        return True

    def setup(self) -> None:
        enable_interpreter()

    @property
    def device(self) -> str:
        return "cpu"

    def device_name(self) -> str:
        name = platform.processor() or platform.machine()
        try:
            with open("/proc/cpuinfo") as f:
                for line in f:
                    if line.startswith("model name"):
                        name = line.split(":", 1)[1].strip()
                        break
        except OSError:
            pass
        return f"{name} (Triton interpreter)"

    def fingerprint(self) -> dict:
        info = super().fingerprint()
        info["cpu_count"] = os.cpu_count()
        info["timing"] = "host wall-clock of interpreted kernels"
        return info

    def install_compiler_hooks(self, on_compile, on_launch):
        from ..compiler_hooks import CompilerHooks

        # The interpreter never compiles or launches: no Triton hook fires there.
        return CompilerHooks(None, None)
