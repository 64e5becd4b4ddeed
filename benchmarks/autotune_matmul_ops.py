"""A matmul with a 16-config autotune space, for autotune_replay_bench.py (``zlf run THIS::matmul16``).

The kernel body is the built-in matmul's; only the config space is larger, so more near-equal
configs compete and timing noise has more ways to pick a different winner per process.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

import zlf


def _config(bm, bn, bk, warps, stages):
    return triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8}, num_warps=warps, num_stages=stages)


# All fit the 228 KB of shared memory of an H100/H200 (none is a certain OutOfResources loser).
CONFIGS16 = [
    _config(128, 256, 64, 8, 3), _config(64, 256, 32, 4, 4), _config(128, 128, 32, 4, 4), _config(128, 64, 32, 4, 4),
    _config(64, 128, 32, 4, 4), _config(128, 32, 32, 4, 4), _config(64, 32, 32, 2, 5), _config(32, 64, 32, 2, 5),
    _config(128, 128, 64, 8, 3), _config(128, 128, 64, 4, 3), _config(256, 128, 64, 8, 3), _config(64, 128, 64, 4, 3),
    _config(128, 64, 64, 4, 4), _config(256, 64, 64, 8, 4), _config(128, 256, 32, 8, 4), _config(64, 64, 64, 4, 4),
]


@triton.autotune(configs=CONFIGS16, key=["M", "N", "K"])
@triton.jit
def matmul16_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    group = GROUP_M * num_pid_n
    first_m = (pid // group) * GROUP_M
    group_size = tl.minimum(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + ((pid % group) % group_size)
    pid_n = (pid % group) // group_size
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + rm[:, None] * stride_am + rk[None, :] * stride_ak
    b_ptrs = b_ptr + rk[:, None] * stride_bk + rn[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k_left = K - k0
        a = tl.load(a_ptrs, mask=(rm[:, None] < M) & (rk[None, :] < k_left), other=0.0)
        b = tl.load(b_ptrs, mask=(rk[:, None] < k_left) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c = acc.to(c_ptr.dtype.element_ty)
    c_ptrs = c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn
    tl.store(c_ptrs, c, mask=(rm[:, None] < M) & (rn[None, :] < N))


def matmul16_fn(a, b, c):
    M, K = a.shape
    N = b.shape[1]

    def grid(meta):
        return (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)

    matmul16_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))


def _inputs(shape, dtype, device):
    M, N, K = shape
    t = getattr(torch, dtype)
    a, b = torch.randn((M, K), dtype=t, device=device), torch.randn((K, N), dtype=t, device=device)
    return (a, b, torch.empty((M, N), dtype=t, device=device))


matmul16 = zlf.Op(
    name="matmul16",
    fn=matmul16_fn,
    make_inputs=_inputs,
    shapes=[(4096, 4096, 4096), (128, 4096, 4096)],
    dtypes=("bfloat16",),
    reference=lambda a, b, c: (a.double() @ b.double()).to(a.dtype),
    outputs=(2,),
    flops=lambda s, dtype: 2 * s[0] * s[1] * s[2],
    cpu_shapes=[(64, 64, 64)],
    cpu_dtypes=("float32",),
    tolerance={"float32": 2e-3, "float16": 2e-3, "bfloat16": 1.6e-2},
    shape_rank=(3,),
    shape_desc="M, N, K",
    description="Triton matmul C = A @ B, @triton.autotune over 16 configs keyed on M, N, K",
)
