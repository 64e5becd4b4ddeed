"""Deliberately naive Triton candidate: one program per (sequence, head) walks the whole
sequence one 16-token page at a time. Correct, but with batch 1 only 8 programs run (8 of the
GPU's SMs) and every page costs a dependent block-table load: slower than the torch baseline
at small batch."""
import triton
import triton.language as tl


@triton.jit
def _decode_naive(q_ptr, k_ptr, v_ptr, bt_ptr, lens_ptr, out_ptr, sm_scale_log2, max_blocks,
                  stride_kp, stride_kt, stride_kh,
                  H: tl.constexpr, D: tl.constexpr, PAGE: tl.constexpr):
    b = tl.program_id(0)
    h = tl.program_id(1)
    offs_d = tl.arange(0, D)
    offs_t = tl.arange(0, PAGE)
    seq_len = tl.load(lens_ptr + b)
    q = tl.load(q_ptr + (b * H + h) * D + offs_d).to(tl.float32) * sm_scale_log2
    m = -float("inf")
    l = 0.0
    acc = tl.zeros([D], dtype=tl.float32)
    for j in range(0, tl.cdiv(seq_len, PAGE)):
        page = tl.load(bt_ptr + b * max_blocks + j).to(tl.int64)
        tok = j * PAGE + offs_t
        mask = tok < seq_len
        rows = page * stride_kp + offs_t * stride_kt + h * stride_kh
        k = tl.load(k_ptr + rows[:, None] + offs_d[None, :], mask=mask[:, None], other=0.0).to(tl.float32)
        s = tl.sum(k * q[None, :], axis=1)
        s = tl.where(mask, s, -float("inf"))
        m_new = tl.maximum(m, tl.max(s, axis=0))
        alpha = tl.exp2(m - m_new)
        p = tl.exp2(s - m_new)
        v = tl.load(v_ptr + rows[:, None] + offs_d[None, :], mask=mask[:, None], other=0.0).to(tl.float32)
        acc = acc * alpha + tl.sum(p[:, None] * v, axis=0)
        l = l * alpha + tl.sum(p, axis=0)
        m = m_new
    tl.store(out_ptr + (b * H + h) * D + offs_d, (acc / l).to(out_ptr.dtype.element_ty))


def run_kernel(q, k_cache, v_cache, block_table, seq_lens, out, batch, num_heads, head_dim, page_size, max_blocks):
    sm_scale_log2 = head_dim ** -0.5 * 1.4426950408889634  # softmax in base 2: exp(x) = exp2(x log2 e)
    _decode_naive[(batch, num_heads)](
        q, k_cache, v_cache, block_table, seq_lens, out, sm_scale_log2, max_blocks,
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        H=num_heads, D=head_dim, PAGE=page_size, num_warps=4)
