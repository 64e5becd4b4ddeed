"""TileLang candidate: split-K ("flash decoding") written in TileLang's Python DSL.

Each (sequence, head) is cut into splits so that batch x heads x splits fills the GPU. A split
program walks its pages one at a time (16 tokens, the page found through the block table),
copies the page's K and V rows of its head to shared memory, computes the scores with a tensor-core
GEMM (the query replicated over the rows the GEMM needs), keeps an online softmax in fp32 and
writes a partial (acc, max, sum). A second kernel, one thread per output element, merges the
splits. Both kernels are compiled per case shape (``tilelang.jit``, cached in this process).
"""
import functools

import tilelang
import tilelang.language as T
import torch

#: rows of the score GEMM: the query is one row, replicated (the tensor cores need 16+ rows per warp)
BLOCK_H = 64
THREADS = 128
LOG2E = 1.44269504


@tilelang.jit
def decode_split(batch, heads, dim, page, num_pages, max_blocks, splits, pages_per_split):
    sm_scale = dim ** -0.5 * LOG2E
    dtype, accum = T.bfloat16, T.float32

    @T.prim_func
    def kernel(
        Q: T.Tensor([batch, heads, dim], dtype),
        K: T.Tensor([num_pages, page, heads, dim], dtype),
        V: T.Tensor([num_pages, page, heads, dim], dtype),
        BT: T.Tensor([batch, max_blocks], T.int32),
        L: T.Tensor([batch], T.int32),
        PA: T.Tensor([batch, heads, splits, dim], accum),
        PML: T.Tensor([batch, heads, splits, 2], accum),
    ):
        with T.Kernel(splits, heads, batch, threads=THREADS) as (bs, bh, bb):
            Q_s = T.alloc_shared([BLOCK_H, dim], dtype)
            K_s = T.alloc_shared([page, dim], dtype)
            V_s = T.alloc_shared([page, dim], dtype)
            O_s = T.alloc_shared([BLOCK_H, dim], accum)
            ML_s = T.alloc_shared([BLOCK_H, 2], accum)
            acc_s = T.alloc_fragment([BLOCK_H, page], accum)
            acc_s_cast = T.alloc_fragment([BLOCK_H, page], dtype)
            acc_o = T.alloc_fragment([BLOCK_H, dim], accum)
            m = T.alloc_fragment([BLOCK_H], accum)
            m_prev = T.alloc_fragment([BLOCK_H], accum)
            alpha = T.alloc_fragment([BLOCK_H], accum)
            p_sum = T.alloc_fragment([BLOCK_H], accum)
            l_sum = T.alloc_fragment([BLOCK_H], accum)

            seq_len = L[bb]
            for i, d in T.Parallel(BLOCK_H, dim):
                Q_s[i, d] = Q[bb, bh, d]
            T.fill(acc_o, 0)
            T.fill(l_sum, 0)
            T.fill(m, -T.infinity(accum))
            for p in T.Pipelined(pages_per_split, num_stages=2):
                blk = bs * pages_per_split + p
                T.copy(K[BT[bb, blk], 0:page, bh, :], K_s)
                T.clear(acc_s)
                T.gemm(Q_s, K_s, acc_s, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)
                for i, j in T.Parallel(BLOCK_H, page):
                    acc_s[i, j] = T.if_then_else(blk * page + j < seq_len, acc_s[i, j] * sm_scale, -T.infinity(accum))
                T.copy(m, m_prev)
                T.reduce_max(acc_s, m, dim=1, clear=False)
                for i in T.Parallel(BLOCK_H):
                    alpha[i] = T.exp2(m_prev[i] - m[i])
                for i, j in T.Parallel(BLOCK_H, page):
                    acc_s[i, j] = T.exp2(acc_s[i, j] - m[i])
                T.reduce_sum(acc_s, p_sum, dim=1)
                for i in T.Parallel(BLOCK_H):
                    l_sum[i] = l_sum[i] * alpha[i] + p_sum[i]
                T.copy(acc_s, acc_s_cast)
                for i, d in T.Parallel(BLOCK_H, dim):
                    acc_o[i, d] *= alpha[i]
                T.copy(V[BT[bb, blk], 0:page, bh, :], V_s)
                T.gemm(acc_s_cast, V_s, acc_o, policy=T.GemmWarpPolicy.FullRow)
            T.copy(acc_o, O_s)
            for i in T.Parallel(BLOCK_H):
                ML_s[i, 0] = m[i]
                ML_s[i, 1] = l_sum[i]
            T.copy(O_s[0, :], PA[bb, bh, bs, :])  # every row holds the same query's result
            T.copy(ML_s[0, :], PML[bb, bh, bs, :])

    return kernel


@tilelang.jit
def decode_merge(batch, heads, dim, splits):
    dtype, accum = T.bfloat16, T.float32

    @T.prim_func
    def kernel(
        PA: T.Tensor([batch, heads, splits, dim], accum),
        PML: T.Tensor([batch, heads, splits, 2], accum),
        O: T.Tensor([batch, heads, dim], dtype),
    ):
        with T.Kernel(heads, batch, threads=dim) as (bh, bb):
            d = T.get_thread_binding()
            top = T.alloc_local([1], accum)
            num = T.alloc_local([1], accum)
            den = T.alloc_local([1], accum)
            top[0] = -T.infinity(accum)
            for s in T.serial(splits):
                top[0] = T.max(top[0], PML[bb, bh, s, 0])
            num[0] = 0
            den[0] = 0
            for s in T.serial(splits):
                # an empty split (max -inf) weighs nothing
                w = T.if_then_else(PML[bb, bh, s, 0] == -T.infinity(accum), 0.0, T.exp2(PML[bb, bh, s, 0] - top[0]))
                num[0] += w * PA[bb, bh, s, d]
                den[0] += w * PML[bb, bh, s, 1]
            O[bb, bh, d] = T.cast(num[0] / den[0], dtype)

    return kernel


@functools.lru_cache(maxsize=None)
def _sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def num_splits(batch, heads, max_blocks, sm_count) -> int:
    """Splits per (sequence, head): a power of two dividing ``max_blocks``, about 4 waves of programs."""
    splits = 1
    while max_blocks % (splits * 2) == 0 and batch * heads * splits * 2 <= 4 * sm_count:
        splits *= 2
    return splits


@functools.lru_cache(maxsize=None)
def kernels(batch, heads, dim, page, num_pages, max_blocks, splits) -> tuple:
    """The compiled split and merge kernels of one shape (compiled at the first call of a case)."""
    return (decode_split(batch, heads, dim, page, num_pages, max_blocks, splits, max_blocks // splits),
            decode_merge(batch, heads, dim, splits))


_partials = {}


def run_kernel(q, k_cache, v_cache, block_table, seq_lens, out, batch, num_heads, head_dim, page_size, max_blocks):
    splits = num_splits(batch, num_heads, max_blocks, _sm_count(q.device.index or 0))
    key = (q.device, batch, num_heads, head_dim, splits)
    if key not in _partials:  # reused across calls: no allocation in the timed call
        _partials[key] = (torch.empty(batch, num_heads, splits, head_dim, dtype=torch.float32, device=q.device),
                          torch.empty(batch, num_heads, splits, 2, dtype=torch.float32, device=q.device))
    part_acc, part_ml = _partials[key]
    split, merge = kernels(batch, num_heads, head_dim, page_size, k_cache.shape[0], max_blocks, splits)
    split(q, k_cache, v_cache, block_table, seq_lens, part_acc, part_ml)
    merge(part_acc, part_ml, out)
