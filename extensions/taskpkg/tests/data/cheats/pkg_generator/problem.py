"""Vector add whose genTestCase seeds a torch.Generator of its own (as the paged-KV decode
format does): without the judge's help, every input set of a case is the same."""
import sys

import torch

CASES = [(1000, (2, 10)), (4096, (2, 10))]
_case = 1


def getNumOfTestcases():
    return len(CASES)


def getTestCaseSize():
    global _case
    text = sys.stdin.readline().strip()
    _case = max(int(text) if text else 1, 1)
    n, timing = CASES[_case - 1]
    return [(n,), (n,), (n,), ()], timing


def genTestCase(arg_shapes, device="cpu"):
    g = torch.Generator(device=device)
    g.manual_seed(1234 + _case)
    (n,) = arg_shapes[0]
    a = torch.randn(n, dtype=torch.float32, device=device, generator=g)
    b = torch.randn(n, dtype=torch.float32, device=device, generator=g)
    return [a, b, torch.empty(n, dtype=torch.float32, device=device), n]


def baseline(a, b, out, n):
    torch.add(a, b, out=out)


def check(arg_shapes, original_args, candidate_args, baseline_args, rtol=1e-5, atol=1e-6):
    return torch.allclose(candidate_args[2], baseline_args[2], rtol=rtol, atol=atol)
