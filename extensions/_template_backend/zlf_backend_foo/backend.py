"""The ``foo`` backend: a device backend skeleton whose "device" is the host.

Each member keeps the shape a real device backend has (events, streams, graphs, a vendor CLI)
and says in one line what a real platform calls instead, with ``torch.foo`` standing for your
PyTorch device module. Selected only by name (``--backend foo``): its priority is below cpu.
"""
from __future__ import annotations

import contextlib
import os
import time

from zlf.backends.base import Backend, run_vendor_cli


class FooEvent:
    """Stand-in for ``torch.foo.Event(enable_timing=True)``: record(), elapsed_time(end) in ms."""

    def __init__(self, backend: "FooBackend"):
        self._backend, self._t = backend, None

    def record(self, stream=None) -> None:
        self._backend.synchronize()  # a device event is ordered on its stream; a host stamp must wait
        self._t = time.perf_counter()

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, end: "FooEvent") -> float:
        return (end._t - self._t) * 1e3


class FooGraph:
    """Stand-in for ``torch.foo.FooGraph()``: replays what was issued while capturing."""

    def __init__(self):
        self.captured = []

    def replay(self) -> None:
        for fn in self.captured:
            fn()


class FooBackend(Backend):
    name = "foo"
    description = "example backend (template): host CPU under the Triton interpreter, host-clock events"
    priority = -1  # never auto-detected over cpu; a real device backend uses a value above cuda's 10
    timer_name = "foo_event"
    host_timing = True  # a real device backend: False (samples are device time)
    visible_devices_env = "FOO_VISIBLE_DEVICES"
    ir_kinds = ()  # the interpreter compiles nothing; e.g. ("ttir", "ttgir", "llir", "foobin")
    triton_target = "foo"  # the string your Triton build reports as its target backend
    warp_size = 32
    smi_command = "foo-smi"  # your vendor's CLI; absent here, so device_state() is {}
    warmup_ms = 5.0
    rep_ms = 50.0
    flush_l2_default = False

    def __init__(self, device_index: int = 0):
        super().__init__(device_index)
        self._stream = "default"

    @classmethod
    def is_available(cls) -> bool:
        return True  # real: importlib.util.find_spec("torch_foo") and torch.foo.is_available(); never raise

    @classmethod
    def unavailable_reason(cls) -> str:
        return "backend 'foo' is not available: torch_foo is not installed"  # real: say which check failed

    def setup(self) -> None:
        from zlf.backends.cpu import enable_interpreter

        enable_interpreter()  # real: check self.index < torch.foo.device_count(); torch.foo.set_device(self.index)

    @property
    def device(self) -> str:
        return "cpu"  # real: f"foo:{self.index}"

    @property
    def torch_device_module(self):
        return None  # real: torch.foo

    def device_name(self) -> str:
        return "Foo host stand-in"  # real: torch.foo.get_device_name(self.index)

    def synchronize(self) -> None:
        pass  # real: torch.foo.synchronize(self.index)

    def event(self):
        return FooEvent(self)  # real: torch.foo.Event(enable_timing=True)

    def flush_l2(self) -> None:
        pass  # real: zero a buffer several times the L2 size on self.device

    def new_stream(self):
        return f"stream-{id(object())}"  # real: torch.foo.Stream(device=self.index)

    @contextlib.contextmanager
    def stream_context(self, stream):
        previous, self._stream = self._stream, stream  # real: return torch.foo.stream(stream)
        try:
            yield stream
        finally:
            self._stream = previous

    def current_stream(self):
        return self._stream  # real: torch.foo.current_stream(self.index)

    def new_graph(self):
        return FooGraph()  # real: torch.foo.FooGraph()

    @contextlib.contextmanager
    def graph_capture(self, graph, stream=None, pool=None):
        # real: return torch.foo.graph(graph, pool=pool, stream=stream). The host cannot capture
        # kernels, so the stand-in captures nothing: callers must not rely on it for timing.
        with self.stream_context(stream or self.new_stream()):
            yield graph

    def graph_pool_handle(self):
        return None  # real: torch.foo.graph_pool_handle(), if failed captures can be cleaned up

    def discard_graph_pool(self, pool) -> None:
        pass  # real: end the capture's allocation into ``pool`` and release it (see the cuda backend)

    def free_memory(self) -> None:
        pass  # real: torch.foo.empty_cache()

    def device_state(self) -> dict:
        out = run_vendor_cli(self.smi_command, ["--query"])
        return {"raw": out.strip()} if out else {}  # real: parse clocks, throttling, other processes

    def busy_warnings(self) -> list:
        return []  # real: other processes on the device, throttled clocks

    def fingerprint(self) -> dict:
        info = super().fingerprint()
        info["foo_visible_devices"] = os.environ.get(self.visible_devices_env)  # real: driver, runtime, firmware
        return info
