"""Wrong Answer: subtracts."""
import torch


def run_kernel(a, b, out, n):
    torch.sub(a, b, out=out)
