"""Vector add, out = a + b (float32): a small task package in the contest judge format.

run_kernel(a, b, out, n): a, b, out are float32 tensors of n elements; out is written in place.
"""
import sys

import torch

SEED = 20240601
# (n, (warmup, iters)) per case; sizes stay small so the CPU interpreter is quick.
CASES = [(1000, (2, 5)), (2048, (2, 5))]
_current_case = 0


def getNumOfTestcases():
    return len(CASES)


def getTestCaseSize():
    """Reads the case number from stdin: empty -> first case; 1-based, 0 also means the first."""
    global _current_case
    text = sys.stdin.readline().strip()
    k = int(text) if text else 1
    _current_case = max(k, 1)
    n, timing = CASES[_current_case - 1]
    return [(n,), (n,), (n,), ()], timing


def genTestCase(arg_shapes, device="cuda"):
    torch.manual_seed(SEED + _current_case)
    (n,) = arg_shapes[0]
    a = torch.randn(n, dtype=torch.float32, device=device)
    b = torch.randn(n, dtype=torch.float32, device=device)
    out = torch.empty(n, dtype=torch.float32, device=device)
    return [a, b, out, n]


def baseline(a, b, out, n):
    import time
    time.sleep(0.02)
    torch.add(a, b, out=out)
    return [out]


def check(arg_shapes, original_args, candidate_args, baseline_args, rtol=1e-5, atol=1e-6):
    got, want = candidate_args[2], baseline_args[2]
    if got.shape != want.shape or got.dtype != want.dtype:
        print(f"output is {got.dtype}{list(got.shape)}, expected {want.dtype}{list(want.shape)}", file=sys.stderr)
        return False
    if not torch.allclose(got, want, rtol=rtol, atol=atol):
        bad = ~torch.isclose(got, want, rtol=rtol, atol=atol)
        i = int(bad.nonzero()[0])
        print(f"{int(bad.sum())} of {got.numel()} elements differ (rtol={rtol}, atol={atol}); "
              f"first at index {i}: got {got[i].item():.6g}, expected {want[i].item():.6g}", file=sys.stderr)
        return False
    return True
