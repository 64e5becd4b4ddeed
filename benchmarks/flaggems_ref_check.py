"""How close FlagGems' mm is to torch's on the GPU, beside a float64 reference.

zlf checks every FlagGems point against the torch op in the same dtype (docs/flaggems.md); this
prints, per shape and dtype, the relative L2 error of FlagGems against torch (what zlf records as
max_rel_err), of both against float64, and how many elements differ at all, so a recorded
0.0 can be told from a check that compared nothing.

    PYTHONPATH=.flaggems/v5.0.2/src python3 -u benchmarks/flaggems_ref_check.py
"""
import os

import torch

import flag_gems

# float32 adds FlagGems' own tuning over a large config space (minutes); ZLF_REF_DTYPES to choose
DTYPES = [getattr(torch, d) for d in os.environ.get("ZLF_REF_DTYPES", "float16,bfloat16").split(",")]


def rel(a, b):
    return float(torch.linalg.vector_norm(a.double() - b.double()) / torch.linalg.vector_norm(b.double()))


def main():
    torch.manual_seed(0)
    print(f"{'shape':>16} {'dtype':>9} {'gems~torch':>11} {'differ':>9} {'gems~f64':>9} {'torch~f64':>9}")
    for m, n, k in ((4096, 4096, 4096), (128, 4096, 4096), (1024, 1024, 1024)):
        for dtype in DTYPES:
            a = torch.randn(m, k, dtype=dtype, device="cuda")
            b = torch.randn(k, n, dtype=dtype, device="cuda")
            ref = torch.mm(a, b)
            with flag_gems.use_gems():
                gems = torch.mm(a, b)
            exact = a.double() @ b.double()
            again = torch.mm(a, b)  # torch's kernel again: the dispatch was left
            assert torch.equal(again, ref), "torch.mm after use_gems() differs from before"
            print(f"{f'{m}x{n}x{k}':>16} {str(dtype)[6:]:>9} {rel(gems, ref):11.2e} "
                  f"{int((gems != ref).sum()):9d} {rel(gems, exact):9.2e} {rel(ref, exact):9.2e}")


if __name__ == "__main__":
    main()
