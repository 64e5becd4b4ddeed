"""The backend contract: everything zlf needs to know about one device platform.

A backend is a class registered through the ``register_backends`` hook. Core ships ``cpu`` and
``cuda``; vendors ship theirs as extensions. Timers, IR collectors and the autotune replay talk
to the device only through this contract, never through ``torch.cuda`` directly.
"""
from __future__ import annotations

import contextlib
import os
import platform
import re
import shutil
import statistics
import subprocess
import threading
import time
from typing import Callable, ClassVar, NamedTuple, Optional


class HostEvent:
    """An event stamped with the host clock; used where the device has no timing events.

    ``synchronize`` is a callable run before stamping so that asynchronous work is included;
    ``clock`` reads the host clock in seconds (``time.perf_counter``; a test passes a fake one,
    ``zlf.testing.FakeClock``, so that what is timed cannot depend on the machine's load).
    """

    __slots__ = ("_t", "_sync", "_clock")

    def __init__(self, synchronize: Callable[[], None] = lambda: None,
                 clock: Callable[[], float] = time.perf_counter):
        self._t: Optional[float] = None
        self._sync = synchronize
        self._clock = clock

    def record(self, stream=None) -> None:
        self._sync()
        self._t = self._clock()

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, end: "HostEvent") -> float:
        """Milliseconds from this event to ``end`` (the torch.cuda.Event convention)."""
        return (end._t - self._t) * 1e3


def run_vendor_cli(exe: str, args=(), timeout: float = 10) -> Optional[str]:
    """stdout of a vendor tool (``nvidia-smi``, ``mthreads-gmi``, ``mx-smi``), or None when it is
    not on PATH, fails or hangs: a missing tool costs information, never the run."""
    path = shutil.which(exe)
    if not path:
        return None
    try:
        out = subprocess.run([path, *args], capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


#: throttle-reason bits as NVML numbers them (``nvmlClocksEventReason*``); other vendors map theirs
#: onto the same names where they can.
THROTTLE_REASONS = {
    0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
    0x10: "sync_boost", 0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown", 0x100: "display_clock_setting",
}
#: reasons that do not lower the clock of a busy device (the same rule as ``busy_warnings``).
NOT_THROTTLED = ("gpu_idle",)


def throttle_names(mask: int) -> list:
    """``0x5`` -> ``["gpu_idle", "sw_power_cap"]``; an unknown bit reads as its hex value."""
    names = []
    bit = 1
    while mask and bit <= mask:
        if mask & bit:
            names.append(THROTTLE_REASONS.get(bit, hex(bit)))
        bit <<= 1
    return names


def is_throttled(clock: Optional[dict]) -> bool:
    """Whether a record's ``clock`` saw a reason that lowers the clock of a busy device."""
    return bool(clock) and any(r not in NOT_THROTTLED for r in clock.get("throttle_reasons") or ())


class ClockWindow:
    """The clock readings of one point, taken by a background thread while the point is timed.

    Reading is the sampler's ``read()`` (``(sm MHz, throttle mask)``); one reading is taken when
    the window opens and one when it closes, so a point shorter than the interval still has two.
    A failing read costs the readings, never the point.
    """

    def __init__(self, read, interval_s: float, source: str):
        self._read, self._interval, self.source = read, interval_s, source
        self.readings: list = []
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self.error: Optional[str] = None

    def _take(self) -> None:
        try:
            mhz, mask = self._read()
        except Exception as exc:  # a missing reading is information lost, not a failed point
            self.error = self.error or f"{type(exc).__name__}: {exc}"
            return
        if mhz is not None:
            self.readings.append((float(mhz), int(mask or 0)))

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            self._take()

    def __enter__(self) -> "ClockWindow":
        self._take()
        self._thread = threading.Thread(target=self._loop, name="zlf-clock", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._take()

    def summary(self) -> Optional[dict]:
        """``PointRecord.clock``: min / median / max SM clock (MHz), the throttle reasons seen
        (names, and their OR as hex), how many readings and of those how many throttled."""
        if not self.readings:
            return None
        mhz = [r[0] for r in self.readings]
        mask = 0
        for _, m in self.readings:
            mask |= m
        throttled = sum(1 for _, m in self.readings if any(n not in NOT_THROTTLED for n in throttle_names(m)))
        return {"sm_mhz_min": min(mhz), "sm_mhz_median": statistics.median(mhz), "sm_mhz_max": max(mhz),
                "throttle_reasons": throttle_names(mask), "throttle_mask": hex(mask),
                "readings": len(mhz), "throttled_readings": throttled, "source": self.source}


class ClockSampler:
    """Made once per run by :meth:`Backend.clock_sampler`; :meth:`window` per point.

    :param read: ``() -> (sm_mhz, throttle_mask)`` for this backend's device (cheap: it runs every
        ``interval_s`` in a background thread while the point is timed).
    """

    def __init__(self, read, interval_s: float = 0.015, source: str = "", close=None):
        self.read, self.interval_s, self.source = read, interval_s, source
        self._close = close

    def window(self) -> ClockWindow:
        return ClockWindow(self.read, self.interval_s, self.source)

    def close(self) -> None:
        if self._close is not None:
            try:
                self._close()
            except Exception:
                pass


class ContractItem(NamedTuple):
    """One member of the backend contract (docs/backends.md has a section per item).

    ``required``: ``every`` backend must define it itself; ``device`` backends (``host_timing``
    False) must; ``optional`` members have a base default that is right for most platforms.
    """

    name: str
    kind: str  # attribute | classmethod | property | method
    required: str  # every | device | optional
    summary: str


#: The contract, in the order of docs/backends.md. Not ``abc`` abstract methods on purpose: the
#: host defaults below are exactly right for ``cpu``, and a vendor backend that forgets a member
#: should fail the contract suite (tests/test_backend_contract.py), not a user's run at import.
CONTRACT = (
    ContractItem("name", "attribute", "every", "--backend NAME, meta.json"),
    ContractItem("description", "attribute", "every", "one line for zlf plugins and errors"),
    ContractItem("priority", "attribute", "every", "auto-detection: highest available wins"),
    ContractItem("is_available", "classmethod", "every", "detection; must not raise"),
    ContractItem("unavailable_reason", "classmethod", "device", "one line for --backend NAME on the wrong machine"),
    ContractItem("available_when_forced", "classmethod", "optional", "whether --backend NAME may select it undetected"),
    ContractItem("supersedes", "attribute", "optional", "backends this one replaces on a machine where it is available"),
    ContractItem("setup", "method", "device", "select the device before any op module is imported"),
    ContractItem("device", "property", "every", "torch device string"),
    ContractItem("torch_device_module", "property", "device", "torch.cuda-like module or None"),
    ContractItem("device_name", "method", "every", "human device name"),
    ContractItem("synchronize", "method", "device", "wait for queued work"),
    ContractItem("event", "method", "device", "timing event: record(), elapsed_time(end) in ms"),
    ContractItem("timer_name", "attribute", "device", "name of the default timer's samples"),
    ContractItem("host_timing", "attribute", "optional", "samples are host wall-clock"),
    ContractItem("warmup_ms", "attribute", "optional", "default timer warm-up budget"),
    ContractItem("rep_ms", "attribute", "optional", "default timer measurement budget"),
    ContractItem("point_time_limit_s", "attribute", "optional", "default --time-limit of one point"),
    ContractItem("flush_l2_default", "attribute", "optional", "flush L2 before each sample by default"),
    ContractItem("flush_l2", "method", "device", "evict the last-level cache"),
    ContractItem("new_stream", "method", "device", "a new stream"),
    ContractItem("stream_context", "method", "device", "make a stream current"),
    ContractItem("current_stream", "method", "device", "the current stream"),
    ContractItem("new_graph", "method", "device", "graph object (CUDAGraph, MUSAGraph ...) or None"),
    ContractItem("graph_capture", "method", "device", "context manager capturing into a graph"),
    ContractItem("graph_pool_handle", "method", "optional", "memory pool for one capture, or None"),
    ContractItem("discard_graph_pool", "method", "optional", "undo a failed capture's allocator state"),
    ContractItem("is_oom", "method", "optional", "exception means out of device memory"),
    ContractItem("free_memory", "method", "device", "release cached device memory"),
    ContractItem("smi_command", "attribute", "optional", "vendor CLI (nvidia-smi, mthreads-gmi, mx-smi)"),
    ContractItem("device_state", "method", "device", "clocks, temperature, throttling, other processes"),
    ContractItem("busy_warnings", "method", "device", "lines warning that timings may be distorted"),
    ContractItem("clock_sampler", "method", "optional", "SM clock and throttle reasons while a point samples, or None"),
    ContractItem("visible_devices_env", "attribute", "optional", "CUDA_VISIBLE_DEVICES-like variable"),
    ContractItem("fingerprint", "method", "device", "versions and identity for meta.json"),
    ContractItem("device_properties", "method", "optional", "capability, multiprocessors, memory for the fingerprint"),
    ContractItem("ir_kinds", "attribute", "optional", "IR files the platform's Triton produces"),
    ContractItem("triton_target", "attribute", "device", "Triton target backend string"),
    ContractItem("warp_size", "attribute", "optional", "threads per warp of the Triton target"),
    ContractItem("triton_hook_api", "method", "optional", "which Triton hook API this process has"),
    ContractItem("install_compiler_hooks", "method", "optional", "feed on_compile / on_launch"),
    ContractItem("activity_api", "attribute", "optional", "the platform's kernel-activity tracing (cupti) or ''"),
    ContractItem("kernel_timer", "method", "optional", "the backend's own kernel-activity timer, or None"),
)

_NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")


class Backend:
    """Base class of every backend. Subclasses override what their platform does differently.

    Class attributes describe the backend without importing its stack; instances are made once
    per run for one device index. :data:`CONTRACT` lists every member and who must define it;
    :meth:`contract_problems` checks a subclass against it.
    """

    #: name used by ``--backend NAME`` and recorded in every run's meta.json.
    name: ClassVar[str] = ""
    #: one line for ``zlf plugins`` and error messages.
    description: ClassVar[str] = ""
    #: auto-detection order: the available backend with the highest priority wins.
    priority: ClassVar[int] = 0
    #: names of backends that stand aside where this one is available: a platform that also
    #: answers through another's API (MetaX behind ``torch.cuda``) claims the machine.
    supersedes: ClassVar[tuple] = ()
    #: name of the default (direct) timer's samples on this platform.
    timer_name: ClassVar[str] = "event"
    #: True when samples are host wall-clock rather than device kernel time.
    host_timing: ClassVar[bool] = False
    #: variable that pins a process to devices (``CUDA_VISIBLE_DEVICES`` ...), if any.
    visible_devices_env: ClassVar[Optional[str]] = None
    #: IR kinds the platform's compiler produces and ``ir_dump`` may collect.
    ir_kinds: ClassVar[tuple] = ("ttir", "ttgir", "llir")
    #: Triton target backend string (``cuda``, ``hip``, ``musa``, ``maca`` ...).
    triton_target: ClassVar[str] = ""
    #: default time budgets of the direct timer, in ms (triton.testing.do_bench's defaults).
    warmup_ms: ClassVar[float] = 25.0
    rep_ms: ClassVar[float] = 100.0
    #: default per-point limit of ``zlf run`` (``--time-limit``), in s: generous, it only stops hangs.
    point_time_limit_s: ClassVar[float] = 600.0
    #: whether the direct timer flushes L2 before every sample unless told otherwise.
    flush_l2_default: ClassVar[bool] = True
    #: threads per warp of the Triton target (MetaX MACA: 64).
    warp_size: ClassVar[int] = 32
    #: vendor command-line tool for clocks, throttling and other processes, if any.
    smi_command: ClassVar[Optional[str]] = None
    #: the platform's kernel-activity tracing interface (``cupti`` on NVIDIA), '' when it has none
    #: or zlf knows of none; kernel-timer extensions offer their timer only for the API they speak.
    activity_api: ClassVar[str] = ""

    # ---------------------------------------------------------------- detection
    @classmethod
    def is_available(cls) -> bool:
        """Whether this platform's device can be used in this process (must not raise)."""
        return False

    @classmethod
    def unavailable_reason(cls) -> str:
        """One line saying why :meth:`is_available` is False (shown with ``--backend NAME``)."""
        return f"backend {cls.name!r} is not available on this machine"

    @classmethod
    def available_when_forced(cls) -> bool:
        """Whether ``--backend NAME`` / ``ZLF_BACKEND`` may select this backend although
        :meth:`is_available` is False: for a platform auto-detection cannot always identify
        (a platform behind another's API). Must not raise."""
        return False

    @classmethod
    def contract_problems(cls) -> list:
        """What this class misses of :data:`CONTRACT` (one line each); empty when it complies."""
        problems = []
        if not isinstance(cls.name, str) or not _NAME_RE.match(cls.name):
            problems.append(f"name {cls.name!r} is not a lower-case identifier")
        if not cls.description:
            problems.append("description is empty")
        if not isinstance(cls.priority, int):
            problems.append(f"priority {cls.priority!r} is not an int")
        if not isinstance(cls.ir_kinds, tuple) or not all(isinstance(k, str) for k in cls.ir_kinds):
            problems.append(f"ir_kinds {cls.ir_kinds!r} is not a tuple of str")
        if cls.warp_size not in (16, 32, 64, 128):
            problems.append(f"warp_size {cls.warp_size!r} is not 16, 32, 64 or 128")
        device = not cls.host_timing
        if device and not cls.triton_target:
            problems.append("a device backend needs triton_target")
        for item in CONTRACT:
            if item.required == "every" or (item.required == "device" and device):
                if _defined_by(cls, item.name) is Backend:
                    who = "every backend" if item.required == "every" else "a device backend"
                    problems.append(f"{item.name} ({item.kind}) must be defined by {who}: {item.summary}")
        return problems

    # ---------------------------------------------------------------- lifecycle
    def __init__(self, device_index: int = 0):
        self.index = device_index

    def setup(self) -> None:
        """Prepare the process before any op module is imported (environment, interpreter)."""

    @property
    def device(self) -> str:
        """The torch device string tensors are created on."""
        return "cpu"

    @property
    def torch_device_module(self):
        """``torch.cuda``-like module of the platform (``torch.musa`` ...) or None."""
        return None

    # ---------------------------------------------------------------- execution
    def synchronize(self) -> None:
        """Wait until every queued kernel on the device has finished."""

    def event(self):
        """A timing event with ``record()`` and ``elapsed_time(other) -> ms``."""
        return HostEvent(self.synchronize)

    def new_stream(self):
        """A new stream (None where the platform has no streams)."""
        return None

    def stream_context(self, stream):
        """Context manager that makes ``stream`` current."""
        return contextlib.nullcontext()

    def current_stream(self):
        return None

    def new_graph(self):
        """A graph object for capture/replay, or None where graphs are not supported."""
        return None

    def graph_capture(self, graph, stream=None, pool=None):
        """Context manager that captures work issued inside it into ``graph``.

        ``pool`` (from :meth:`graph_pool_handle`, passed only when that is not None) is the
        memory pool the capture allocates from, so a failed capture can be undone.
        """
        raise NotImplementedError(f"backend {self.name!r} has no graph capture")

    def graph_pool_handle(self):
        """A fresh memory-pool handle for one capture, or None where the platform has none.

        Optional: graph timers use it with :meth:`discard_graph_pool` to clean up after a
        failed capture (host sync, ``.item()`` ...) so that later points can still capture.
        """
        return None

    def discard_graph_pool(self, pool, graph=None) -> None:
        """Undo what a *failed* capture of ``graph`` into ``pool`` left in the device allocator
        (optional). Must do nothing when the capture did end: the graph then owns the pool."""

    def flush_l2(self) -> None:
        """Evict the device's last-level cache (write a buffer larger than it)."""

    def is_oom(self, exc: BaseException) -> bool:
        """Whether ``exc`` means the point did not fit in device memory."""
        return "out of memory" in str(exc).lower()

    def free_memory(self) -> None:
        """Release cached device memory between points."""

    # ---------------------------------------------------------------- environment
    def device_name(self) -> str:
        return platform.processor() or platform.machine()

    def fingerprint(self) -> dict:
        """Versions and identity recorded in meta.json (driver, runtime, torch, triton ...)."""
        import torch

        info = {
            "backend": self.name,
            "device": self.device,
            "device_name": self.device_name(),
            "torch": torch.__version__,
            "host": platform.node(),
            "python": platform.python_version(),
        }
        try:
            import triton

            info["triton"] = triton.__version__
            info["triton_path"] = os.path.dirname(triton.__file__)
        except Exception as exc:  # a broken compiler build is worth recording, not fatal
            info["triton"] = f"unavailable: {exc}"
        return info

    def device_properties(self) -> dict:
        """Capability, multiprocessor count and memory from ``torch_device_module``'s
        ``get_device_properties``, for :meth:`fingerprint`; the reason when they are unavailable."""
        try:
            props = self.torch_device_module.get_device_properties(self.index)
            return {
                "capability": f"{props.major}.{props.minor}",
                "mp_count": getattr(props, "multi_processor_count", None),
                "total_memory_gib": round(props.total_memory / 2**30, 1),
            }
        except Exception as exc:  # properties are informative; their absence is recorded, not fatal
            return {"device_properties": f"unavailable: {exc}"}

    def device_state(self) -> dict:
        """Clocks, temperature, throttle reasons and other processes on the device, if known."""
        return {}

    def busy_warnings(self) -> list:
        """Lines to warn about (another process on the device, throttling ...)."""
        return []

    def kernel_timer(self, options=None):
        """The platform's own kernel-activity timer (a :class:`zlf.timing.KernelTimer`), or None.

        Optional: a vendor backend whose toolkit traces kernels (as CUPTI does) may return a
        timer here; an extension speaking :attr:`activity_api` offers one through the
        ``kernel_timer`` hook instead, and wins over this. Must not raise: a missing tracer
        returns None and the event timer is used.
        """
        return None

    def clock_sampler(self) -> Optional[ClockSampler]:
        """A :class:`ClockSampler` reading this device's SM clock and throttle reasons while each
        point is timed (``PointRecord.clock``), or None where the platform cannot say (cpu)."""
        return None

    # ---------------------------------------------------------------- compiler hooks
    def triton_hook_api(self) -> str:
        """``chain`` (3.5+), ``knob`` (3.4), ``class`` (<=3.3 and the 3.1-based vendor forks)
        or ``none``: detected from the Triton this process imports, never assumed."""
        from ..compiler_hooks import hook_api

        return hook_api()

    def install_compiler_hooks(self, on_compile, on_launch):
        """Feed ``on_compile(CompileEvent)`` / ``on_launch(LaunchEvent)`` from the platform's
        Triton hooks. Either callback may be None.

        :return: a :class:`zlf.compiler_hooks.CompilerHooks` (``remove()``, ``launch_window(point_id)``).
        """
        from .. import compiler_hooks

        return compiler_hooks.install(on_compile, on_launch)


def _defined_by(cls, member: str):
    """The class in ``cls``'s MRO whose body defines ``member`` (None when none does)."""
    for klass in cls.__mro__:
        if member in vars(klass):
            return klass
    return None
