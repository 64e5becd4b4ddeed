"""Right output, plus a write past the end of out (caught by the guard bytes)."""
import torch


def run_kernel(a, b, out, n):
    torch.add(a, b, out=out)
    out.as_strided((n + 8,), (1,))[n:].zero_()
