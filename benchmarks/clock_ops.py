"""A pinned-config matmul for clock_gpu.sh (``zlf run THIS::matmul_pinned``).

The built-in matmul kernel launched with one fixed config (no autotuning), so run-to-run spread
between processes is the device's (clock, power cap), not the autotuner's choice.
"""
from __future__ import annotations

import torch
import triton

import zlf
from zlf.ops import builtin

#: the built-in space's first config (the H200's usual winner at 4096³ fp16)
PINNED = dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=3)


def matmul_pinned_fn(a, b, c):
    M, K = a.shape
    N = b.shape[1]
    grid = (triton.cdiv(M, PINNED["BLOCK_M"]) * triton.cdiv(N, PINNED["BLOCK_N"]),)
    # Autotuner.fn is the jitted kernel under the autotune decorator: call it with the config
    builtin.matmul_kernel.fn[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                                   c.stride(0), c.stride(1), **PINNED)


def _inputs(shape, dtype, device):
    M, N, K = shape
    t = getattr(torch, dtype)
    a, b = torch.randn((M, K), dtype=t, device=device), torch.randn((K, N), dtype=t, device=device)
    return (a, b, torch.empty((M, N), dtype=t, device=device))


matmul_pinned = zlf.Op(
    name="matmul_pinned",
    fn=matmul_pinned_fn,
    make_inputs=_inputs,
    shapes=[(4096, 4096, 4096)],
    dtypes=("float16",),
    cpu_shapes=[(64, 64, 64)],
    cpu_dtypes=("float32",),
    reference=lambda a, b, c: torch.matmul(a.float(), b.float()).to(a.dtype),
    outputs=(2,),
    flops=lambda shape, dtype: 2.0 * shape[0] * shape[1] * shape[2],
    description="the built-in matmul kernel with one pinned config (no autotune)",
)
