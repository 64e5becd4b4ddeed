"""Correct: a Triton kernel (interpreted on a machine without a GPU)."""
import triton
import triton.language as tl


@triton.jit
def _add(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(a_ptr + offs, mask=mask) + tl.load(b_ptr + offs, mask=mask), mask=mask)


def run_kernel(a, b, out, n):
    _add[(triton.cdiv(n, 1024),)](a, b, out, n, BLOCK=1024)
