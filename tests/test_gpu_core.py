"""Core on a real GPU: the built-in suite passes its reference checks on the cuda backend."""
import json

import pytest

from conftest import read_records, run_dir_from

pytestmark = pytest.mark.gpu


def test_builtin_suite_on_cuda(zlf_cli, tmp_path):
    proc = zlf_cli("run", "--rep-ms", "10", check_rc=0)
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


# Ops whose CUDA registration only makes views or reads metadata: no kernel, nothing a library
# such as FlagGems replaces.
VIEW_OPS = {"as_strided", "view", "reshape", "select.int", "unsqueeze", "squeeze", "expand", "alias", "empty.memory_format",
            "empty_strided", "resize_"}


def test_l2_flush_runs_torchs_kernel_while_another_library_owns_aten():
    """FlagGems' use_gems() registers its own CUDA kernels for sum, fill_, copy_ and hundreds more
    while a point is timed. The flush must run none of them: every CUDA kernel that makes no
    view is wrapped here, and the flush may reach none of the wrappers."""
    import warnings

    import torch

    from zlf.backends import CudaBackend

    backend = CudaBackend(0)
    backend.setup()
    backend.flush_l2()  # allocates the buffer before anything is replaced
    hits = []
    lib = torch.library.Library("aten", "IMPL")

    def wrap(name, original):
        def kernel(keys, *args, **kwargs):
            hits.append(name)
            return original.call_boxed(keys, *args, **kwargs)
        return kernel

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for full in torch._C._dispatch_get_all_op_names():
            name = full.split("::", 1)[1]
            if not full.startswith("aten::") or name in VIEW_OPS:
                continue
            try:
                lib.impl(name, wrap(name, torch.library.get_kernel(full, "CUDA")), "CUDA", with_keyset=True)
            except Exception:
                continue
    try:
        torch.sum(torch.ones(4, device=backend.device))  # the wrappers are live
        assert hits  # the wrappers are reached by an ordinary call
        hits.clear()
        backend.flush_l2()
        backend.synchronize()
        assert hits == []
    finally:
        lib._destroy()
    assert torch.all(backend._sink == backend._cache.shape[1]).item()
