"""Paged-KV attention decode (bf16): one query token per sequence attends to its whole KV cache,
which lives in fixed-size pages scattered through a page pool (a vLLM-style block table).

run_kernel(q, k_cache, v_cache, block_table, seq_lens, out,
           batch, num_heads, head_dim, page_size, max_blocks_per_seq)

  q            bf16 [batch, num_heads, head_dim]             the decode step's queries
  k_cache      bf16 [num_pages, page_size, num_heads, head_dim]
  v_cache      bf16 [num_pages, page_size, num_heads, head_dim]
  block_table  int32 [batch, max_blocks_per_seq]               page of the j-th 16 tokens of sequence b
  seq_lens     int32 [batch]                                   tokens in each sequence
  out          bf16 [batch, num_heads, head_dim]             written: softmax(q k^T / sqrt(d)) v

Token t of sequence b is row ``t % page_size`` of page ``block_table[b, t // page_size]``.
The block table is a random permutation of the page pool. head_dim 128, 8 heads, page size 16,
batch {1, 4, 16} x kv length {1024, 4096, 8192, 16384} = 12 cases (every sequence of a case has
the case's kv length). PAGED_KV_DECODE_SMALL=1 divides the kv lengths by 64 (CPU smoke runs).
"""
import os
import sys

import torch

SEED = 1000
HEADS, HEAD_DIM, PAGE = 8, 128, 16
BATCHES = (1, 4, 16)
KV_LENS = (1024, 4096, 8192, 16384)
CASES = [(b, n) for b in BATCHES for n in KV_LENS]
WARMUP_ITERS = (10, 100)
_current_case = 1


def getNumOfTestcases():
    return len(CASES)


def _kv_len(n):
    return max(PAGE, n // 64) if os.environ.get("PAGED_KV_DECODE_SMALL") else n


def getTestCaseSize():
    """The case number comes on stdin: empty -> the first case; 1-based, 0 also means the first."""
    global _current_case
    text = sys.stdin.readline().strip()
    _current_case = max(int(text), 1) if text else 1
    batch, kv_len = CASES[_current_case - 1]
    kv_len = _kv_len(kv_len)
    blocks = (kv_len + PAGE - 1) // PAGE
    pages = batch * blocks
    arg_shapes = [
        (batch, HEADS, HEAD_DIM),              # q
        (pages, PAGE, HEADS, HEAD_DIM),        # k_cache
        (pages, PAGE, HEADS, HEAD_DIM),        # v_cache
        (batch, blocks),                       # block_table
        (batch,),                              # seq_lens
        (batch, HEADS, HEAD_DIM),              # out
        (), (), (), (), (),                    # batch, num_heads, head_dim, page_size, max_blocks
    ]
    return arg_shapes, WARMUP_ITERS


def genTestCase(arg_shapes, device="cuda"):
    torch.manual_seed(SEED + _current_case)
    batch, heads, dim = arg_shapes[0]
    pages = arg_shapes[1][0]
    blocks = arg_shapes[3][1]
    q = torch.randn(batch, heads, dim, device=device).to(torch.bfloat16)
    k_cache = torch.randn(pages, PAGE, heads, dim, device=device).to(torch.bfloat16)
    v_cache = torch.randn(pages, PAGE, heads, dim, device=device).to(torch.bfloat16)
    block_table = torch.randperm(pages, device=device).to(torch.int32).view(batch, blocks)
    seq_lens = torch.full((batch,), blocks * PAGE, dtype=torch.int32, device=device)
    out = torch.empty(batch, heads, dim, dtype=torch.bfloat16, device=device)
    return [q, k_cache, v_cache, block_table, seq_lens, out, batch, heads, dim, PAGE, blocks]


def baseline(q, k_cache, v_cache, block_table, seq_lens, out, batch, num_heads, head_dim, page_size, max_blocks):
    """Torch reference: gather each sequence's pages, then scaled dot-product attention.
    Every sequence of a case has the same length (max_blocks * page_size), so no masking."""
    idx = block_table.long()
    k = k_cache[idx].reshape(batch, max_blocks * page_size, num_heads, head_dim).transpose(1, 2)
    v = v_cache[idx].reshape(batch, max_blocks * page_size, num_heads, head_dim).transpose(1, 2)
    o = torch.nn.functional.scaled_dot_product_attention(q.unsqueeze(2), k, v, scale=head_dim ** -0.5)
    out.copy_(o.squeeze(2))
    return [out]


def check(arg_shapes, original_args, candidate_args, baseline_args, rtol=1e-2, atol=1e-2):
    got, want = candidate_args[5], baseline_args[5]
    if got.shape != want.shape or got.dtype != want.dtype:
        print(f"out is {got.dtype}{list(got.shape)}, expected {want.dtype}{list(want.shape)}", file=sys.stderr)
        return False
    g, w = got.float(), want.float()
    if torch.isnan(g).any():
        print(f"out has {int(torch.isnan(g).sum())} NaN elements (unwritten or overflow)", file=sys.stderr)
        return False
    close = torch.isclose(g, w, rtol=rtol, atol=atol)
    if not bool(close.all()):
        bad = (~close).nonzero()[0].tolist()
        diff = (g - w).abs().max().item()
        print(f"{int((~close).sum())} of {g.numel()} elements differ (rtol={rtol}, atol={atol}); max abs diff {diff:.4g}; "
              f"first at [b, h, d] = {bad}: got {g[tuple(bad)].item():.5g}, expected {w[tuple(bad)].item():.5g}",
              file=sys.stderr)
        return False
    return True
