"""The backend contract: everything zlf needs to know about one device platform.

A backend is a class registered through the ``register_backends`` hook. Core ships ``cpu`` and
``cuda``; vendors ship theirs as extensions. Timers, IR collectors and the autotune replay talk
to the device only through this contract, never through ``torch.cuda`` directly.
"""
from __future__ import annotations

import contextlib
import os
import platform
import time
from typing import Callable, ClassVar, Optional


class HostEvent:
    """An event stamped with the host clock; used where the device has no timing events.

    ``synchronize`` is a callable run before stamping so that asynchronous work is included.
    """

    __slots__ = ("_t", "_sync")

    def __init__(self, synchronize: Callable[[], None] = lambda: None):
        self._t: Optional[float] = None
        self._sync = synchronize

    def record(self, stream=None) -> None:
        self._sync()
        self._t = time.perf_counter()

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, end: "HostEvent") -> float:
        """Milliseconds from this event to ``end`` (the torch.cuda.Event convention)."""
        return (end._t - self._t) * 1e3


class Backend:
    """Base class of every backend. Subclasses override what their platform does differently.

    Class attributes describe the backend without importing its stack; instances are made once
    per run for one device index.
    """

    #: name used by ``--backend NAME`` and recorded in every run's meta.json.
    name: ClassVar[str] = ""
    #: one line for ``zlf plugins`` and error messages.
    description: ClassVar[str] = ""
    #: auto-detection order: the available backend with the highest priority wins.
    priority: ClassVar[int] = 0
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
    #: whether the direct timer flushes L2 before every sample unless told otherwise.
    flush_l2_default: ClassVar[bool] = True

    # ---------------------------------------------------------------- detection
    @classmethod
    def is_available(cls) -> bool:
        """Whether this platform's device can be used in this process (must not raise)."""
        return False

    @classmethod
    def unavailable_reason(cls) -> str:
        """One line saying why :meth:`is_available` is False (shown with ``--backend NAME``)."""
        return f"backend {cls.name!r} is not available on this machine"

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

    def graph_capture(self, graph, stream=None):
        """Context manager that captures work issued inside it into ``graph``."""
        raise NotImplementedError(f"backend {self.name!r} has no graph capture")

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

    def device_state(self) -> dict:
        """Clocks, temperature, throttle reasons and other processes on the device, if known."""
        return {}

    def busy_warnings(self) -> list:
        """Lines to warn about (another process on the device, throttling ...)."""
        return []

    # ---------------------------------------------------------------- compiler hooks
    def install_compiler_hooks(self, on_compile, on_launch):
        """Feed ``on_compile(CompileEvent)`` / ``on_launch(LaunchEvent)`` from the platform's
        Triton hooks. Either callback may be None.

        :return: a :class:`zlf.compiler_hooks.CompilerHooks` (``remove()``, ``launch_window(point_id)``).
        """
        from .. import compiler_hooks

        return compiler_hooks.install(on_compile, on_launch)
