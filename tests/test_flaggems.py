"""The flaggems extension against two FlagGems-shaped fixture checkouts (both harness layouts)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conftest import read_records, run_dir_from

DATA = Path(__file__).resolve().parent / "data"
V5 = DATA / "flaggems_fixture_v5"
BASE = DATA / "flaggems_fixture_base"
FAST = ("--warmup-ms", "1", "--rep-ms", "3")


def flaggems_run(zlf_cli, checkout, *args, check_rc=None, env=None):
    return zlf_cli("run", "--ext", "flaggems", "--ext", "shapes", "--ext", "seed", "--flaggems-dir", checkout,
                   *FAST, *args, check_rc=check_rc, env=env)


def by_point(records) -> dict:
    return {r["point"]: r for r in records}


def test_shape_injection_for_every_kind_of_benchmark_class(zlf_cli, tmp_path):
    shapes = tmp_path / "shapes.yaml"
    shapes.write_text(
        "UnaryReductionBenchmark: &red\n  shapes: [[8, 16]]\n"   # a class name of the MRO, with an anchor
        "avg_pool2d:\n  shapes: [[1, 2, 8, 8]]\n"                 # shapes hard-coded in get_input_iter
        "SoftmaxTopKBenchmark:\n  shapes: [[16, 8, 2]]\n"        # set_shapes overridden, 2 inputs per shape
        "upsample_bicubic2d_aa_backward:\n  shapes: [[1, 1, 4, 4, 8, 8]]\n"  # special inputs: bespoke
        "unused: *red\n")
    proc = flaggems_run(zlf_cli, V5, "softmax:reduction_perf", "avg_pool2d", "softmax_topk:special_perf",
                        "upsample_bicubic2d_aa_backward", "--shapes", shapes, "--dtypes", "float32", check_rc=0)
    run = run_dir_from(proc.stdout, tmp_path)
    recs = by_point(read_records(run))
    assert sorted(recs) == [
        "avg_pool2d/1x2x8x8/float32", "softmax/8x16/float32",
        "softmax_topk/16x8x2/float32/v0", "softmax_topk/16x8x2/float32/v1",
        "upsample_bicubic2d_aa_backward/1x1x4x4x8x8/float32"]
    kinds = {r["op"]: r["extra"]["flaggems"]["kind"] for r in recs.values()}
    assert kinds == {"softmax": "yaml", "avg_pool2d": "iter_hardcoded", "softmax_topk": "set_shapes",
                     "upsample_bicubic2d_aa_backward": "bespoke"}
    for r in recs.values():
        assert r["status"] == "ok" and r["median_ms"] > 0 and r["extra"]["torch_ms"] > 0
        assert r["extra"]["speedup"] > 0 and "inputs_fingerprint" in r["extra"]
    assert recs["softmax/8x16/float32"]["extra"]["size_detail"] == "[torch.Size([8, 16]), 1]"
    assert recs["softmax/8x16/float32"]["gbps"] > 0
    meta = json.loads((run / "meta.json").read_text())
    assert meta["flaggems"]["layout"] == "v5"
    assert meta["flaggems"]["ops"]["softmax"]["mro"][:2] == ["UnaryReductionBenchmark", "Benchmark"]
    table = (run / "flaggems_results.txt").read_text()
    assert "Operator: softmax  Performance Test (dtype=torch.float32, mode=kernel,level=core)" in table
    assert "SUCCESS" in table


def test_builtin_shapes_of_each_kind_and_failed_rows_v5(zlf_cli, tmp_path):
    proc = flaggems_run(zlf_cli, V5, "flaky_exp", "avg_pool2d", "mm", "--dtypes", "float32", check_rc=1)
    recs = by_point(read_records(run_dir_from(proc.stdout, tmp_path)))
    # flaky_exp: core_shapes.yaml by op name; the FlagGems kernel fails on the large shape only
    failed = recs["flaky_exp/512x512/float32"]
    assert failed["status"] == "FAILED"
    assert "fixture gems kernel: out of resources for 262144 elements" in failed["error"]
    assert recs["flaky_exp/64x64/float32"]["status"] == "ok"
    assert "avg_pool2d/2x3x32x32/float32" in recs and "avg_pool2d/4x8x16x16/float32" in recs
    assert recs["mm/1x16x16x16/float32"]["tflops"] > 0  # BlasBenchmark key in core_shapes.yaml
    table = (run_dir_from(proc.stdout, tmp_path) / "flaggems_results.txt").read_text()
    assert "FAILED" in table and "out of resources" in table


def test_base_layout_comprehensive_variants_backward_and_failed_rows(zlf_cli, tmp_path):
    proc = flaggems_run(zlf_cli, BASE, "mm", "softmax_backward", "flaky_exp", "--dtypes", "float32",
                        "--flaggems-level", "comprehensive", check_rc=1)
    run = run_dir_from(proc.stdout, tmp_path)
    recs = by_point(read_records(run))
    assert {"mm/1x16x16x16/float32/v0", "mm/1x16x16x16/float32/v1"} <= set(recs)  # row- and column-major B
    assert recs["softmax_backward/1024x256/float32"]["status"] == "ok"  # set_more_shapes at comprehensive
    assert recs["flaky_exp/1000x256/float32"]["status"] == "FAILED"
    meta = json.loads((run / "meta.json").read_text())
    assert meta["flaggems"]["layout"] == "base" and meta["flaggems"]["level"] == "comprehensive"


def test_every_point_is_checked_against_the_torch_op(zlf_cli, tmp_path):
    ops = ("wrong_exp", "lazy_abs", "log", "max_dim", "add_", "rand_like")
    proc = flaggems_run(zlf_cli, V5, *ops, "--dtypes", "float32", check_rc=1)
    recs = by_point(read_records(run_dir_from(proc.stdout, tmp_path)))
    first = {r["op"]: r for r in reversed(list(recs.values()))}
    # a FlagGems kernel 1% off, and one that leaves half of its out= buffer unwritten
    assert first["wrong_exp"]["status"] == "FAILED"
    assert "wrong result (output 0): relative error 0.01 > 0.0001" in first["wrong_exp"]["error"]
    assert first["lazy_abs"]["status"] == "FAILED" and "NaN or unwritten" in first["lazy_abs"]["error"]
    # NaN on both sides (log of negatives), (values, indices), an in-place op: compared, ok
    for op in ("log", "max_dim", "add_"):
        assert first[op]["status"] == "ok" and first[op]["max_rel_err"] == 0.0, first[op]
        assert "outside FlagGems' dispatch: 1 tensor(s) compared" in first[op]["extra"]["check"]
    assert first["rand_like"]["status"] == "ok" and first["rand_like"]["max_rel_err"] is None
    assert first["rand_like"]["extra"]["check"].startswith("not checked: rand_like has random")
    assert "wrong result" in (run_dir_from(proc.stdout, tmp_path) / "flaggems_results.txt").read_text()
    # FlagGems' own registration warnings (root logger, every use_gems()): in run.log once, not on the terminal
    assert "Skipped registering operator" not in proc.stdout + proc.stderr
    log = (run_dir_from(proc.stdout, tmp_path) / "run.log").read_text()
    assert log.count("Skipped registering operator: fixture ne_.Scalar listed twice") == 1
    assert re.search(r"registering its kernels \((\d+)x\)", log)
    # a looser tolerance passes the 1% error; the reference itself stays on
    proc = flaggems_run(zlf_cli, V5, "wrong_exp", "--dtypes", "float32", "--flaggems-tolerance", "float32=0.02",
                        check_rc=0)
    assert all(r["max_rel_err"] > 0.009 for r in read_records(run_dir_from(proc.stdout, tmp_path)))


def test_seeds_apply_and_flagtune_passes_through(zlf_cli, tmp_path):
    fps = []
    for name in ("a", "b"):
        proc = flaggems_run(zlf_cli, BASE, "softmax", "--dtypes", "float32", "--name", name,
                            "--flaggems-flagtune", "1", check_rc=0)
        run = run_dir_from(proc.stdout, tmp_path)
        fps.append([r["extra"]["inputs_fingerprint"] for r in read_records(run)])
        meta = json.loads((run / "meta.json").read_text())
        assert meta["flaggems"]["USE_FLAGTUNE"] == "1" and meta["environment"]["USE_FLAGTUNE"] == "1"
    assert fps[0] == fps[1] and len(set(fps[0])) == len(fps[0])


@pytest.mark.parametrize("args, expected", [
    (["--flaggems-dir", "nowhere", "softmax"], "not found: looked for a directory holding"),
    (["--flaggems-dir", str(DATA), "softmax"], "is not a supported FlagGems checkout: looked for"),
    (["--flaggems-dir", str(V5), "no_such_op"], "unknown FlagGems op 'no_such_op': looked for a test marked"),
    (["--flaggems-dir", str(V5), "softmax:no_such_file"], "FlagGems op file 'no_such_file' not found: looked for"),
    (["--flaggems-dir", str(BASE), "mm:softmax"], "unknown FlagGems op 'mm': looked for"),
    (["--flaggems-dir", str(V5), "never_here"], "FlagGems skips every test of op 'never_here' here"),
    (["--flaggems-dir", str(V5), "softmax_topk", "--dtypes", "float16"], "can't be supported"),
    (["--flaggems-dir", str(V5), "softmax", "--flaggems-mode", "cudagraph"], "add --ext cudagraph"),
    (["softmax:reduction_perf"], "no FlagGems checkout given"),
    (["--flaggems-dir", str(V5), "softmax", "--flaggems-tolerance", "float32"], "expected DTYPE=REL"),
])
def test_usage_errors_are_one_line_exit_2(zlf_cli, tmp_path, args, expected):
    proc = zlf_cli("run", "--ext", "flaggems", *args, env={"FLAGGEMS_DIR": ""})
    assert proc.returncode == 2, proc.stderr
    assert expected in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists()


def test_checkout_from_environment(zlf_cli, tmp_path):
    proc = zlf_cli("run", "--ext", "flaggems", *FAST, "avg_pool2d", "--dtype", "float32",
                   env={"FLAGGEMS_DIR": str(BASE)}, check_rc=0)
    assert "avg_pool2d/2x3x32x32/float32" in proc.stdout
