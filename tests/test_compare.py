"""``zlf compare`` and ``zlf calibrate``: over real ``zlf run`` directories (cpu backend), hand-damaged
copies, and synthetic run directories where a test needs controlled timings."""
from __future__ import annotations

import csv
import importlib.util
import io
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from zlf import compare
from zlf.ceilings import Ceilings, cache_dir, ceilings_path, save
from zlf.records import PointRecord
from zlf.rundir import RunDir

from conftest import run_dir_from, zlf_core as zlf


@pytest.fixture
def cli(monkeypatch, capsys, tmp_path):
    """``zlf ARGS`` in this process (no interpreter start-up): a CompletedProcess-like result."""
    from zlf.cli import main

    def run(*args, env=None):
        monkeypatch.delenv("FORCE_COLOR", raising=False)
        for key, value in {"ZLF_CACHE_DIR": str(tmp_path / "cache"), **(env or {})}.items():
            monkeypatch.setenv(key, value)
        capsys.readouterr()
        try:
            rc = main([str(a) for a in args])
        except SystemExit as exc:  # argparse
            rc = exc.code
        out, err = capsys.readouterr()
        return subprocess.CompletedProcess(args, rc, out, err)

    return run


@pytest.fixture(scope="module")
def real_runs(tmp_path_factory):
    """Two real runs of ``add`` and one of ``softmax`` on the cpu backend, made once per module."""
    work = tmp_path_factory.mktemp("real_runs")
    runs = {}
    for label, op in (("a", "add"), ("b", "add"), ("softmax", "softmax")):
        proc = zlf("run", op, "--warmup-ms", "1", "--rep-ms", "3", "--name", label, cwd=work)
        assert proc.returncode == 0, proc.stderr
        runs[label] = run_dir_from(proc.stdout, cwd=work)
    return runs


def write_run(path: Path, points: dict, device: str = "Test GPU", host_timing: bool = False) -> Path:
    """A run directory with chosen timings: ``{point id: (median_ms, timer[, status[, samples]])}``."""
    path.mkdir(parents=True)
    rundir = RunDir(path)
    rundir.write_meta({"device_name": device, "backend": "cuda", "status": "complete", "host_timing": host_timing,
                       "command": ["zlf", "run"], "fingerprint": {"torch": "2.11", "triton": "3.6.0"}})
    for pid, spec in points.items():
        median, timer = spec[0], spec[1]
        status = spec[2] if len(spec) > 2 else "ok"
        samples = spec[3] if len(spec) > 3 else (median,) * 5
        op, shape, dtype = pid.split("/")
        dims = [int(d) for d in shape.split("x")]
        ok = status == "ok"
        rundir.append(PointRecord(
            point=pid, op=op, shape=dims, dtype=dtype, status=status, timer=timer if ok else None,
            median_ms=median if ok else None, samples=samples if ok else (),
            gbps=(3 * 4 * dims[0] / (median * 1e-3) / 1e9) if ok else None, tflops=None,
        ))
    return path


# ----------------------------------------------------------------------------- real runs
def test_compare_two_real_runs_prints_table_summary_and_threshold_origin(real_runs, tmp_path):
    proc = zlf("compare", real_runs["a"], real_runs["b"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "add/1024/float32" in out and "add/5000/float32" in out
    assert "2 points compared" in out and "geomean time B/A" in out
    assert "threshold ±" in out and "IQR/median" in out  # says how the default was chosen
    assert "host_wall" in out and "not GPU kernel times" in out
    assert "\x1b[" not in out  # not a TTY: no colour
    assert "ir" not in out.split("\n\n")[1].splitlines()[0].split()  # no ir/ on either side: no IR column


def test_json_format_has_every_point_with_both_sides(real_runs, tmp_path, cli):
    proc = cli("compare", real_runs["a"], real_runs["b"], "--format", "json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert {r["point"] for r in doc["rows"]} == {"add/1024/float32", "add/5000/float32"}
    for row in doc["rows"]:
        assert row["status"] == "ok"
        expected = (row["b"]["median_ms"] - row["a"]["median_ms"]) / row["a"]["median_ms"] * 100
        assert row["delta_pct"] == pytest.approx(expected)
        assert row["a"]["timer"] == row["b"]["timer"] == "host_wall"
    s = doc["summary"]
    assert s["faster"] + s["slower"] + s["same"] == s["compared"] == 2 and s["unchanged"] == s["same"]
    assert s["threshold_pct"] >= compare.THRESHOLD_FLOOR_PCT and s["threshold_how"]


def test_csv_follows_formats_section_7(real_runs, tmp_path, cli):
    proc = cli("compare", real_runs["a"], real_runs["b"], "--format", "csv")
    assert proc.returncode == 0, proc.stderr
    rows = list(csv.DictReader(io.StringIO(proc.stdout)))
    assert len(rows) == 2
    for col in ("shape", "dim0", "median_ms_A", "median_ms_B", "gbps_A", "gbps_B",
                "tflops_A", "tflops_B", "delta_pct"):
        assert col in rows[0]
    by_point = {r["point"]: r for r in rows}
    assert by_point["add/5000/float32"]["dim0"] == "5000"
    assert float(by_point["add/1024/float32"]["median_ms_A"]) > 0
    assert float(by_point["add/1024/float32"]["gbps_B"]) > 0


def test_markdown_format_is_a_github_table(real_runs, tmp_path, cli):
    proc = cli("compare", real_runs["a"], real_runs["b"], "--format", "markdown")
    assert proc.returncode == 0, proc.stderr
    table = [l for l in proc.stdout.splitlines() if l.startswith("|")]
    assert len(table) == 2 + 2 and "point" in table[0] and table[1].startswith("|--")


def test_not_a_run_dir_is_one_line_exit_2(real_runs, tmp_path):
    (tmp_path / "empty").mkdir()
    proc = zlf("compare", tmp_path / "empty", real_runs["b"], cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "not a zlf run directory" in proc.stderr
    proc = zlf("compare", real_runs["a"], tmp_path / "missing", cwd=tmp_path)
    assert proc.returncode == 2 and "not a directory" in proc.stderr


def test_different_ops_have_nothing_to_pair(real_runs, tmp_path, cli):
    proc = cli("compare", real_runs["a"], real_runs["softmax"])
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0
    assert "nothing to pair" in proc.stderr and "add" in proc.stderr and "softmax" in proc.stderr


def test_truncated_results_use_complete_lines_and_say_how_many_were_skipped(real_runs, tmp_path, cli):
    cut = tmp_path / "cut"
    shutil.copytree(real_runs["b"], cut)
    text = (cut / "results.jsonl").read_text()
    (cut / "results.jsonl").write_text(text[: len(text) - 40])  # a crash cut the last line
    proc = cli("compare", real_runs["a"], cut)
    assert proc.returncode == 0, proc.stderr
    assert "skipped 1 incomplete line" in proc.stdout
    assert "only A" in proc.stdout and "1 points compared" in proc.stdout
    proc = cli("compare", real_runs["a"], cut, "--format", "json")
    assert "skipped 1 incomplete line" in proc.stderr  # machine formats keep stdout parseable
    assert json.loads(proc.stdout)["b"]["skipped_lines"] == 1


def test_only_truncated_lines_is_exit_2(real_runs, tmp_path, cli):
    cut = tmp_path / "cut"
    shutil.copytree(real_runs["b"], cut)
    (cut / "results.jsonl").write_text('{"point": "add/10')
    proc = cli("compare", real_runs["a"], cut)
    assert proc.returncode == 2 and "no complete point record" in proc.stderr


def test_unknown_format_is_a_usage_error(real_runs, tmp_path, cli):
    assert cli("compare", real_runs["a"], real_runs["b"], "--format", "xml").returncode == 2


# ----------------------------------------------------------------------------- synthetic timings
def test_timer_mismatch_is_refused_unless_allowed(tmp_path, cli):
    a = write_run(tmp_path / "A", {"k/1024/float32": (1.0, "cudagraph"), "k/2048/float32": (2.0, "cudagraph")})
    b = write_run(tmp_path / "B", {"k/1024/float32": (2.0, "cuda_event"), "k/2048/float32": (2.0, "cudagraph")})
    proc = cli("compare", a, b, "--format", "json")
    rows = {r["point"]: r for r in json.loads(proc.stdout)["rows"]}
    assert rows["k/1024/float32"]["status"] == "timer mismatch" and rows["k/1024/float32"]["delta_pct"] is None
    assert rows["k/2048/float32"]["delta_pct"] == pytest.approx(0.0)
    text = cli("compare", a, b).stdout
    assert "timer mismatch" in text and "A cudagraph / B cuda_event" in text  # which row used which timer
    proc = cli("compare", a, b, "--allow-mixed-timers", "--format", "json")
    rows = {r["point"]: r for r in json.loads(proc.stdout)["rows"]}
    assert rows["k/1024/float32"]["status"] == "mixed timers"
    assert rows["k/1024/float32"]["delta_pct"] == pytest.approx(100.0)


def test_points_timed_over_different_numbers_of_input_sets_are_said(tmp_path):
    """A run from before input copies (one placement of each point's inputs) against one with
    them: the deltas still compare, and a note says which side's medians rest on fewer placements."""
    points = {"k/1024/float32": (1.0, "cupti"), "k/2048/float32": (2.0, "cupti")}
    a, b = write_run(tmp_path / "A", points), write_run(tmp_path / "B", points)
    records = [json.loads(line) for line in (b / "results.jsonl").read_text().splitlines()]
    records[0]["extra"] = {"input_copies": {"sets": 32}}
    records[1]["extra"] = {"input_copies": {"sets": 1, "why": "no tensor among the inputs"}}
    (b / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    notes = compare.compare_dirs(a, b).notes
    said = [n for n in notes if "input sets" in n]
    assert said == ["1 compared point(s) were timed over different numbers of input sets on A and B (e.g. 1 against "
                    "32; --input-copies, docs/timing.md): one side's median is taken over fewer placements of its "
                    "inputs in device memory"]
    assert not [n for n in compare.compare_dirs(a, a).notes if "input sets" in n]


def test_one_side_only_and_failed_points_are_listed_not_dropped(tmp_path, cli):
    a = write_run(tmp_path / "A", {"k/1/float32": (1.0, "t"), "k/2/float32": (1.0, "t"), "k/3/float32": (1.0, "t")})
    b = write_run(tmp_path / "B", {"k/1/float32": (1.0, "t"), "k/3/float32": (1.0, "t", "OOM"),
                                   "k/4/float32": (1.0, "t")})
    out = cli("compare", a, b).stdout
    for pid, status in (("k/2/float32", "only A"), ("k/4/float32", "only B"), ("k/3/float32", "B OOM")):
        line = next(l for l in out.splitlines() if l.startswith(pid))
        assert status in line
    assert "not compared:" in out
    rows = {r["point"]: r for r in csv.DictReader(io.StringIO(cli("compare", a, b, "--format", "csv").stdout))}
    assert rows["k/3/float32"]["median_ms_B"] == "OOM" and rows["k/3/float32"]["gbps_B"] == "OOM"
    assert float(rows["k/3/float32"]["median_ms_A"]) == 1.0


def test_fail_if_slower_gates_and_names_the_points(tmp_path, cli):
    a = write_run(tmp_path / "A", {"k/1/float32": (1.0, "t"), "k/2/float32": (1.0, "t"), "k/3/float32": (1.0, "t")})
    b = write_run(tmp_path / "B", {"k/1/float32": (1.10, "t"), "k/2/float32": (1.03, "t"), "k/3/float32": (0.9, "t")})
    proc = cli("compare", a, b, "--fail-if-slower", "5")
    assert proc.returncode == 1
    fail = next(l for l in proc.stdout.splitlines() if l.startswith("FAIL"))
    assert "k/1/float32 (+10.0%)" in fail and "k/2/float32" not in fail
    proc = cli("compare", a, b, "--fail-if-slower", "15")
    assert proc.returncode == 0 and "PASS" in proc.stdout
    proc = cli("compare", a, b, "--fail-if-slower", "5", "--format", "json")
    assert proc.returncode == 1 and json.loads(proc.stdout)["gate"]["failed"] == ["k/1/float32"]
    assert "FAIL" in proc.stderr


def test_fail_if_slower_spares_what_compare_calls_same(tmp_path, cli):
    # +4% is inside compare's own noise threshold (5%): the table says SAME, so the gate passes
    a = write_run(tmp_path / "A", {"k/1/float32": (1.0, "t"), "k/2/float32": (1.0, "t")})
    b = write_run(tmp_path / "B", {"k/1/float32": (1.04, "t"), "k/2/float32": (1.08, "t")})
    proc = cli("compare", a, b, "--threshold", "5", "--fail-if-slower", "3")
    assert proc.returncode == 1
    fail = next(l for l in proc.stdout.splitlines() if l.startswith("FAIL"))
    assert "k/2/float32 (+8.0%)" in fail and "k/1/float32" not in fail
    proc = cli("compare", a, b, "--threshold", "10", "--fail-if-slower", "3")
    assert proc.returncode == 0 and "PASS" in proc.stdout


def test_fail_if_slower_fails_a_nan_or_lost_time_and_json_has_no_nan(tmp_path, cli):
    a = write_run(tmp_path / "A", {"k/1/float32": (1.0, "t"), "k/2/float32": (1.0, "t"), "k/3/float32": (1.0, "t")})
    b = write_run(tmp_path / "B", {"k/1/float32": (float("nan"), "t"), "k/2/float32": (1.0, "t"),
                                   "k/3/float32": (None, "t", "FAILED")})
    proc = cli("compare", a, b, "--fail-if-slower", "5")
    assert proc.returncode == 1
    fail = next(l for l in proc.stdout.splitlines() if l.startswith("FAIL"))
    assert "k/1/float32 (no time)" in fail and "k/3/float32" in fail and "k/2/float32" not in fail
    proc = cli("compare", a, b, "--fail-if-slower", "5", "--format", "json")
    assert proc.returncode == 1 and "NaN" not in proc.stdout and "Infinity" not in proc.stdout
    doc = json.loads(proc.stdout, parse_constant=lambda c: pytest.fail(f"{c} in JSON"))
    assert sorted(doc["gate"]["failed"]) == ["k/1/float32", "k/3/float32"]
    assert {r["point"]: r["status"] for r in doc["rows"]}["k/1/float32"] == "no time"


def test_fail_if_slower_with_nothing_comparable_is_exit_2(tmp_path, cli):
    a = write_run(tmp_path / "A", {"k/1/float32": (1.0, "cudagraph")})
    b = write_run(tmp_path / "B", {"k/1/float32": (5.0, "cuda_event")})
    proc = cli("compare", a, b, "--fail-if-slower", "5")
    assert proc.returncode == 2 and "nothing to gate on" in proc.stderr


def test_threshold_verdicts_and_largest_regressions_first(tmp_path, cli):
    a = write_run(tmp_path / "A", {f"k/{n}/float32": (1.0, "t") for n in (1, 2, 3, 4)})
    b = write_run(tmp_path / "B", {"k/1/float32": (1.02, "t"), "k/2/float32": (1.30, "t"),
                                   "k/3/float32": (1.10, "t"), "k/4/float32": (0.8, "t")})
    doc = json.loads(cli("compare", a, b, "--threshold", "5", "--format", "json").stdout)
    assert [r["point"] for r in doc["rows"]] == ["k/2/float32", "k/3/float32", "k/1/float32", "k/4/float32"]
    assert [r["verdict"] for r in doc["rows"]] == ["SLOWER", "SLOWER", "SAME", "FASTER"]
    s = doc["summary"]
    assert (s["slower"], s["faster"], s["same"]) == (2, 1, 1)
    assert s["threshold_how"] == "set with --threshold"
    assert s["geomean_ratio"] == pytest.approx((1.02 * 1.3 * 1.1 * 0.8) ** 0.25)
    text = cli("compare", a, b, "--threshold", "5").stdout
    assert "largest regressions: k/2/float32 +30.0%, k/3/float32 +10.0%" in text


def test_default_threshold_comes_from_sample_spread():
    def rec(pid, median, samples):
        return PointRecord(point=pid, op="k", shape=(1,), dtype="float32", status="ok", timer="t",
                           median_ms=median, samples=samples)

    noisy = (0.90, 0.95, 1.0, 1.05, 1.10)  # IQR 0.10 around 1.0: 10%
    rows = compare.pair([rec("k/1", 1.0, noisy), rec("k/2", 1.0, noisy)],
                        [rec("k/1", 1.0, (1.0,) * 5), rec("k/2", 1.2, noisy)])
    t = compare.derive_threshold(rows)
    assert t.pct == pytest.approx(10.0) and "2 compared points" in t.how
    quiet = compare.pair([rec("k/1", 1.0, (1.0,) * 5)], [rec("k/1", 1.0, (1.0,) * 5)])
    t = compare.derive_threshold(quiet)
    assert t.pct == compare.THRESHOLD_FLOOR_PCT and "floor" in t.how
    bare = compare.pair([rec("k/1", 1.0, ())], [rec("k/1", 1.0, ())])
    t = compare.derive_threshold(bare)
    assert t.pct == compare.THRESHOLD_FALLBACK_PCT and "too few samples" in t.how


def test_pair_api_is_pure_and_reusable():
    def rec(pid, median, timer="t", status="ok"):
        return PointRecord(point=pid, op="k", shape=(4, 8), dtype="float16", status=status, timer=timer,
                           median_ms=median)

    rows = compare.pair([rec("a", 1.0), rec("b", 2.0), rec("c", 1.0)], [rec("a", 0.5), rec("b", 2.0, "x"), rec("d", 1.0)])
    by = {r.point: r for r in rows}
    assert by["a"].ratio == pytest.approx(0.5) and by["a"].verdict(1.0) == "FASTER"
    assert by["b"].status == compare.TIMER_MISMATCH and not by["b"].comparable
    assert by["c"].status == compare.ONLY_A and by["d"].status == compare.ONLY_B
    summary = compare.summarize(rows, compare.Threshold(1.0, "test"))
    assert summary.compared == 1 and summary.not_compared == {"timer mismatch": 1, "only A": 1, "only B": 1}
    assert compare.gate(rows, 0.0) == []


def test_ceilings_are_used_and_named_when_present(tmp_path, cli):
    a = write_run(tmp_path / "A", {"k/1048576/float32": (0.01, "t")})
    b = write_run(tmp_path / "B", {"k/1048576/float32": (0.01, "t")})
    out = cli("compare", a, b).stdout
    assert "no measured ceilings for 'Test GPU'" in out and "% ceiling" not in out
    env = {"ZLF_CACHE_DIR": str(tmp_path / "cache")}
    path = tmp_path / "cache" / "ceilings" / "Test_GPU.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(Ceilings("Test GPU", "cuda", 2000.0, {"float32": 50.0}, "2026-01-01").to_json()))
    out = cli("compare", a, b, env=env).stdout
    assert "measured ceilings of Test GPU" in out and "pct_ceiling_B" in out
    gbps = 3 * 4 * 1048576 / (0.01e-3) / 1e9
    assert f"{100 * gbps / 2000:.3g}% bw" in out
    doc = json.loads(cli("compare", a, b, "--format", "json", env=env).stdout)
    assert doc["rows"][0]["b"]["pct_bandwidth"] == pytest.approx(100 * gbps / 2000)


def test_ir_column_only_when_both_runs_have_ir(tmp_path, cli):
    a = write_run(tmp_path / "A", {"k/1024/float32": (1.0, "t"), "k/2048/float32": (1.0, "t")})
    b = write_run(tmp_path / "B", {"k/1024/float32": (1.0, "t"), "k/2048/float32": (1.0, "t")})
    (a / "ir").mkdir()
    assert "ir" not in cli("compare", a, b).stdout.splitlines()[3].split()
    if importlib.util.find_spec("zlf_ir_dump") is None:
        pytest.skip("the IR column comes from ir_dump (ir_status), not installed")
    for side, text in ((a, "tt.load\n"), (b, "tt.load\ntt.store\n")):
        (side / "ir" / "1024" / "k_kernel").mkdir(parents=True)
        (side / "ir" / "1024" / "k_kernel" / "w4.ttgir").write_text(text)
        (side / "ir" / "2048" / "k_kernel").mkdir(parents=True)
        (side / "ir" / "2048" / "k_kernel" / "w4.ttgir").write_text("same\n")
    assert all(r["ir"] is None for r in json.loads(cli("compare", a, b, "--format", "json").stdout)["rows"])
    # the column comes from the extension that wrote ir/ (ir_status); core tests run with every
    # extension disabled, so this call turns ir_dump back on
    ir_dump = {"ZLF_EXTENSIONS": "ir_dump", "ZLF_DISABLE": ""}
    doc = json.loads(cli("compare", a, b, "--format", "json", env=ir_dump).stdout)
    assert {r["point"]: r["ir"] for r in doc["rows"]} == {"k/1024/float32": "changed", "k/2048/float32": "identical"}
    assert "ir" in cli("compare", a, b, env=ir_dump).stdout.splitlines()[3].split()


# ----------------------------------------------------------------------------- calibrate
def test_cache_dir_precedence(monkeypatch, tmp_path):
    monkeypatch.delenv("ZLF_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert cache_dir() == Path.home() / ".cache" / "zlf"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "zlf"
    monkeypatch.setenv("ZLF_CACHE_DIR", str(tmp_path / "own"))
    assert cache_dir() == tmp_path / "own"
    saved = save(Ceilings("NVIDIA H200", "cuda", 4000.0, {"bfloat16": 700.0}))
    assert saved == ceilings_path("NVIDIA H200") == tmp_path / "own" / "ceilings" / "NVIDIA_H200.json"


def test_calibrate_on_cpu_stores_ceilings_keyed_by_device(tmp_path):
    none = zlf("calibrate", "--show", cwd=tmp_path)
    assert none.returncode == 2 and "no stored ceilings for" in none.stderr and "run `zlf calibrate` first" in none.stderr
    proc = zlf("calibrate", "--copy-mib", "8", "--matmul-n", "128", "--reps", "3", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    stored = Path(proc.stdout.split("saved: ")[1].strip())
    before = stored.read_bytes()
    shown = zlf("calibrate", "--show", "--format", "json", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    doc = json.loads(shown.stdout)
    assert doc["backend"] == "cpu" and doc["bandwidth_GB_s"] > 0 and doc["tflops"]["float32"] > 0
    assert Path(doc["path"]) == stored and stored.parent == tmp_path / "cache" / "ceilings" and doc["device_name"]
    # --show prints what is stored, as its help says: no new measurement, nothing overwritten
    assert json.loads(before)["bandwidth_GB_s"] == doc["bandwidth_GB_s"] and stored.read_bytes() == before


def test_markers_of_each_side_are_shown(tmp_path, cli):
    a = write_run(tmp_path / "A", {"k/1024/float32": (1.0, "cudagraph")})
    b = tmp_path / "B"
    b.mkdir()
    rundir = RunDir(b)
    rundir.write_meta({"device_name": "Test GPU", "status": "complete"})
    line = "BENCHMARK_DIRECT_NO_CUDAGRAPH op=k point=k/1024/float32 reason=item"
    rundir.append(PointRecord(point="k/1024/float32", op="k", shape=(1024,), dtype="float32", status="ok",
                              timer="cuda_event", median_ms=2.0, markers=(line,), fallback_reason="item"))
    out = cli("compare", a, b).stdout
    row = next(l for l in out.splitlines() if l.startswith("k/1024/float32"))
    assert "timer mismatch" in row and "B: BENCHMARK_DIRECT_NO_CUDAGRAPH" in row
    rows = list(csv.DictReader(io.StringIO(cli("compare", a, b, "--format", "csv").stdout)))
    assert rows[0]["markers_B"] == "BENCHMARK_DIRECT_NO_CUDAGRAPH" and rows[0]["markers_A"] == ""
