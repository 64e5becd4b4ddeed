"""Core on a real GPU: the built-in suite passes its reference checks on the cuda backend."""
import json

import pytest

from conftest import read_records, run_dir_from

pytestmark = pytest.mark.gpu


def test_builtin_suite_on_cuda(zlf_cli, tmp_path):
    proc = zlf_cli("run", "--ext", "seed", "--rep-ms", "10", check_rc=0)
    run = run_dir_from(proc.stdout, tmp_path)
    records = read_records(run)
    assert len(records) >= 20 and all(r["status"] == "ok" for r in records)
    assert {r["timer"] for r in records} == {"cuda_event"}
    meta = json.loads((run / "meta.json").read_text())
    assert meta["backend"] == "cuda" and meta["device_name"]
    assert "driver_version" in meta["fingerprint"] or "cuda_runtime" in meta["fingerprint"]


def test_direct_timer_on_cuda_matches_do_bench_for_a_large_kernel():
    import torch
    import triton

    from zlf.backends import CudaBackend
    from zlf.ops.builtin import make_ops
    from zlf.timing import time_direct

    backend = CudaBackend(0)
    backend.setup()
    op = make_ops()["add"]
    inputs = op.make_inputs((1 << 26,), "float32", backend.device)
    fn = lambda: op.fn(*inputs)  # noqa: E731
    ours = time_direct(fn, backend, warmup_ms=25, rep_ms=100, flush_l2=True).value_ms
    theirs = triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")
    assert abs(ours / theirs - 1) < 0.05
