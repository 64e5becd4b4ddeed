"""Clock-aware measurement: the backend's clock sampler, ``PointRecord.clock``, the metrics a
comparison decides on (time, cycles, wall), and the clock-state flags of ``zlf ab`` / ``zlf compare``."""
from __future__ import annotations

import json
import os
import sys
import types

import pytest

from zlf import ab, cli, compare, metrics
from zlf.backends import cuda as cuda_mod
from zlf.backends.base import ClockSampler, ClockWindow, is_throttled, throttle_names
from zlf.backends.cpu import CpuBackend
from zlf.ab import Campaign, OpSpec, Side
from zlf.errors import UsageError
from zlf.records import PointRecord
from zlf.rundir import RunDir

from zlf.testing import campaign_data
from test_ab import fill

OP_FILE = '''
import torch
import zlf


def make(shape, dtype, device):
    x = torch.randn(shape, dtype=getattr(torch, dtype), device=device)
    return (x, torch.empty_like(x))


def _neg(x, out):
    torch.neg(x, out=out)


neg = zlf.Op(name="neg", fn=_neg, make_inputs=make, shapes=[(256,), (512,)], reference=lambda x, out: -x, outputs=(1,))
'''


def scripted(readings):
    """A read() that returns the given (MHz, mask) pairs in turn, then the last one forever."""
    state = {"i": 0}

    def read():
        i = min(state["i"], len(readings) - 1)
        state["i"] += 1
        value = readings[i]
        if isinstance(value, Exception):
            raise value
        return value

    return read


# ----------------------------------------------------------------------------- the sampler
def test_throttle_names_and_the_throttled_rule():
    assert throttle_names(0x5) == ["gpu_idle", "sw_power_cap"]
    assert throttle_names(0x1000) == ["0x1000"]
    assert throttle_names(0) == []
    assert not is_throttled({"throttle_reasons": ["gpu_idle"]})
    assert is_throttled({"throttle_reasons": ["gpu_idle", "sw_power_cap"]})
    assert not is_throttled(None)


def test_a_window_summarises_min_median_max_and_every_reason_seen():
    # a long interval: exactly the readings at open and close, so the test never depends on time
    window = ClockWindow(scripted([(1755, 0), (1455, 0x4)]), interval_s=3600, source="fake")
    with window:
        pass
    s = window.summary()
    assert (s["sm_mhz_min"], s["sm_mhz_median"], s["sm_mhz_max"]) == (1455, 1605, 1755)
    assert s["throttle_reasons"] == ["sw_power_cap"] and s["throttle_mask"] == "0x4"
    assert (s["readings"], s["throttled_readings"], s["source"]) == (2, 1, "fake")


def test_a_failing_read_costs_the_readings_not_the_point():
    window = ClockWindow(scripted([RuntimeError("NVML gone")]), interval_s=3600, source="fake")
    with window:
        pass
    assert window.summary() is None and "NVML gone" in window.error


# ----------------------------------------------------------------------------- cuda's two sources
def fake_pynvml(monkeypatch, clock=1980, reasons=0x4, broken=False):
    mod = types.ModuleType("pynvml")
    mod.NVML_CLOCK_SM = 1
    mod.calls = []

    def init():
        if broken:
            raise RuntimeError("NVML Shared Library Not Found")

    mod.nvmlInit = init
    mod.nvmlShutdown = lambda: mod.calls.append("shutdown")
    mod.nvmlDeviceGetHandleByUUID = lambda uuid: (_ for _ in ()).throw(RuntimeError("no uuid"))
    mod.nvmlDeviceGetHandleByIndex = lambda i: ("handle", i)
    mod.nvmlDeviceGetClockInfo = lambda h, which: clock if which == 1 else None
    mod.nvmlDeviceGetCurrentClocksThrottleReasons = lambda h: reasons
    monkeypatch.setitem(sys.modules, "pynvml", mod)
    return mod


def test_cuda_reads_nvml_for_the_visible_device(monkeypatch):
    mod = fake_pynvml(monkeypatch)
    handles = []
    mod.nvmlDeviceGetHandleByIndex = lambda i: handles.append(i) or ("handle", i)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    sampler = cuda_mod.CudaBackend(1).clock_sampler()
    assert sampler.source == "nvml" and handles == [5]  # the second visible GPU is physical 5
    assert sampler.read() == (1980, 0x4)
    sampler.close()
    assert mod.calls == ["shutdown"]


def test_cuda_falls_back_to_nvidia_smi_then_to_nothing(monkeypatch, tmp_path):
    fake_pynvml(monkeypatch, broken=True)
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho '1455, 0x0000000000000004'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path) + os.pathsep + os.environ["PATH"])
    sampler = cuda_mod.CudaBackend(0).clock_sampler()
    assert sampler.source == "nvidia-smi" and sampler.read() == (1455.0, 4)
    smi.write_text("#!/bin/sh\nexit 9\n")
    assert cuda_mod.CudaBackend(0).clock_sampler() is None


def test_cpu_has_no_clock_sampler():
    assert CpuBackend().clock_sampler() is None


# ----------------------------------------------------------------------------- the run engine
class ClockedCpu(CpuBackend):
    name = "clocked"
    description = "cpu with a scripted SM clock (tests)"
    priority = -1
    readings = [(1500, 0), (1600, 0x4)]

    def clock_sampler(self):
        return ClockSampler(scripted(self.readings), interval_s=3600, source="scripted")


class ClockPlugin:
    from zlf import hookimpl

    @hookimpl
    def register_backends(self):
        return [ClockedCpu]


def _run(tmp_path, monkeypatch, backend):
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # restored after the test: the cpu backend sets it
    monkeypatch.setenv("ZLF_NO_PROGRESS", "1")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ops.py").write_text(OP_FILE)
    rc = cli.main(["run", "ops.py::neg", "--backend", backend, "--rep-ms", "2", "--warmup-ms", "1",
                   "--out", "o", "--json"], extra_plugins=[("clockplug", ClockPlugin())])
    assert rc == 0
    (d,) = (tmp_path / "o").iterdir()
    return RunDir(d)


def test_every_timed_point_records_the_clock_and_meta_names_the_source(tmp_path, monkeypatch, capsys):
    rd = _run(tmp_path, monkeypatch, "clocked")
    records, _ = rd.records()
    assert len(records) == 2
    for r in records:
        assert r.clock["source"] == "scripted" and r.clock["readings"] == 2
    assert rd.meta()["clock"] == {"source": "scripted", "interval_ms": 3600000.0}


def test_a_backend_without_a_sampler_records_none(tmp_path, monkeypatch, capsys):
    rd = _run(tmp_path, monkeypatch, "cpu")
    records, _ = rd.records()
    assert records and all(r.clock is None for r in records)
    assert rd.meta()["clock"] == {"source": None}


# ----------------------------------------------------------------------------- metrics
def rec(point="mm/64/float16", ms=0.2, mhz=1500.0, reasons=(), wall=None, status="ok"):
    clock = None if mhz is None else {"sm_mhz_min": mhz, "sm_mhz_median": mhz, "sm_mhz_max": mhz,
                                      "throttle_reasons": list(reasons), "source": "t"}
    op, shape, dtype = point.split("/")
    return PointRecord(point=point, op=op, shape=(int(shape),), dtype=dtype, status=status, timer="cuda_event",
                       median_ms=ms if status == "ok" else None, samples=(ms, ms, ms), wall_ms=wall, clock=clock)


def test_metric_values_and_why_one_is_missing():
    r = rec(ms=0.2, mhz=1500, wall=0.25)
    assert metrics.value(r, "time") == 0.2
    assert metrics.value(r, "cycles") == pytest.approx(300.0)  # 0.2 ms x 1500 MHz = 300 kcycles
    assert metrics.value(r, "wall") == 0.25
    bare = rec(mhz=None)
    assert metrics.value(bare, "cycles") is None and metrics.missing(bare, "cycles") == "no SM clock recorded"
    assert metrics.value(bare, "wall") is None and "wall" in metrics.missing(bare, "wall")
    assert metrics.value(rec(status="FAILED"), "time") is None
    with pytest.raises(UsageError, match="unknown metric"):
        metrics.check("joules")


def test_clock_states_differ_by_median_or_by_throttling():
    assert metrics.clock_differs(rec(mhz=1500), rec(mhz=1520)) is None  # 1.3 %: the same state
    assert "1500 / B 1725" in metrics.clock_differs(rec(mhz=1500), rec(mhz=1725))
    assert "only B throttled" in metrics.clock_differs(rec(), rec(reasons=("sw_power_cap",)))
    assert metrics.clock_differs(rec(reasons=("gpu_idle",)), rec()) is None
    assert metrics.clock_differs(rec(mhz=None), rec()) is None  # unknown is not "different"


# ----------------------------------------------------------------------------- zlf ab / zlf compare
def _clocked_campaign(tmp_path, metric):
    data = campaign_data(tmp_path, ops=("mm",))
    data["metric"] = metric
    c = Campaign.create(tmp_path / "o", "t", data)
    for k in (1, 2):
        c.add_round(k)
    fill(c)
    # B runs 10 % longer at a 10 % lower clock: the same cycles, a slower time
    for run in c.runs:
        d = c.run_dir(run)
        records, _ = RunDir(d).records()
        (d / "results.jsonl").unlink()
        slow = run["side"] == "B"
        for r in records:
            mhz = 1500.0 if slow else 1650.0
            clock = {"sm_mhz_min": mhz, "sm_mhz_median": mhz, "sm_mhz_max": mhz, "source": "t",
                     "throttle_reasons": ["sw_power_cap"] if slow else []}
            ms = (1.1 if slow else 1.0) * (1.0 if r.point.endswith("1024/float32") else 2.0)
            RunDir(d).append(PointRecord(**{**r.to_json(), "median_ms": ms, "clock": clock, "shape": tuple(r.shape)}))
    return c


def test_ab_collects_the_campaigns_metric_and_flags_clock_changes(tmp_path):
    c = _clocked_campaign(tmp_path, "cycles")
    values, _, remarks, excluded = ab.collect(c)
    a, b = values["mm/1024/float32"]
    assert a == [pytest.approx(1650.0)] * 2 and b == [pytest.approx(1.1 * 1500.0)] * 2
    assert not excluded
    assert any(m.startswith("CLOCK_DIFFERS r1 (only B throttled") for m in remarks["mm/1024/float32"])
    c.data["metric"] = "time"
    values, _, _, _ = ab.collect(c)
    assert values["mm/1024/float32"][1] == [pytest.approx(1.1)] * 2


def test_ab_leaves_out_points_without_the_metric_and_says_why(tmp_path):
    c = Campaign.create(tmp_path / "o", "t", {**campaign_data(tmp_path, ops=("add",)), "metric": "cycles"})
    c.add_round(1)
    fill(c)  # records without a clock
    values, _, _, excluded = ab.collect(c)
    assert not values
    assert excluded["add/1024/float32"] == "no cycles in r1_A, r1_B (no SM clock recorded)"


def test_ab_takes_metric_and_resume_may_change_it():
    from test_ab import parse

    assert parse("--metric", "cycles").metric == "cycles"
    assert parse().metric is None  # None: keep the campaign's own (time for a new one)
    with pytest.raises(SystemExit):
        parse("--metric", "joules")


def _side_dir(tmp_path, name, records):
    d = tmp_path / name
    d.mkdir()
    rd = RunDir(d)
    rd.write_meta({"status": "complete", "device_name": "H200"})
    for r in records:
        rd.append(r)
    return d


def test_compare_on_cycles_labels_its_columns_and_flags_the_clock(tmp_path):
    a = _side_dir(tmp_path, "a", [rec("mm/64/float16", 0.200, 1725), rec("add/64/float16", 0.01, 1725)])
    b = _side_dir(tmp_path, "b", [rec("mm/64/float16", 0.230, 1500, reasons=("sw_power_cap",)),
                                  rec("add/64/float16", 0.01, 1725)])
    by_time = compare.compare_dirs(a, b, threshold_pct=1.0)
    assert {r.point: round(r.delta_pct, 1) for r in by_time.rows}["mm/64/float16"] == 15.0
    cyc = compare.compare_dirs(a, b, threshold_pct=1.0, metric="cycles")
    rows = {r.point: r for r in cyc.rows}
    assert rows["mm/64/float16"].delta_pct == pytest.approx(0.0, abs=1e-9)  # 0.23 x 1500 = 0.2 x 1725
    assert "only B throttled" in rows["mm/64/float16"].clock and rows["add/64/float16"].clock is None
    headers, _ = compare.table_rows(cyc)
    assert "cycles_A" in headers and "clock_differs" in headers
    assert any("different clock states" in n for n in cyc.notes)
    doc = compare.to_json(cyc)
    assert doc["metric"] == "cycles" and doc["rows"][0]["clock_differs"] is not None
    assert "cycles_A" in compare.to_csv(cyc).splitlines()[0]


def test_compare_without_a_clock_says_no_cycles(tmp_path):
    a = _side_dir(tmp_path, "a", [rec(mhz=None)])
    b = _side_dir(tmp_path, "b", [rec(mhz=None)])
    cmp = compare.compare_dirs(a, b, metric="cycles")
    assert [r.status for r in cmp.rows] == ["no cycles"]
    headers, _ = compare.table_rows(compare.compare_dirs(a, b))
    assert "clock_differs" not in headers and "median_ms_A" in headers
