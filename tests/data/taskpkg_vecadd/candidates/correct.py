"""Correct: plain torch."""
import torch


def run_kernel(a, b, out, n):
    torch.add(a, b, out=out)
