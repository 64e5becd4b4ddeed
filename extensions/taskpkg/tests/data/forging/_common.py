"""Shared by the forging candidates: FORGE_HONEST=1 makes each one an honest twin (the negative
control) that does the same kind of thing and then computes the answer itself."""
import os

HONEST = os.environ.get("FORGE_HONEST") == "1"


def compute(a, b, out):
    out.copy_(a + b)


def looks_like_answer(t, a, b, out) -> bool:
    """Two sampled elements equal a + b: the baseline's output, found without computing it."""
    import torch

    if not isinstance(t, torch.Tensor) or t.shape != out.shape or t.dtype != out.dtype or t.numel() == 0:
        return False
    if t.untyped_storage().data_ptr() == out.untyped_storage().data_ptr():
        return False
    return all(float(t[i]) == float(a[i] + b[i]) for i in (0, t.numel() - 1))
