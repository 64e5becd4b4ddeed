"""Built-in example ops in Triton: vector add, row softmax, autotuned matmul.

This module decorates kernels when imported, so it is imported only after the backend has set
up the process (``TRITON_INTERPRET=1`` on the cpu backend).
"""
from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from . import Op, itemsize, numel, torch_dtype


def _randn(shape, dtype, device):
    return torch.randn(shape, dtype=torch_dtype(dtype), device=device)


# ----------------------------------------------------------------------------- add
@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x + y, mask=mask)


def add(x, y, out):
    n = out.numel()
    block = 1024
    add_kernel[(triton.cdiv(n, block),)](x, y, out, n, BLOCK=block)


def _add_inputs(shape, dtype, device):
    x, y = _randn(shape, dtype, device), _randn(shape, dtype, device)
    return (x, y, torch.empty_like(x))


# ----------------------------------------------------------------------------- softmax
@triton.jit
def softmax_kernel(x_ptr, out_ptr, n_cols, x_row_stride, out_row_stride, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=-float("inf")).to(tl.float32)
    x = x - tl.max(x, axis=0)
    num = tl.exp(x)
    y = num / tl.sum(num, axis=0)
    tl.store(out_ptr + row * out_row_stride + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def softmax(x, out):
    n_cols = x.shape[-1]
    x2, out2 = x.view(-1, n_cols), out.view(-1, n_cols)
    block = triton.next_power_of_2(n_cols)
    num_warps = 4 if block <= 2048 else (8 if block <= 8192 else 16)
    softmax_kernel[(x2.shape[0],)](x2, out2, n_cols, x2.stride(0), out2.stride(0), BLOCK=block, num_warps=num_warps)


def _softmax_inputs(shape, dtype, device):
    x = _randn(shape, dtype, device)
    return (x, torch.empty_like(x))


def _softmax_ref(x, out):
    return torch.softmax(x.double(), dim=-1).to(x.dtype)


# ----------------------------------------------------------------------------- matmul
MATMUL_CONFIGS = [
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8}, num_warps=8, num_stages=3),
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8}, num_warps=4, num_stages=4),
    triton.Config({"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 32, "GROUP_M": 8}, num_warps=4, num_stages=4),
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8}, num_warps=4, num_stages=4),
]


@triton.autotune(configs=MATMUL_CONFIGS, key=["M", "N", "K"])
@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                  stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    # Grouped ordering: neighbouring programs share A rows in L2.
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


def matmul(a, b, c):
    M, K = a.shape
    _, N = b.shape

    def grid(meta):
        return (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)

    matmul_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))


def _matmul_inputs(shape, dtype, device):
    M, N, K = shape
    a = _randn((M, K), dtype, device)
    b = _randn((K, N), dtype, device)
    return (a, b, torch.empty((M, N), dtype=a.dtype, device=device))


def _matmul_ref(a, b, c):
    return (a.double() @ b.double()).to(a.dtype)


# ----------------------------------------------------------------------------- canaries
# Controls of `zlf ab --controls` (docs/ab.md, "Controls"): torch's own kernels, which no Triton
# build or Triton switch compiles, timed in every process of a campaign to measure the process's
# factor (a power-capped GPU runs a whole process in one clock mode). One compute-bound, one
# memory-bound, two sizes each: four points, a second or two each at the default timing (zlf.controls.CANARY_OPS).
def canary_matmul(a, b, out):
    torch.matmul(a, b, out=out)


def canary_add(x, y, out):
    torch.add(x, y, out=out)



# ----------------------------------------------------------------------------- registry
def _elementwise_bytes(n_tensors):
    return lambda shape, dtype: n_tensors * numel(shape) * itemsize(dtype)


@functools.lru_cache(maxsize=None)
def make_ops() -> dict:
    ops = [
        Op(
            name="add",
            fn=add,
            make_inputs=_add_inputs,
            shapes=[(1024,), (1 << 20,), (1 << 26,)],
            dtypes=("float32", "float16"),
            reference=lambda x, y, out: x + y,
            outputs=(2,),
            bytes=_elementwise_bytes(3),
            flops=lambda shape, dtype: numel(shape),
            # the interpreter pays per program (1024 elements): 5000 also covers a masked tail
            cpu_shapes=[(1024,), (5000,)],
            cpu_dtypes=("float32",),
            shape_desc="N (any rank: elementwise over all elements)",
            description="Triton vector add, out = x + y",
        ),
        Op(
            name="softmax",
            fn=softmax,
            make_inputs=_softmax_inputs,
            shapes=[(1024, 1024), (4096, 4096), (64, 512, 512), (8192, 256)],
            dtypes=("float32", "float16"),
            reference=_softmax_ref,
            outputs=(1,),
            bytes=_elementwise_bytes(2),
            flops=lambda shape, dtype: 4 * numel(shape),
            cpu_shapes=[(4, 256), (8, 1000)],  # one row per program: the interpreter pays per row
            cpu_dtypes=("float32",),
            tolerance={"float32": 1e-5, "float16": 1e-3},
            shape_desc="..., N (softmax over the last dimension)",
            description="Triton row softmax over the last dimension",
        ),
        Op(
            name="matmul",
            fn=matmul,
            make_inputs=_matmul_inputs,
            shapes=[(512, 512, 512), (2048, 2048, 2048), (4096, 4096, 4096), (128, 4096, 4096)],
            dtypes=("float16", "bfloat16"),
            reference=_matmul_ref,
            outputs=(2,),
            bytes=lambda s, dtype: (s[0] * s[2] + s[2] * s[1] + s[0] * s[1]) * itemsize(dtype),
            flops=lambda s, dtype: 2 * s[0] * s[1] * s[2],
            cpu_shapes=[(64, 64, 64), (96, 80, 48)],
            cpu_dtypes=("float32",),
            # float32 operands go through tf32 tensor cores by Triton's default.
            tolerance={"float32": 2e-3, "float16": 2e-3, "bfloat16": 1.6e-2},
            shape_rank=(3,),
            shape_desc="M, N, K",
            description="Triton matmul C[M,N] = A[M,K] @ B[K,N], @triton.autotune over 4 configs keyed on M, N, K",
        ),
        Op(
            name="canary_matmul",
            fn=canary_matmul,
            make_inputs=_matmul_inputs,
            shapes=[(4096, 4096, 4096), (2048, 2048, 2048)],
            dtypes=("float16",),
            reference=_matmul_ref,
            outputs=(2,),
            bytes=lambda s, dtype: (s[0] * s[2] + s[2] * s[1] + s[0] * s[1]) * itemsize(dtype),
            flops=lambda s, dtype: 2 * s[0] * s[1] * s[2],
            cpu_shapes=[(64, 64, 64), (32, 32, 32)],
            cpu_dtypes=("float32",),
            tolerance={"float32": 2e-3, "float16": 2e-3},
            shape_rank=(3,),
            shape_desc="M, N, K",
            description="control of zlf ab --controls: torch.matmul (cuBLAS), built by no Triton",
        ),
        Op(
            name="canary_add",
            fn=canary_add,
            make_inputs=_add_inputs,
            shapes=[(1 << 26,), (1 << 24,)],
            dtypes=("float16",),
            reference=lambda x, y, out: x + y,
            outputs=(2,),
            bytes=_elementwise_bytes(3),
            flops=lambda shape, dtype: numel(shape),
            cpu_shapes=[(5000,), (1024,)],
            cpu_dtypes=("float32",),
            shape_desc="N",
            description="control of zlf ab --controls: torch.add (memory-bound), built by no Triton",
        ),
    ]
    return {op.name: op for op in ops}
