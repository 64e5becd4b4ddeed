"""The backend contract (docs/backends.md): one behaviour suite every backend passes.

cpu and the template's ``foo`` run for real; cuda runs for real on a GPU (``-m gpu``); musa and
maca run against fakes of what their stacks expose -- a ``torch_musa`` module with
``torch.musa``, a MetaX-flavoured ``torch.cuda``, and ``mthreads-gmi`` / ``mx-smi`` executables
on PATH printing vendor-format output -- because no such hardware is here.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
import types
from importlib.machinery import ModuleSpec
from pathlib import Path

import pytest
import torch
from conftest import gpu_available
from zlf.testing import pythonpath

from zlf import UsageError
from zlf.backends.base import CONTRACT, Backend
from zlf.backends.cpu import CpuBackend
from zlf.backends.cuda import CudaBackend
from zlf.session import Session
from zlf.timing import time_direct

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = ROOT / "extensions" / "_template_backend"
OTHER_PID = 424242


# ------------------------------------------------------------------------------ fakes
class FakeStream:
    def __init__(self, device, name="side"):
        self.device, self.name = device, name

    def __repr__(self):
        return f"<FakeStream {self.name} device={self.device}>"


class FakeEvent:
    """torch.cuda.Event semantics on the host clock: record() is ordered after queued work."""

    def __init__(self, module, enable_timing=False):
        self._module, self._timing, self._t = module, enable_timing, None

    def record(self, stream=None):
        self._module.synchronize()
        self._t = time.perf_counter()

    def synchronize(self):
        pass

    def elapsed_time(self, end):
        if not (self._timing and end._timing):
            raise RuntimeError("Both events must be created with argument 'enable_timing=True'.")
        if self._t is None or end._t is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        return (end._t - self._t) * 1e3


class FakeGraph:
    def __init__(self, module):
        self._module, self.captured = module, False

    def capture_begin(self, *args, **kwargs):
        self._module.capturing = True

    def capture_end(self):
        self._module.capturing, self.captured = False, True

    def replay(self):
        if not self.captured:
            raise RuntimeError("replay() called before capture")
        self._module.replays += 1


class FakeDeviceModule(types.ModuleType):
    """What torch_musa puts at ``torch.musa`` (and mcPytorch at ``torch.cuda``), on the host."""

    def __init__(self, kind, graph_class, device_name, count=2, available=True):
        super().__init__(f"torch.{kind}")
        self.kind, self.count, self.available = kind, count, available
        self.device_name_ = device_name
        self.current = 0
        self.sync_calls, self.empty_cache_calls, self.replays = [], 0, 0
        self.capturing, self.pools = False, 0
        self._default = {i: FakeStream(i, "default") for i in range(count)}
        self._stream = dict(self._default)
        module = self
        self.Event = lambda enable_timing=False, **kw: FakeEvent(module, enable_timing)
        self.Stream = lambda device=None, **kw: FakeStream(module.current if device is None else device)
        setattr(self, graph_class, lambda *a, **kw: FakeGraph(module))
        self.OutOfMemoryError = type("OutOfMemoryError", (RuntimeError,), {})

    def is_available(self):
        return self.available

    def device_count(self):
        return self.count if self.available else 0

    def set_device(self, index):
        self.current = index

    def current_device(self):
        return self.current

    def synchronize(self, device=None):
        if self.capturing:
            raise RuntimeError("operation not permitted when stream is capturing")
        self.sync_calls.append(self.current if device is None else device)

    def current_stream(self, device=None):
        return self._stream[self.current if device is None else device]

    @contextlib.contextmanager
    def stream(self, stream):
        previous = self._stream[stream.device]
        self._stream[stream.device] = stream
        try:
            yield
        finally:
            self._stream[stream.device] = previous

    @contextlib.contextmanager
    def graph(self, graph, pool=None, stream=None, capture_error_mode="global"):
        # As torch.cuda.graph: capture on the given stream, or a private side stream.
        self.synchronize()
        with self.stream(stream or FakeStream(self.current, "capture")):
            graph.capture_begin()
            try:
                yield graph
            finally:
                graph.capture_end()

    def graph_pool_handle(self):
        self.pools += 1
        return (0, self.pools)

    def is_current_stream_capturing(self):
        return self.capturing

    def get_device_name(self, index=None):
        return self.device_name_

    def get_device_properties(self, index=None):
        return types.SimpleNamespace(name=self.device_name_, major=2, minor=2, multi_processor_count=128,
                                     total_memory=48 * 2**30)

    def empty_cache(self):
        self.empty_cache_calls += 1


def _fake_cli(bin_dir: Path, name: str, output: str, require_args=None) -> Path:
    """An executable ``name`` printing ``output``; it logs its arguments to ``<name>.args``."""
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / f"{name}.out").write_text(output)
    check = f'[ "$*" = "{require_args}" ] || exit 3\n' if require_args is not None else ""
    script = bin_dir / name
    script.write_text(f'#!/bin/sh\necho "$*" >> "{bin_dir}/{name}.args"\n{check}cat "{bin_dir}/{name}.out"\n')
    script.chmod(0o755)
    return script


def gmi_output(own_pid: int) -> str:
    """``mthreads-gmi -q -i 0`` in the nvidia-smi -q layout the vendor's scripts grep."""
    return textwrap.dedent(f"""\
        ==============================================================
        Timestamp                                 : Sat Nov 29 09:30:00 2026
        Driver Version                            : 2.7.0
        Attached GPUs                             : 2
        GPU 00000000:1B:00.0
            Product Name                          : MTT S4000
            GPU UUID                              : GPU-00000000-fake-musa-0001
            MTBios Version                        : 3.4.3
            Bus Id                                : 00000000:1B:00.0
            Utilization
                Gpu                               : 3%
                Memory                            : 1%
            Temperature
                Gpu                               : 41C
            Power Readings
                Power Draw                        : 62.00 W
            Clocks
                Graphics                          : 1750 MHz
                Memory                            : 1000 MHz
            Processes
                Process ID                        : {own_pid}
                    Process Name                  : python
                    Used Memory                   : 512MiB
                Process ID                        : {OTHER_PID}
                    Process Name                  : other_job
                    Used Memory                   : 20480MiB
        """)


def mxsmi_output(own_pid: int) -> str:
    """``mx-smi`` (2.2 layout): header, two lines per GPU, a process table."""
    return textwrap.dedent(f"""\
        mx-smi  version: 2.2.9

        =================== MetaX System Management Interface Log ===================
        Timestamp                                         : Sat Nov 29 09:30:00 2026

        Attached GPUs                                     : 2
        +---------------------------------------------------------------------------------+
        | MX-SMI 2.2.9                        Kernel Mode Driver Version: 3.1.2           |
        | MACA Version: 3.2.1.10              BIOS Version: 1.27.0.0                      |
        |------------------------------------+---------------------+----------------------+
        | GPU     NAME         Persistence-M | Bus-id              | GPU-Util      sGPU-M |
        | Temp    Pwr:Usage/Cap         Perf | Memory-Usage        | GPU-State            |
        |====================================+=====================+======================|
        | 0       MetaX C500             Off | 0000:0f:00.0        | 5%            Native |
        | 45C     70W / 350W              P0 | 1024/65536 MiB      | Available            |
        +------------------------------------+---------------------+----------------------+
        | 1       MetaX C500             Off | 0000:34:00.0        | 97%           Native |
        | 71C     330W / 350W             P0 | 60000/65536 MiB     | Available            |
        +------------------------------------+---------------------+----------------------+

        +---------------------------------------------------------------------------------+
        | Process:                                                                        |
        |  GPU                    PID         Process Name                 GPU Memory     |
        |                                                                  Usage(MiB)     |
        |=================================================================================|
        |  0                      {own_pid:<12}python                       1024           |
        |  1                      {OTHER_PID:<12}other_job                    59000          |
        +---------------------------------------------------------------------------------+

        End of Log
        """)


@pytest.fixture(autouse=True)
def _isolated(monkeypatch, tmp_path):
    """Every test gets its own PATH entry for fake tools and forgets cached MACA detection."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    for var in ("GEMS_VENDOR", "ZLF_BACKEND", "MUSA_VISIBLE_DEVICES"):
        monkeypatch.delenv(var, raising=False)
    # cpu/foo setup() sets TRITON_INTERPRET; give it back afterwards.
    monkeypatch.setenv("TRITON_INTERPRET", os.environ.get("TRITON_INTERPRET", "0"))
    _forget_maca_detection()
    yield bin_dir
    _forget_maca_detection()


def _forget_maca_detection():
    detect = sys.modules.get("zlf_backend_maca.detect")  # imported by the maca tests only
    if detect is not None:
        detect._signals.cache_clear()


def install_fake_musa(monkeypatch, bin_dir, available=True) -> FakeDeviceModule:
    musa = FakeDeviceModule("musa", "MUSAGraph", "MTT S4000", available=available)
    torch_musa = types.ModuleType("torch_musa")
    torch_musa.__spec__ = ModuleSpec("torch_musa", None)
    torch_musa.__version__ = "1.3.0+fake"
    monkeypatch.setitem(sys.modules, "torch_musa", torch_musa)
    monkeypatch.setattr(torch, "musa", musa, raising=False)  # what `import torch_musa` does
    monkeypatch.setattr(torch.version, "musa", "3.1.0", raising=False)
    _fake_cli(bin_dir, "mthreads-gmi", gmi_output(os.getpid()), require_args="-q -i 0")
    return musa


def install_fake_maca_torch(monkeypatch) -> FakeDeviceModule:
    """mcPytorch: the MetaX device answers as torch.cuda."""
    maca = FakeDeviceModule("cuda", "CUDAGraph", "MetaX C500")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)  # only here: a real GPU run keeps its own
    for attr in ("is_available", "device_count", "set_device", "current_device", "synchronize", "Event",
                 "Stream", "current_stream", "stream", "CUDAGraph", "graph", "get_device_name",
                 "get_device_properties", "empty_cache", "OutOfMemoryError", "is_current_stream_capturing",
                 "graph_pool_handle"):
        monkeypatch.setattr(torch.cuda, attr, getattr(maca, attr))
    monkeypatch.setattr(torch.version, "hip", None)
    return maca


def load_template_backend():
    sys.path.insert(0, str(TEMPLATE))
    try:
        from zlf_backend_foo.backend import FooBackend
    finally:
        sys.path.remove(str(TEMPLATE))
    return FooBackend


def _musa_cls():
    from zlf_backend_musa.backend import MusaBackend

    return MusaBackend


def _maca_cls():
    from zlf_backend_maca.backend import MacaBackend

    return MacaBackend


# ------------------------------------------------------------------------------ the platforms
class Platform:
    """A backend class plus what the suite may expect of it on this machine."""

    def __init__(self, cls, device, fake=None, tensors=False, vendor_fields=()):
        self.cls, self.device, self.fake, self.tensors, self.vendor_fields = cls, device, fake, tensors, vendor_fields


@pytest.fixture(params=["cpu", pytest.param("cuda", marks=pytest.mark.gpu),
                        pytest.param("musa", marks=pytest.mark.extensions("musa")),
                        pytest.param("maca", marks=pytest.mark.extensions("maca")), "foo"])
def platform(request, monkeypatch, _isolated):
    name = request.param
    if name == "cpu":
        return Platform(CpuBackend, "cpu", tensors=True)
    if name == "cuda":
        return Platform(CudaBackend, "cuda:0", tensors=True, vendor_fields=("capability", "cuda_runtime"))
    if name == "musa":
        fake = install_fake_musa(monkeypatch, _isolated)
        return Platform(_musa_cls(), "musa:0", fake=fake,
                        vendor_fields=("torch_musa", "driver_version", "mtbios_version", "capability"))
    if name == "maca":
        fake = install_fake_maca_torch(monkeypatch)
        _fake_cli(_isolated, "mx-smi", mxsmi_output(os.getpid()), require_args="")
        return Platform(_maca_cls(), "cuda:0", fake=fake,
                        vendor_fields=("maca_version", "driver_version", "maca_detection", "capability"))
    return Platform(load_template_backend(), "cpu", tensors=True)


@pytest.fixture
def backend(platform):
    assert platform.cls.is_available(), platform.cls.unavailable_reason()
    b = platform.cls(0)
    b.setup()
    return b


# ------------------------------------------------------------------------------ the suite
def test_static_contract(platform):
    cls = platform.cls
    assert cls.contract_problems() == []
    assert issubclass(cls, Backend)
    if not cls.host_timing:
        assert cls.timer_name not in ("", "event", "host_wall")
        assert cls.triton_target


def test_detection_and_device(platform, backend):
    assert backend.device == platform.device
    name = backend.device_name()
    assert isinstance(name, str) and name.strip()
    if platform.fake is not None:
        assert name == platform.fake.device_name_


def test_synchronize_and_event_measure_elapsed_time(platform, backend):
    backend.synchronize()
    if platform.fake is not None:
        assert platform.fake.sync_calls and platform.fake.sync_calls[-1] == 0
    start, end = backend.event(), backend.event()
    start.record()
    time.sleep(0.005)
    end.record()
    backend.synchronize()
    assert 4.0 <= start.elapsed_time(end) < 1000.0


def test_streams(platform, backend):
    stream = backend.new_stream()
    if stream is None:
        with backend.stream_context(stream):
            pass
        return
    before = backend.current_stream()
    with backend.stream_context(stream):
        assert backend.current_stream() == stream
    assert backend.current_stream() == before != stream


def test_graph_capture_on_a_side_stream(platform, backend):
    graph = backend.new_graph()
    if graph is None:
        with pytest.raises(NotImplementedError):
            with backend.graph_capture(graph):
                pass
        return
    stream = backend.new_stream()
    pool = backend.graph_pool_handle()
    x = y = None
    if platform.tensors:
        x = torch.arange(8, dtype=torch.float32, device=backend.device)
        y = torch.zeros_like(x)
        with backend.stream_context(stream):  # warm up off the default stream, as capture requires
            y.copy_(x * 2)
        backend.synchronize()
        y.zero_()
    with backend.graph_capture(graph, stream=stream, **({"pool": pool} if pool is not None else {})):
        inside = backend.current_stream()
        if y is not None:
            y.copy_(x * 2)
    assert inside == stream
    graph.replay()
    backend.synchronize()
    if y is not None and not backend.host_timing:
        assert torch.equal(y.cpu(), torch.arange(8, dtype=torch.float32) * 2)
    if platform.fake is not None:
        assert platform.fake.replays == 1 and not platform.fake.capturing
        assert pool is not None  # both vendor stacks expose graph_pool_handle


def test_failed_capture_can_be_discarded(platform, backend):
    """A capture that raises leaves the backend able to capture again (timers rely on this)."""
    graph = backend.new_graph()
    if graph is None or backend.host_timing:
        return  # nothing is captured on the host, so nothing can fail
    pool = backend.graph_pool_handle()
    kwargs = {"pool": pool} if pool is not None else {}
    with pytest.raises(RuntimeError):
        with backend.graph_capture(graph, stream=backend.new_stream(), **kwargs):
            backend.synchronize()  # a host sync is illegal while capturing
    if pool is not None:
        backend.discard_graph_pool(pool)
    again = backend.new_graph()
    with backend.graph_capture(again, stream=backend.new_stream()):
        if platform.tensors:
            torch.ones(4, device=backend.device).mul_(2)
    again.replay()
    backend.synchronize()


def test_default_timer_runs_on_the_backend(platform, backend):
    timing = time_direct(lambda: time.sleep(0.002), backend, warmup_ms=1, rep_ms=20, flush_l2=False)
    assert timing.timer == backend.timer_name
    assert len(timing.samples_ms) >= 5
    assert 1.5 <= timing.value_ms < 200


#: what each platform's activity_api says (docs/backends.md, "Kernel-activity timer")
ACTIVITY_API = {"cpu": "", "cuda": "cupti", "musa": "mupti", "maca": "mcpti", "foo": ""}


def test_kernel_activity_offer(platform, backend):
    """No backend ships a timer of its own today: each offers None without raising, and names
    the tracing interface a kernel-timer extension would have to speak."""
    assert backend.activity_api == ACTIVITY_API[backend.name]
    assert backend.kernel_timer(argparse.Namespace()) is None


class FakeKernelTimer:
    """A kernel-activity timer answering a fixed device time, as a vendor tracer would."""

    name = "fake_activity"

    def __init__(self):
        self.calls = 0

    def time(self, fn, backend, *, warmup_ms, rep_ms, flush_l2):
        from zlf.records import Timing

        self.calls += 1
        fn()
        return Timing.from_samples([0.004, 0.005, 0.006], timer=self.name, l2="flush" if flush_l2 else "warm",
                                   wall_ms=0.05)


def _hooks(timer=None):
    """Hooks with core's defaults only (no extension active)."""
    from zlf.plugins import Hooks, Selection, build_plugin_manager

    pm, infos = build_plugin_manager(Selection(only=()))
    return Hooks(pm, infos, {"time_fn": timer, "kernel_timer": timer} if timer else None)


def test_a_backend_offering_its_own_kernel_timer_is_used_by_cores_timer(platform, backend, monkeypatch):
    offered = FakeKernelTimer()
    monkeypatch.setattr(type(backend), "kernel_timer", lambda self, options=None: offered)
    from zlf.records import Point

    point = Point("x", (1,), "float32")
    opts = argparse.Namespace(warmup_ms=1.0, rep_ms=5.0, flush_l2=False)  # fakes cannot allocate a flush buffer
    timing = _hooks().time_fn(lambda: None, point, backend, opts)
    assert timing.timer == "fake_activity" and timing.wall_ms == 0.05 and offered.calls == 1
    # --timer core: core's event timer, whatever is offered
    timing = _hooks(timer="core").time_fn(lambda: None, point, backend, opts)
    assert timing.timer == backend.timer_name and offered.calls == 1


def test_flush_l2_and_free_memory(platform, backend):
    if platform.tensors:
        backend.flush_l2()  # fakes cannot allocate on a device torch does not know
    backend.free_memory()
    if platform.fake is not None:
        assert platform.fake.empty_cache_calls == 1
    assert backend.is_oom(RuntimeError(f"{platform.cls.name.upper()} out of memory. Tried to allocate 2.00 GiB"))
    assert not backend.is_oom(ValueError("shape mismatch"))


def test_device_state_and_busy_warnings(platform, backend):
    state = backend.device_state()
    warnings = backend.busy_warnings()
    assert isinstance(state, dict) and isinstance(warnings, list)
    json.dumps(state)
    if platform.fake is not None:
        # the fake tool lists this process (ignored) and, on another GPU or the same, a stranger
        assert state["temperature.gpu"] in ("41C", "45C")
        assert all(str(os.getpid()) not in p for p in state["other_processes"])


def test_fingerprint(platform, backend):
    info = backend.fingerprint()
    json.dumps(info)
    assert info["backend"] == platform.cls.name
    assert info["device_name"] == backend.device_name()
    assert info["torch"] == torch.__version__
    for field in platform.vendor_fields:
        assert info.get(field) not in (None, ""), field


def test_ir_kinds_target_and_compiler_hooks(platform, backend):
    assert isinstance(backend.ir_kinds, tuple)
    assert backend.triton_hook_api() in ("chain", "knob", "class", "none")
    hooks = backend.install_compiler_hooks(None, None)
    try:
        with hooks.launch_window("add/1024/float32"):
            pass
    finally:
        hooks.remove()


# ------------------------------------------------------------------------------ the contract itself
def test_contract_mirrors_the_base_class_and_the_docs():
    public = {n for n in vars(Backend) if not n.startswith("_")} - {"contract_problems"}
    assert public == {item.name for item in CONTRACT}
    doc = (ROOT / "docs" / "backends.md").read_text()
    for item in CONTRACT:
        assert re.search(rf"`{item.name}[`(]", doc), f"docs/backends.md does not document {item.name}"
    assert "untested on real hardware" in doc.lower()


def test_contract_problems_name_what_is_missing():
    class Half(Backend):
        name = "half"
        description = "a device backend that forgot most of the contract"

        @classmethod
        def is_available(cls):
            return True

    problems = "\n".join(Half.contract_problems())
    for missing in ("device (property)", "device_name", "synchronize", "event", "graph_capture", "triton_target"):
        assert missing in problems


# ------------------------------------------------------------------------------ vendor specifics
@pytest.mark.extensions("musa")
def test_musa_without_torch_musa_says_why():
    cls = _musa_cls()
    assert not cls.is_available()
    assert "torch_musa is not installed" in cls.unavailable_reason()


@pytest.mark.extensions("musa")
def test_musa_with_no_device_says_why(monkeypatch, _isolated):
    install_fake_musa(monkeypatch, _isolated, available=False)
    cls = _musa_cls()
    assert not cls.is_available()
    assert "sees no MUSA device" in cls.unavailable_reason()


@pytest.mark.extensions("musa")
def test_musa_state_maps_visible_devices_and_reports_strangers(monkeypatch, _isolated):
    install_fake_musa(monkeypatch, _isolated)
    _fake_cli(_isolated, "mthreads-gmi", gmi_output(os.getpid()), require_args="-q -i 1")
    monkeypatch.setenv("MUSA_VISIBLE_DEVICES", "1")
    b = _musa_cls()(0)
    state = b.device_state()
    assert state["name"] == "MTT S4000" and state["driver_version"] == "2.7.0"
    assert state["clocks.graphics"] == "1750 MHz"
    warnings = b.busy_warnings()
    assert len(warnings) == 1 and str(OTHER_PID) in warnings[0] and "other_job" in warnings[0]


@pytest.mark.extensions("musa")
def test_musa_throttle_is_a_warning():
    from zlf_backend_musa import gmi

    text = gmi_output(1) + "    Clocks Throttle Reasons\n        HW Slowdown                       : Active\n"
    state = gmi.device_state(text, own_pid=1)
    assert "HW Slowdown=Active" in state["throttle"]
    assert gmi.device_state(gmi_output(1), own_pid=1).get("throttle") is None


@pytest.mark.extensions("maca")
def test_maca_state_per_gpu_and_visible_devices(monkeypatch, _isolated):
    install_fake_maca_torch(monkeypatch)
    _fake_cli(_isolated, "mx-smi", mxsmi_output(os.getpid()), require_args="")
    b = _maca_cls()(0)
    state = b.device_state()
    assert (state["name"], state["maca_version"], state["memory.total_mib"]) == ("MetaX C500", "3.2.1.10", 65536)
    assert b.busy_warnings() == []
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert b.device_state()["temperature.gpu"] == "71C"
    warnings = b.busy_warnings()
    assert len(warnings) == 1 and str(OTHER_PID) in warnings[0]
    assert _maca_cls().warp_size == 64 and _maca_cls().triton_target == "maca"


def _session(*ext):
    return Session.create(argparse.Namespace(ext=list(ext), no_ext=None, timer=None))


@pytest.mark.extensions("maca")
@pytest.mark.parametrize("signal", ["mx-smi", "GEMS_VENDOR", "triton"])
def test_maca_box_is_claimed_by_maca_not_cuda(monkeypatch, _isolated, signal):
    install_fake_maca_torch(monkeypatch)
    if signal == "mx-smi":
        _fake_cli(_isolated, "mx-smi", mxsmi_output(os.getpid()))
    elif signal == "GEMS_VENDOR":
        monkeypatch.setenv("GEMS_VENDOR", "metax")
    else:
        from triton import backends

        monkeypatch.setitem(backends.backends, "metax", object())
    # torch.cuda answers, so cuda is available; maca claims the machine (supersedes = ("cuda",))
    assert CudaBackend.is_available() and _maca_cls().is_available()
    assert _session("maca").choose_backend().name == "maca"
    with pytest.raises(UsageError, match="stands aside.*--backend maca"):
        _session("maca").choose_backend("cuda")


@pytest.mark.extensions("maca")
def test_nvidia_box_stays_cuda_and_maca_can_be_forced(monkeypatch, _isolated):
    install_fake_maca_torch(monkeypatch)  # torch.cuda answers; nothing says MetaX
    assert CudaBackend.is_available() and not _maca_cls().is_available()
    assert _session("maca").choose_backend().name == "cuda"
    forced = _session("maca").choose_backend("maca")
    assert forced.name == "maca" and forced.fingerprint()["maca_detection"] == ["forced with --backend maca / ZLF_BACKEND=maca"]


@pytest.mark.extensions("maca")
def test_explicit_other_vendor_wins_over_a_stray_mx_smi(monkeypatch, _isolated):
    install_fake_maca_torch(monkeypatch)
    _fake_cli(_isolated, "mx-smi", mxsmi_output(os.getpid()))
    monkeypatch.setenv("GEMS_VENDOR", "nvidia")
    from zlf_backend_maca import detect

    assert detect.maca_signals() == [] and not _maca_cls().is_available()
    assert _session("maca").choose_backend().name == "cuda"


@pytest.mark.extensions("maca", "musa")
def test_no_gpu_at_all_leaves_cpu(monkeypatch, _isolated):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # also on a GPU machine
    _fake_cli(_isolated, "mx-smi", mxsmi_output(os.getpid()))
    assert not _maca_cls().is_available() and not _maca_cls().available_when_forced()
    assert _session("maca", "musa").choose_backend().name == "cpu"
    with pytest.raises(UsageError, match="torch sees no device through torch.cuda"):
        _session("maca").choose_backend("maca")


# ------------------------------------------------------------------------------ end to end
def _one_line_error(proc):
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1 and lines[0].startswith("zlf: error: "), proc.stderr
    return lines[0]


@pytest.mark.extensions("musa", "maca")
def test_plugins_lists_musa_and_maca(zlf_cli):
    proc = zlf_cli("plugins", "--json", "--ext", "musa", "--ext", "maca", check_rc=0)
    by_name = {e["name"]: e for e in json.loads(proc.stdout)}
    for name in ("musa", "maca"):
        assert by_name[name]["status"] == "active"
        assert by_name[name]["distribution"] == f"zlf-backend-{name}"
        assert by_name[name]["hooks"] == ["env_prefixes", "register_backends"]


@pytest.mark.parametrize("name, why", [
    pytest.param("musa", "torch_musa is not installed", marks=pytest.mark.extensions("musa")),
    # with a GPU, torch.cuda answers and --backend maca is taken at its word
    pytest.param("maca", "torch sees no device through torch.cuda",
                 marks=[pytest.mark.extensions("maca"),
                        pytest.mark.skipif(gpu_available(), reason="torch.cuda answers on this machine")]),
])
def test_vendor_backend_on_the_wrong_machine_is_one_line_exit_2(zlf_cli, tmp_path, name, why):
    line = _one_line_error(zlf_cli("run", "add", "--backend", name, "--ext", name, "--out", tmp_path / "runs"))
    assert f"backend '{name}' is not available" in line and why in line
    assert not (tmp_path / "runs").exists()


def test_template_backend_installs_from_a_temp_dir_and_runs(zlf_cli, tmp_path):
    src, site = tmp_path / "zlf-backend-foo", tmp_path / "site"
    shutil.copytree(TEMPLATE, src, ignore=shutil.ignore_patterns("*.egg-info", "build", "__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                    "--disable-pip-version-check", "--target", str(site), str(src)],
                   check=True, capture_output=True, text=True, timeout=120)
    env = pythonpath(site)

    plugins = json.loads(zlf_cli("plugins", "--json", "--ext", "foo", env=env, check_rc=0).stdout)
    foo = next(e for e in plugins if e["name"] == "foo")
    assert (foo["distribution"], foo["status"]) == ("zlf-backend-foo", "active")

    proc = zlf_cli("run", "add", "--ext", "foo", "--backend", "foo", "--dtype", "float32", "--rep-ms", "5",
                   "--warmup-ms", "1", "--out", tmp_path / "runs", "--json", env=env, check_rc=0)
    out = json.loads(proc.stdout)
    meta = json.loads((Path(out["run_dir"]) / "meta.json").read_text())
    assert meta["backend"] == "foo" and meta["fingerprint"]["device_name"] == "Foo host stand-in"
    assert [e["name"] for e in meta["extensions"]] == ["foo"]
    assert {r["timer"] for r in out["records"]} == {"foo_event"}
    assert {r["status"] for r in out["records"]} == {"ok"}
