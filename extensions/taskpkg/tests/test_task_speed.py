"""Suspiciously fast cases: below the calibrated memory floor, or over 100x the baseline. A note in
the table, the json, the record and the summary line; never a verdict change."""
from __future__ import annotations

import json
from pathlib import Path

import attrs
import pytest

from zlf.records import PointRecord

pytest.importorskip("zlf_taskpkg")
from zlf_taskpkg import speed  # noqa: E402
from zlf_taskpkg.judge import case_values, verdict_table  # noqa: E402

REPO = Path(__file__).resolve().parents[3]
PKG = REPO / "tests" / "data" / "taskpkg_vecadd"


def record(case, ms, baseline_ms, status="ok", l2="flush"):
    verdict = "Accepted" if status == "ok" else "Wrong Answer"
    return PointRecord(point=f"p/8/float32/case{case}", op="p", shape=(8,), dtype="float32", variant=f"case{case}",
                       status=status, timer="cupti", median_ms=ms if status == "ok" else None, l2=l2,
                       error=None if status == "ok" else "Wrong Answer: differs",
                       extra={"case": case, "verdict": verdict, "baseline_ms": baseline_ms})


def test_io_bytes_counts_every_tensor_once():
    torch = pytest.importorskip("torch")
    args = [torch.zeros(10, dtype=torch.float32), torch.zeros(4, dtype=torch.bfloat16), 3, 2.5, torch.zeros(6, dtype=torch.int64)]
    assert speed.io_bytes(args) == 10 * 4 + 4 * 2 + 6 * 8


def test_floor_from_bytes_and_bandwidth():
    assert speed.floor_ms(2_000_000, 1000.0) == pytest.approx(0.002)  # 2 MB at 1000 GB/s: 2 us
    assert speed.floor_ms(2_000_000, None) is None and speed.floor_ms(0, 1000.0) is None


def test_below_the_floor_is_flagged_and_the_verdict_kept():
    r = speed.flag(record(1, 0.001, 0.004), 2_000_000, 1000.0)  # 1 us where moving the bytes takes 2 us
    assert r.status == "ok" and r.extra["verdict"] == "Accepted"
    assert r.extra["floor_ms"] == pytest.approx(0.002) and r.extra["io_bytes"] == 2_000_000
    (why,) = r.extra["suspicious"]
    assert why.startswith("below its memory floor: 0.001 ms < 0.002 ms") and "1000 GB/s" in why


def test_just_above_the_floor_and_a_fast_but_plausible_speedup_are_not_flagged():
    r = speed.flag(record(1, 0.0021, 0.2), 2_000_000, 1000.0)  # 95x the baseline, above the floor
    assert r.extra["suspicious"] == [] and speed.summary_line([r]) is None


def test_over_100x_the_baseline_is_flagged_without_a_calibration():
    r = speed.flag(record(2, 0.001, 0.5), 2_000_000, None)
    assert r.extra["floor_ms"] is None and r.extra["suspicious"] == ["500x faster than the baseline"]


def test_l2_warm_is_said_and_failed_cases_are_never_flagged():
    warm = speed.flag(record(1, 0.001, 0.002, l2="warm"), 2_000_000, 1000.0)
    assert "L2 warm" in warm.extra["suspicious"][0]
    failed = speed.flag(record(3, None, 0.5, status="FAILED"), 2_000_000, 1000.0)
    assert failed.extra["suspicious"] == []


def test_table_note_json_fields_and_summary_line():
    records = [speed.flag(record(1, 0.001, 0.5), 10, None), speed.flag(record(2, 0.4, 0.5), 10, None)]
    assert speed.summary_line(records) == "1 case(s) suspiciously fast: case 1 (500x faster than the baseline)"
    note = case_values(records[0])[-1]
    assert note.startswith("suspiciously fast: 500x faster than the baseline")
    assert case_values(records[1])[-1] == ""
    assert "suspiciously fast" in verdict_table(records, "markdown")


@pytest.mark.slow
def test_a_case_below_the_calibrated_floor_end_to_end(zlf_cli, tmp_path, monkeypatch):
    """A calibration claiming a very slow copy puts every case of the CPU run below its floor:
    Accepted, but its time is not trusted (no speedup, exit code 1)."""
    from zlf import ceilings
    from zlf.backends import CpuBackend

    monkeypatch.setenv("ZLF_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("ZLF_NO_PROGRESS", "1")
    backend = CpuBackend(0)
    backend.setup()
    name = backend.fingerprint()["device_name"]
    ceilings.save(ceilings.Ceilings(device_name=name, backend="cpu", bandwidth_GB_s=1e-6))
    proc = zlf_cli("task", PKG, "--candidate", PKG / "candidates" / "correct.py", "--ext", "task", "--cases", "1",
                   "--format", "json", "--out", "runs", check_rc=1)
    doc = json.loads(proc.stdout)
    assert doc["passed"] == 1 and doc["suspicious_cases"] == [1] and doc["time_not_trusted_cases"] == [1]
    (case,) = doc["cases"]
    assert case["verdict"] == "Accepted, time not trusted" and case["speedup"] is None
    assert case["suspicious"][0].startswith("below its memory floor")
    assert case["time_not_trusted"][0].startswith("below its memory floor")
    run_dir = tmp_path / doc["run_dir"]
    rec = json.loads((run_dir / "results.jsonl").read_text().splitlines()[0])
    assert rec["extra"]["io_bytes"] == 3 * 1000 * 4 and rec["extra"]["floor_ms"] == pytest.approx(12000 / 1.0)
    assert rec["status"] == "FAILED" and rec["error"].startswith("time not trusted: below its memory floor")
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["task"]["summary"]["suspicious_cases"] == [1] and meta["task"]["summary"]["time_not_trusted_cases"] == [1]
    table = zlf_cli("task", PKG, "--candidate", PKG / "candidates" / "correct.py", "--ext", "task", "--cases", "1",
                    "--out", "runs", check_rc=1)
    assert "1 case(s) Accepted with a time not trusted (no speedup): case(s) 1" in table.stdout
    assert "Accepted, time not trusted" in table.stdout.split("\n\n")[0]  # the table's verdict column


def test_a_time_below_the_timers_resolution_is_not_trusted():
    for ms, timer in [(0.0, "cupti"), (-0.0, "host_wall"), (2e-4, "cuda_event")]:
        r = speed.trust(attrs.evolve(record(1, ms, 0.5), timer=timer))
        assert r.status == "FAILED" and r.extra["time_trusted"] is False, (ms, timer)
        assert "its clock did not move" in r.error and r.extra["speedup"] is None
    assert speed.trust(attrs.evolve(record(1, 2e-4, 0.0004), timer="cupti")).extra["time_trusted"] is True


def test_an_accepted_case_whose_timing_was_rejected_is_not_trusted():
    r = record(1, None, 0.5)
    assert speed.trust(r).extra["time_trusted"] is True  # no reason given: nothing to distrust
    rejected = attrs.evolve(r, extra={**r.extra, "timing_rejected": "a clock that ran backwards"})
    out = speed.trust(rejected)
    assert out.status == "FAILED" and out.extra["time_trusted"] is False
    assert out.error == "time not trusted: the candidate's timing was rejected: a clock that ran backwards"


@pytest.mark.parametrize("samples", [[1.0, -0.5, 1.0], [1.0, float("nan")], [float("inf")]])
def test_a_timing_with_a_negative_or_non_finite_sample_is_dropped_whole(samples):
    from types import SimpleNamespace

    from zlf_taskpkg.judge import Judge

    judge = SimpleNamespace(timer=SimpleNamespace(timer="host_wall"),
                            backend=SimpleNamespace(timer_name="host_wall", host_timing=True))
    judge.timer_names = lambda: Judge.timer_names(judge)
    assert Judge.sanitize_timing(judge, {"value_ms": 1.0, "samples_ms": [1.0, 1.0]}).samples_ms == (1.0, 1.0)
    assert Judge.sanitize_timing(judge, {"value_ms": 1.0, "samples_ms": samples}) is None
