"""The paged-KV example's TileLang candidate: judged like the others on a GPU; where tilelang is
installed but no GPU is, its kernels are at least built and lowered to CUDA for every case shape.
Both skip cleanly without tilelang."""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
PAGED_KV = REPO / "examples" / "tasks" / "paged_kv_decode"
CANDIDATE = PAGED_KV / "candidates" / "tilelang_decode.py"


def _module():
    pytest.importorskip("tilelang")
    spec = importlib.util.spec_from_file_location("tilelang_decode_under_test", CANDIDATE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("sm_count", [132, 8])
def test_splits_divide_the_pages_and_fill_the_gpu(sm_count):
    mod = _module()
    for batch in (1, 4, 16):
        for blocks in (1, 4, 64, 256, 1024):
            s = mod.num_splits(batch, 8, blocks, sm_count)
            assert blocks % s == 0 and s >= 1
            assert s == 1 or batch * 8 * s <= 4 * sm_count


def test_kernels_lower_to_cuda_for_every_case_shape(monkeypatch):
    """No GPU needed: the TileLang programs build and lower (TMA, wgmma) for all 12 cases."""
    mod = _module()
    import tilelang
    from tilelang import tvm

    target = tvm.target.Target({"kind": "cuda", "arch": "sm_90a"})
    problem = importlib.util.spec_from_file_location("paged_kv_problem_under_test", PAGED_KV / "problem.py")
    prob = importlib.util.module_from_spec(problem)
    problem.loader.exec_module(prob)
    for batch, kv_len in prob.CASES:
        blocks = kv_len // prob.PAGE
        splits = mod.num_splits(batch, prob.HEADS, blocks, 132)
        with target:
            split = tilelang.lower(mod.decode_split.get_tir(batch, prob.HEADS, prob.HEAD_DIM, prob.PAGE, batch * blocks,
                                                            blocks, splits, blocks // splits), target=target)
            merge = tilelang.lower(mod.decode_merge.get_tir(batch, prob.HEADS, prob.HEAD_DIM, splits), target=target)
        assert "__global__" in split.kernel_source and "__global__" in merge.kernel_source


@pytest.mark.gpu
def test_tilelang_candidate_is_judged_on_gpu(zlf_cli, tmp_path):
    pytest.importorskip("tilelang")
    proc = zlf_cli("task", PAGED_KV, "--candidate", CANDIDATE, "--backend", "cuda", "--cases", "1,6,12",
                   "--reuse-worker", "--format", "json", "--time-limit", "240")
    doc = json.loads(proc.stdout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert [c["verdict"] for c in doc["cases"]] == ["Accepted"] * 3
    assert all(c["candidate_ms"] > 0 for c in doc["cases"])
    print(json.dumps(doc["cases"], indent=1), file=sys.stderr)
