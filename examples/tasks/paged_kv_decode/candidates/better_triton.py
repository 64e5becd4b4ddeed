"""Better Triton candidate: split-K ("flash decoding"). Each (sequence, head) is cut into
splits so that batch x heads x splits fills the GPU; each program streams 64 tokens per
iteration (4 pages gathered through the block table) with an online softmax in fp32 and
writes a partial (max, sum, acc); a second kernel merges the splits."""
import torch
import triton
import triton.language as tl

BLOCK_N = 64
_SM_COUNT = {}


@triton.jit
def _decode_split(q_ptr, k_ptr, v_ptr, bt_ptr, lens_ptr, part_acc_ptr, part_ml_ptr,
                  sm_scale_log2, max_blocks, tokens_per_split, num_splits,
                  stride_kp, stride_kt, stride_kh,
                  H: tl.constexpr, D: tl.constexpr, PAGE: tl.constexpr, BLOCK_N: tl.constexpr):
    b = tl.program_id(0)
    h = tl.program_id(1)
    s = tl.program_id(2)
    offs_d = tl.arange(0, D)
    offs_n = tl.arange(0, BLOCK_N)
    seq_len = tl.load(lens_ptr + b)
    start = s * tokens_per_split
    end = tl.minimum(start + tokens_per_split, seq_len)
    q = tl.load(q_ptr + (b * H + h) * D + offs_d).to(tl.float32) * sm_scale_log2
    m = -float("inf")
    l = 0.0
    acc = tl.zeros([D], dtype=tl.float32)
    for n0 in range(start, end, BLOCK_N):
        tok = n0 + offs_n
        mask = tok < end
        page = tl.load(bt_ptr + b * max_blocks + tok // PAGE, mask=mask, other=0).to(tl.int64)
        rows = page * stride_kp + (tok % PAGE) * stride_kt + h * stride_kh
        k = tl.load(k_ptr + rows[:, None] + offs_d[None, :], mask=mask[:, None], other=0.0)
        v = tl.load(v_ptr + rows[:, None] + offs_d[None, :], mask=mask[:, None], other=0.0)
        sc = tl.sum(k.to(tl.float32) * q[None, :], axis=1)
        sc = tl.where(mask, sc, -float("inf"))
        m_new = tl.maximum(m, tl.max(sc, axis=0))
        alpha = tl.exp2(m - m_new)
        p = tl.exp2(sc - m_new)
        acc = acc * alpha + tl.sum(p[:, None] * v.to(tl.float32), axis=0)
        l = l * alpha + tl.sum(p, axis=0)
        m = m_new
    part = (b * H + h) * num_splits + s
    tl.store(part_acc_ptr + part * D + offs_d, acc)
    tl.store(part_ml_ptr + part * 2, m)
    tl.store(part_ml_ptr + part * 2 + 1, l)


@triton.jit
def _decode_merge(part_acc_ptr, part_ml_ptr, out_ptr, num_splits,
                  H: tl.constexpr, D: tl.constexpr, SPLITS: tl.constexpr):
    b = tl.program_id(0)
    h = tl.program_id(1)
    offs_s = tl.arange(0, SPLITS)
    offs_d = tl.arange(0, D)
    smask = offs_s < num_splits
    base = (b * H + h) * num_splits
    m_s = tl.load(part_ml_ptr + (base + offs_s) * 2, mask=smask, other=-float("inf"))
    l_s = tl.load(part_ml_ptr + (base + offs_s) * 2 + 1, mask=smask, other=0.0)
    m = tl.max(m_s, axis=0)
    w = tl.where(m_s > -float("inf"), tl.exp2(m_s - m), 0.0)  # empty splits weigh nothing
    acc = tl.load(part_acc_ptr + (base + offs_s)[:, None] * D + offs_d[None, :], mask=smask[:, None], other=0.0)
    num = tl.sum(w[:, None] * acc, axis=0)
    den = tl.sum(w * l_s, axis=0)
    tl.store(out_ptr + (b * H + h) * D + offs_d, (num / den).to(out_ptr.dtype.element_ty))


def _sm_count(device) -> int:
    if device.type != "cuda":
        return 8
    if device not in _SM_COUNT:
        _SM_COUNT[device] = torch.cuda.get_device_properties(device).multi_processor_count
    return _SM_COUNT[device]


def run_kernel(q, k_cache, v_cache, block_table, seq_lens, out, batch, num_heads, head_dim, page_size, max_blocks):
    max_len = max_blocks * page_size
    # Enough programs for ~4 waves of the GPU, each split a whole number of BLOCK_N tokens.
    want = max(1, (4 * _sm_count(q.device) + batch * num_heads - 1) // (batch * num_heads))
    tokens_per_split = triton.cdiv(triton.cdiv(max_len, want), BLOCK_N) * BLOCK_N
    num_splits = triton.cdiv(max_len, tokens_per_split)
    parts = batch * num_heads * num_splits
    part_acc = torch.empty(parts * head_dim, dtype=torch.float32, device=q.device)
    part_ml = torch.empty(parts * 2, dtype=torch.float32, device=q.device)
    sm_scale_log2 = head_dim ** -0.5 * 1.4426950408889634
    _decode_split[(batch, num_heads, num_splits)](
        q, k_cache, v_cache, block_table, seq_lens, part_acc, part_ml,
        sm_scale_log2, max_blocks, tokens_per_split, num_splits,
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        H=num_heads, D=head_dim, PAGE=page_size, BLOCK_N=BLOCK_N, num_warps=4, num_stages=2)
    _decode_merge[(batch, num_heads)](
        part_acc, part_ml, out, num_splits,
        H=num_heads, D=head_dim, SPLITS=triton.next_power_of_2(num_splits), num_warps=4)
