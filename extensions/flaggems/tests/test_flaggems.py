"""The flaggems extension against two FlagGems-shaped fixture checkouts (both harness layouts)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from zlf.testing import read_records, run_dir_from

DATA = Path(__file__).resolve().parent / "data"
V5 = DATA / "flaggems_fixture_v5"
BASE = DATA / "flaggems_fixture_base"
FAST = ("--warmup-ms", "1", "--rep-ms", "3")


def flaggems_run(zlf_cli, checkout, *args, check_rc=None, env=None, exts=()):
    """zlf run with flaggems and the extensions ``exts`` only (see :func:`needs`)."""
    with_exts = [a for name in exts for a in ("--ext", name)]
    return zlf_cli("run", "--ext", "flaggems", *with_exts, "--flaggems-dir", checkout,
                   *FAST, *args, check_rc=check_rc, env=env)


def needs(*names) -> tuple:
    """The other extensions a test truly needs (``--shapes FILE`` is the shapes extension's, an
    inputs fingerprint the seed extension's): skipped where one is not installed, so these tests
    pass with zlf and zlf-flaggems alone."""
    for name in names:
        pytest.importorskip(f"zlf_{name}", reason=f"needs the {name} extension (zlf-{name}) installed")
    return names


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
                        "upsample_bicubic2d_aa_backward", "--shapes", shapes, "--dtype", "float32", check_rc=0,
                        exts=needs("shapes", "seed"))
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


def test_nested_shape_entries_become_flat_points_and_are_rebuilt(zlf_cli, tmp_path):
    """((3, 8), (1, 2)) -- an input shape, then pads -- is point 3x8x1x2; the benchmark gets the
    nested entry back, also for a shape from a shape file with the same number of ints."""
    proc = flaggems_run(zlf_cli, V5, "constant_pad", "--dtype", "float32", check_rc=0)
    run = run_dir_from(proc.stdout, tmp_path)
    recs = by_point(read_records(run))
    # ((2, 3, 4), (0, 2)): its 0 is no size, so it stays in the layout; two layouts of 4 ints: l0, l1
    assert sorted(recs) == ["constant_pad/2x3x4x2/float32/l1", "constant_pad/2x4x6x1x1/float32",
                            "constant_pad/3x8x1x2/float32/l0"]
    assert all(r["status"] == "ok" and r["max_rel_err"] == 0.0 for r in recs.values())
    assert recs["constant_pad/3x8x1x2/float32/l0"]["extra"]["size_detail"] == "[torch.Size([3, 8]), [1, 2]]"
    assert recs["constant_pad/2x3x4x2/float32/l1"]["extra"]["size_detail"] == "[torch.Size([2, 3, 4]), [0, 2]]"
    op = json.loads((run / "meta.json").read_text())["flaggems"]["ops"]["constant_pad"]
    assert op["nested_layouts"] == {"4": {"l0": "[2], [2]", "l1": "[3], [0, n]"}, "5": {"": "[3], [2]"}}
    assert op["dropped_shape_entries"] == []


def test_a_shape_files_nested_shapes_take_the_builtin_layouts(zlf_cli, tmp_path):
    shapes = tmp_path / "pad.yaml"
    shapes.write_text("ConstantPadBenchmark:\n  shapes: [[4, 16, 2, 3], [2, 4, 6, 3, 3]]\n")
    proc = flaggems_run(zlf_cli, V5, "constant_pad", "--shapes", shapes, "--dtype", "float32", check_rc=0,
                        exts=needs("shapes"))
    recs = by_point(read_records(run_dir_from(proc.stdout, tmp_path)))
    assert all(r["status"] == "ok" for r in recs.values())
    # a shape file's shape runs every layout of its number of ints
    assert recs["constant_pad/4x16x2x3/float32/l0"]["extra"]["size_detail"] == "[torch.Size([4, 16]), [2, 3]]"
    assert recs["constant_pad/4x16x2x3/float32/l1"]["extra"]["size_detail"] == "[torch.Size([4, 16, 2]), [0, 3]]"
    assert recs["constant_pad/2x4x6x3x3/float32"]["extra"]["size_detail"] == "[torch.Size([2, 4, 6]), [3, 3]]"


def test_dict_entries_are_flattened_in_key_order(zlf_cli, tmp_path):
    proc = flaggems_run(zlf_cli, V5, "chunk_dict", "--dtype", "float32", check_rc=0)
    run = run_dir_from(proc.stdout, tmp_path)
    recs = by_point(read_records(run))
    assert sorted(recs) == ["chunk_dict/4x8x2/float32", "chunk_dict/8x12x3/float32"]
    assert all(r["status"] == "ok" for r in recs.values())
    assert recs["chunk_dict/8x12x3/float32"]["extra"]["size_detail"] == "([torch.Size([8, 12]), 3], {'dim': -1})"
    op = json.loads((run / "meta.json").read_text())["flaggems"]["ops"]["chunk_dict"]
    assert op["nested_layouts"] == {"3": {"": "{rows: n, cols: n, chunks: n}"}}


def test_nested_entries_with_differing_constants_become_labelled_variants(zlf_cli, tmp_path):
    """(shape, pads, "constant") and (shape, pads, "replicate") over the same sizes: two points
    of one shape, labelled by the constant; a user's shape of that many ints gets both."""
    proc = flaggems_run(zlf_cli, V5, "pad_mode", "--dtype", "float32", check_rc=0)
    run = run_dir_from(proc.stdout, tmp_path)
    recs = by_point(read_records(run))
    assert sorted(recs) == ["pad_mode/2x4x6x1x1/float32/constant", "pad_mode/3x8x1x2/float32/constant",
                            "pad_mode/3x8x1x2/float32/replicate"]
    assert all(r["status"] == "ok" for r in recs.values())
    # an entry the benchmark yields no input for is no point, and run.log says so
    assert ("pad_mode (PadModeBenchmark) yields no input for 2x4x6x1x1/float32/replicate: no point"
            in (run / "run.log").read_text())
    assert "{'mode': 'replicate'}" in recs["pad_mode/3x8x1x2/float32/replicate"]["extra"]["size_detail"]
    assert "{'mode': 'constant'}" in recs["pad_mode/3x8x1x2/float32/constant"]["extra"]["size_detail"]
    op = json.loads((run / "meta.json").read_text())["flaggems"]["ops"]["pad_mode"]
    assert op["nested_layouts"]["4"] == {"constant": "[2], [2], 'constant'", "replicate": "[2], [2], 'replicate'"}


def test_a_shape_files_shape_runs_every_labelled_layout(zlf_cli, tmp_path):
    shapes = tmp_path / "pad.yaml"
    shapes.write_text("pad_mode:\n  shapes: [[4, 16, 2, 3]]\n")
    proc = flaggems_run(zlf_cli, V5, "pad_mode", "--shapes", shapes, "--dtype", "float32", check_rc=0,
                        exts=needs("shapes"))
    recs = by_point(read_records(run_dir_from(proc.stdout, tmp_path)))
    assert sorted(recs) == ["pad_mode/4x16x2x3/float32/constant", "pad_mode/4x16x2x3/float32/replicate"]


def test_a_class_wrapping_its_parents_iterator_takes_its_parents_shapes(zlf_cli, tmp_path):
    """NegOutBenchmark.get_input_iter wraps super()'s (which walks self.shapes) and has no
    input_fn: it is a yaml class, not one without shapes; its out= buffer is poisoned."""
    proc = flaggems_run(zlf_cli, V5, "neg_out", "--dtype", "float32", check_rc=0)
    run = run_dir_from(proc.stdout, tmp_path)
    (rec,) = read_records(run)
    assert rec["point"] == "neg_out/16x32/float32" and rec["status"] == "ok"
    assert rec["extra"]["flaggems"]["kind"] == "yaml"
    assert "1 tensor(s) compared" in rec["extra"]["check"]


def test_a_class_fixing_its_own_inputs_gives_one_point_per_input(zlf_cli, tmp_path):
    """No self.shapes, no input_fn: each yielded input is a point under its first tensor's shape
    (variants when several share one); a shape file cannot move them: one line, exit 2."""
    proc = flaggems_run(zlf_cli, V5, "triu_fixed", "--dtype", "float32", check_rc=0)
    run = run_dir_from(proc.stdout, tmp_path)
    recs = by_point(read_records(run))
    assert sorted(recs) == ["triu_fixed/4x4/float32/v0", "triu_fixed/4x4/float32/v1",
                            "triu_fixed/8x6/float32/v0", "triu_fixed/8x6/float32/v1"]
    assert all(r["status"] == "ok" and r["extra"]["flaggems"]["kind"] == "fixed" for r in recs.values())
    assert "{'diagonal': 1}" in recs["triu_fixed/8x6/float32/v1"]["extra"]["size_detail"]
    assert "torch.Size([8, 6])" in recs["triu_fixed/8x6/float32/v1"]["extra"]["size_detail"]


def test_a_class_fixing_its_own_inputs_refuses_a_shape_file(zlf_cli, tmp_path):
    shapes = tmp_path / "triu.yaml"
    shapes.write_text("triu_fixed:\n  shapes: [[16, 16]]\n")
    proc = flaggems_run(zlf_cli, V5, "triu_fixed", "--shapes", shapes, "--dtype", "float32", check_rc=2,
                        exts=needs("shapes"))
    assert "fixes its own inputs; shape 16x16 is not one of them (4x4, 8x6)" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_builtin_shapes_of_each_kind_and_failed_rows_v5(zlf_cli, tmp_path):
    proc = flaggems_run(zlf_cli, V5, "flaky_exp", "avg_pool2d", "mm", "--dtype", "float32", check_rc=1)
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
    proc = flaggems_run(zlf_cli, BASE, "mm", "softmax_backward", "flaky_exp", "--dtype", "float32",
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
    proc = flaggems_run(zlf_cli, V5, *ops, "--dtype", "float32", check_rc=1)
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
    proc = flaggems_run(zlf_cli, V5, "wrong_exp", "--dtype", "float32", "--flaggems-tolerance", "float32=0.02",
                        check_rc=0)
    assert all(r["max_rel_err"] > 0.009 for r in read_records(run_dir_from(proc.stdout, tmp_path)))


def test_seeds_apply_and_flagtune_passes_through(zlf_cli, tmp_path):
    fps = []
    for name in ("a", "b"):
        proc = flaggems_run(zlf_cli, BASE, "softmax", "--dtype", "float32", "--name", name,
                            "--flaggems-flagtune", "1", check_rc=0, exts=needs("seed"))
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
    (["--flaggems-dir", str(V5), "softmax_topk", "--dtype", "float16"], "can't be supported"),
    (["--flaggems-dir", str(V5), "softmax", "--flaggems-mode", "cudagraph"], "add --ext cudagraph"),
    (["softmax:reduction_perf"], "no FlagGems checkout given"),
    (["--flaggems-dir", str(V5), "softmax", "--flaggems-tolerance", "float32"], "expected DTYPE=REL"),
    (["--flaggems-dir", str(BASE), "needs_capsys"], "takes the pytest fixture 'capsys', which zlf does not provide"),
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


def test_counting_inputs_on_meta_makes_no_cpu_tensor(zlf_cli):
    """FlagGems' integer inputs are made on the CPU then moved (bitwise_left_shift): counting a
    point's inputs must not build them (a 2**30-element shape took minutes before any point)."""
    import sys

    proc = zlf_cli.inprocess("ops", "--ext", "flaggems", "--flaggems-dir", BASE, "cpu_made_shift", check_rc=0)
    assert "cpu_made_shift" in proc.stdout
    made_on = sys.modules["benchmark.test_cpu_made_shift"].MADE_ON
    assert made_on and set(made_on) == {"meta"}, made_on
    proc = flaggems_run(zlf_cli, BASE, "cpu_made_shift", check_rc=0)
    assert set(made_on) == {"meta"}  # the run itself was a child process: real inputs there


def test_fractional_max_pooling_is_random_output_not_compared(zlf_cli, tmp_path):
    """Its pooling regions are drawn per call, torch's and FlagGems' each their own: the check
    would fail every point (as fractional_max_pool2d's first point did on the H200)."""
    proc = flaggems_run(zlf_cli, BASE, "fractional_max_pool2d", "--dtype", "float32", check_rc=0)
    recs = read_records(run_dir_from(proc.stdout, tmp_path))
    assert recs and all(r["status"] == "ok" and r["max_rel_err"] is None for r in recs)
    assert all(r["extra"]["check"].startswith("not checked: fractional_max_pool2d has random") for r in recs)


def test_max_shapes_keeps_the_smallest_builtin_shapes(zlf_cli, tmp_path):
    proc = flaggems_run(zlf_cli, BASE, "flaky_exp", "--dtype", "float32", "--flaggems-max-shapes", "1", check_rc=0)
    assert [r["point"] for r in read_records(run_dir_from(proc.stdout, tmp_path))] == ["flaky_exp/64x64/float32"]
    proc = flaggems_run(zlf_cli, BASE, "flaky_exp", "--flaggems-max-shapes", "0", check_rc=2)
    assert proc.stderr.strip().endswith("--flaggems-max-shapes 0: expected a whole number of shapes from 1 up to 1000000 (see zlf run --help)")
    assert len(proc.stderr.strip().splitlines()) == 1


def test_a_reference_mismatch_is_named_only_when_nearly_every_point_is_far_off():
    from zlf.records import PointRecord
    from zlf_flaggems.plugin import reference_mismatch

    def rec(i, err, tol=1e-4, unchecked=False):
        text = f"wrong result (output 0): relative error {err:g} > {tol:g}" if err is not None else None
        return PointRecord(point=f"rope/{i}/float32", op="rope", shape=(i,), dtype="float32",
                           status="ok" if unchecked or text is None else "FAILED",
                           error=None if unchecked else text, unchecked=text if unchecked else None)

    far = [rec(i, 1.19) for i in range(9)]
    assert reference_mismatch(far + [rec(9, None)]) == (
        "the benchmark's reference and the FlagGems op disagree (rel. error 1.19 on 9/10 points)")
    assert reference_mismatch(far[:8] + [rec(8, None), rec(9, None)]) is None       # 80 %: a kernel bug, say
    assert reference_mismatch([rec(i, 5e-3) for i in range(10)]) is None            # 50x the tolerance only
    assert reference_mismatch([rec(i, 1.19, unchecked=True) for i in range(3)]).endswith("on 3/3 points)")
    assert reference_mismatch([]) is None


def test_tests_building_one_op_name_run_as_one_op_told_apart_by_dtype_or_label(zlf_cli, tmp_path):
    """FlagGems v5.3.4's searchsorted (a dtype parameter), upsample_nearest_exact2d (a test and its
    _out twin) and index_put_impl (acc_false / acc_true) build one op name in two tests: zlf
    refused them ("built by both"). Disjoint dtypes keep plain point ids; otherwise each test's
    points carry the part of its name the others do not share."""
    proc = flaggems_run(zlf_cli, BASE, "sorted_search", "doubled", "put_impl", check_rc=0)
    run = run_dir_from(proc.stdout, tmp_path)
    recs = by_point(read_records(run))
    assert sorted(p for p in recs if p.startswith("sorted_search")) == [
        "sorted_search/64x32/float32", "sorted_search/64x32/int32"]
    assert sorted(p for p in recs if p.startswith("doubled")) == [
        f"doubled/2x3x4x4/{d}/{lab}" for d in ("bfloat16", "float16", "float32") for lab in ("base", "out")]
    assert sorted(p for p in recs if p.startswith("put_impl")) == [
        f"put_impl/{s}/float32/{lab}" for s in ("16x32x32", "64x64") for lab in ("acc_false", "acc_true")]
    for r in recs.values():
        assert r["status"] == "ok", (r["point"], r.get("error"))
    tests = {p: r["extra"]["flaggems"]["test"] for p, r in recs.items()}
    assert tests["sorted_search/64x32/int32"] == "test_twin_tests.py::test_sorted_search[dtype1]"
    assert tests["doubled/2x3x4x4/float32/out"] == "test_twin_tests.py::test_doubled_out"
    assert tests["put_impl/64x64/float32/acc_true"] == "test_twin_tests.py::test_put_impl_acc_true"
    assert "torch doubled outside" in recs["doubled/2x3x4x4/float32/out"]["extra"]["check"]
    ops = json.loads((run / "meta.json").read_text())["flaggems"]["ops"]
    assert ops["put_impl"]["twins"]["test_twin_tests.py::test_put_impl_acc_false"]["label"] == "acc_false"
    assert ops["sorted_search"]["twins"]["test_twin_tests.py::test_sorted_search[dtype0]"]["label"] == ""


def test_complex128_points_run_and_are_checked(zlf_cli, tmp_path):
    """FlagGems v5.3.4's cholesky_solve_out was refused: "unknown dtype 'complex128'"."""
    proc = flaggems_run(zlf_cli, BASE, "complex_solve_out", check_rc=0)
    recs = by_point(read_records(run_dir_from(proc.stdout, tmp_path)))
    assert sorted(recs) == [f"complex_solve_out/4x8x8/{d}" for d in ("complex128", "complex64", "float32", "float64")]
    for r in recs.values():
        assert r["status"] == "ok" and r["max_rel_err"] == 0.0, r


def test_tests_taking_pytests_monkeypatch_get_one_held_for_the_run_then_undone(zlf_cli, tmp_path):
    """FlagGems v5.3.4's get_scheduler_metadata takes ``monkeypatch``; zlf passed None and the
    test failed before measuring ("'NoneType' object has no attribute 'setenv'")."""
    import os

    proc = zlf_cli.inprocess("run", "--ext", "flaggems", "--flaggems-dir", BASE, *FAST, "env_scaled", check_rc=0)
    recs = read_records(run_dir_from(proc.stdout, tmp_path))
    assert recs and all(r["status"] == "ok" for r in recs), recs
    assert "ZLF_FIXTURE_SCALE" not in os.environ


def test_extra_outputs_of_the_flaggems_op_are_left_out_of_the_check_and_said(zlf_cli, tmp_path):
    """FlagGems v5.3.4's cudnn_attention_forward FAILED: "wrong result: 3 outputs, reference has 2"."""
    proc = flaggems_run(zlf_cli, BASE, "extra_outputs", check_rc=0)
    recs = read_records(run_dir_from(proc.stdout, tmp_path))
    assert recs and all(r["status"] == "ok" for r in recs), recs
    for r in recs:
        assert r["extra"]["check"].endswith("2 tensor(s) compared; compared 2 of 3 outputs (the reference returns 2)")


def test_an_input_function_running_flaggems_kernels_is_never_counted_on_meta_tensors(zlf_cli, tmp_path):
    """FlagGems v5.3.4's max_pool2d_with_indices_backward (and fractional_max_pool2d_backward,
    dispatch_fused_moe_kernel) crashed while zlf planned: counting its inputs on the meta device
    ran the FlagGems forward kernel on meta tensors ("an illegal memory access")."""
    proc = flaggems_run(zlf_cli, BASE, "max_pool2d_with_indices_backward", "fixed_pool", check_rc=0)
    recs = read_records(run_dir_from(proc.stdout, tmp_path))
    assert [r["point"] for r in recs] == ["max_pool2d_with_indices_backward/2x3x8x8/float32",
                                          "fixed_pool/1x2x2x2/float32", "fixed_pool/2x2x4x4/float32"]
    assert all(r["status"] == "ok" and r["max_rel_err"] == 0.0 for r in recs), recs


def test_fp16_results_in_the_subnormal_range_are_compared_at_the_formats_resolution(zlf_cli, tmp_path):
    """FlagGems v5.3.4's fp16 mse_loss_backward FAILED at 1024x1024 ("relative error 0.0099 >
    0.002"): its values (~4e-6) are float16 subnormals, where one step is 6e-8; rounding once or
    per intermediate differs by 1-3 steps on a fifth of the elements."""
    proc = flaggems_run(zlf_cli, BASE, "mse_loss_backward", check_rc=0)
    recs = read_records(run_dir_from(proc.stdout, tmp_path))
    assert [r["point"] for r in recs] == ["mse_loss_backward/1024x1024/float16"]
    r = recs[0]
    assert r["status"] == "ok" and r["max_rel_err"] < 2e-3, r
    assert "subnormal element(s) within 4 steps of the smallest subnormal counted equal" in r["extra"]["check"]


def test_subnormal_evening_leaves_a_wrong_result_wrong():
    import torch

    from zlf_flaggems.adapter import _subnormal_equal

    tiny = torch.finfo(torch.float16).smallest_normal
    expected = torch.full((8,), tiny / 4, dtype=torch.float16)
    close = expected + torch.finfo(torch.float16).smallest_normal * torch.finfo(torch.float16).eps
    assert _subnormal_equal(close, expected)[2] == 8
    far = expected * 3  # 2x the value: 100 % off, not a rounding step
    assert _subnormal_equal(far, expected)[2] == 0
    normal = torch.ones(8, dtype=torch.float16)
    assert _subnormal_equal(normal + 0.001, normal)[2] == 0


def test_twin_labels_of_v534s_tests():
    """The labels zlf gives v5.3.4's tests that share an op name (names read from the checkout)."""
    from types import SimpleNamespace as NS

    from zlf_flaggems.twins import labels

    def member(op, test, ident="", dtypes=("float16", "float32", "bfloat16")):
        fn = NS(__name__=test)
        return NS(dtypes=list(dtypes), bench=NS(op_name=op), case=NS(function=fn, ident=ident))

    scatter = [member("scatter_reduce_", f"test_scatter_reduce_two_inplace_{r}") for r in ("sum", "amax", "amin", "mean")]
    assert labels(scatter) == ["sum", "amax", "amin", "mean"]
    assert labels([member("index_put_impl", "test_index_put_impl_acc_false", dtypes=["float16"]),
                   member("index_put_impl", "test_index_put_impl_acc_true", dtypes=["float16"])]) == ["acc_false", "acc_true"]
    assert labels([member("searchsorted", "test_searchsorted", "dtype0", ["float16"]),
                   member("searchsorted", "test_searchsorted", "dtype1", ["float32"])]) == ["", ""]
    assert labels([member("up", "test_up"), member("up", "test_up_out")]) == ["base", "out"]


def test_a_compile_allowance_lets_a_slow_first_call_finish(zlf_cli, tmp_path):
    """upsample_bicubic2d_aa_backward on the H200 spent 67.8 s compiling one point under a 60 s
    point limit. --flaggems-compile-time-limit gives a point's first FlagGems call more time;
    without it the same point runs past --time-limit, named as a limit during compile."""
    args = ("slow_first_call", "--time-limit", "1")
    proc = flaggems_run(zlf_cli, BASE, *args, "--flaggems-compile-time-limit", "20", check_rc=0)
    run = run_dir_from(proc.stdout, tmp_path)
    recs = read_records(run)
    assert recs and all(r["status"] == "ok" for r in recs), recs
    assert json.loads((run / "meta.json").read_text())["flaggems"]["compile_time_limit_s"] == 20.0
    proc = flaggems_run(zlf_cli, BASE, *args, "--name", "nolimit", check_rc=1)
    recs = read_records(run_dir_from(proc.stdout, tmp_path))
    assert recs and all(r["status"] == "FAILED" for r in recs)
    assert recs[0]["error"] == ("time limit during compile (the point's first FlagGems call: Triton compiles, "
                                "FlagGems tunes): no result within 1 s (--time-limit)")


def test_a_dtype_picks_the_test_of_a_dtype_parameter(zlf_cli, tmp_path):
    """test_searchsorted[dtype0] takes float16 only: --dtype int32 must run [dtypeN] of int32,
    not fail on [dtype0] ("can't be supported")."""
    proc = flaggems_run(zlf_cli, BASE, "sorted_search", "--dtype", "int32", check_rc=0)
    recs = read_records(run_dir_from(proc.stdout, tmp_path))
    assert [r["point"] for r in recs] == ["sorted_search/64x32/int32"] and recs[0]["status"] == "ok"
    proc = flaggems_run(zlf_cli, BASE, "sorted_search", "--dtype", "float16", check_rc=2)
    assert "can't be supported" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_flushed_flaggems_points_are_never_cycled_through_input_copies(zlf_cli, tmp_path):
    """A FlagGems call object holds FlagGems' own arguments: copies of the tensors beside it would
    be made (up to 1 GiB a point) and said, yet every call would still run on the originals."""
    proc = flaggems_run(zlf_cli, V5, "log", "--dtype", "float32", "--flush-l2", "--input-copies", "4", check_rc=0)
    recs = read_records(run_dir_from(proc.stdout, tmp_path))
    assert recs and all(r["status"] == "ok" and "input_copies" not in r["extra"] for r in recs)
    proc = zlf_cli("run", "softmax", *FAST, "--flush-l2", "--input-copies", "4", check_rc=0)  # a plain op: cycled
    assert all(r["extra"]["input_copies"] == {"sets": 4} for r in read_records(run_dir_from(proc.stdout, tmp_path)))
