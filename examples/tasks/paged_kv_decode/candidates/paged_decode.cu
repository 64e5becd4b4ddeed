// CUDA C++ candidate: split-K paged-KV decode for head_dim 128, bf16, fp32 accumulation.
//
// Kernel 1: one block of 4 warps per (split, head, sequence). A warp takes 8 consecutive tokens
// at a time (always inside one 16-token page, so one block-table load per group); each lane
// holds 4 of the 128 dimensions, so one token's K (or V) row is one coalesced 256-byte warp
// load. Scores are reduced with warp shuffles; online softmax in base 2. The 4 warps merge in
// shared memory and write a partial (max, sum, acc[128]) per split -- or the final output when
// there is a single split. Kernel 2 merges the splits.
//
// Partials live in a static __device__ buffer: no allocation and no synchronisation inside
// run_kernel, so it can be captured in a CUDA graph.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>

namespace {

constexpr int D = 128;
constexpr int PAGE = 16;
constexpr int WARPS = 4;
constexpr int TOK = 8;                  // tokens per warp iteration (divides PAGE)
constexpr int SPLIT_ALIGN = WARPS * TOK * 2;
constexpr int MAX_PARTS = 1 << 15;      // (sequence, head, split) partials kept on the device

__device__ float g_part_acc[MAX_PARTS * D];
__device__ float g_part_ml[MAX_PARTS * 2];

__device__ __forceinline__ void load4(const __nv_bfloat16* p, float (&f)[4]) {
  uint2 raw = __ldg(reinterpret_cast<const uint2*>(p));
  __nv_bfloat162 lo = *reinterpret_cast<__nv_bfloat162*>(&raw.x);
  __nv_bfloat162 hi = *reinterpret_cast<__nv_bfloat162*>(&raw.y);
  float2 a = __bfloat1622float2(lo);
  float2 b = __bfloat1622float2(hi);
  f[0] = a.x; f[1] = a.y; f[2] = b.x; f[3] = b.y;
}

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

template <bool FINAL>
__global__ void __launch_bounds__(WARPS * 32)
decode_split(const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k_cache,
             const __nv_bfloat16* __restrict__ v_cache, const int32_t* __restrict__ block_table,
             const int32_t* __restrict__ seq_lens, __nv_bfloat16* __restrict__ out,
             int heads, int64_t max_blocks, int tokens_per_split, int num_splits, float scale_log2) {
  const int s = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int len = seq_lens[b];
  const int start = s * tokens_per_split;
  const int end = min(start + tokens_per_split, len);
  const int64_t tok_stride = (int64_t)heads * D;
  const int64_t page_stride = (int64_t)PAGE * tok_stride;
  const int64_t head_off = (int64_t)h * D + lane * 4;

  float qf[4];
  load4(q + ((int64_t)b * heads + h) * D + lane * 4, qf);
#pragma unroll
  for (int i = 0; i < 4; ++i) qf[i] *= scale_log2;

  float m = -INFINITY, l = 0.f, acc[4] = {0.f, 0.f, 0.f, 0.f};
  const int32_t* bt = block_table + (int64_t)b * max_blocks;
  for (int t0 = start + warp * TOK; t0 < end; t0 += WARPS * TOK) {
    const int64_t page = bt[t0 / PAGE];
    const __nv_bfloat16* kp = k_cache + page * page_stride + (int64_t)(t0 % PAGE) * tok_stride + head_off;
    const __nv_bfloat16* vp = v_cache + page * page_stride + (int64_t)(t0 % PAGE) * tok_stride + head_off;
    const int n = min(TOK, end - t0);
    float kf[TOK][4], vf[TOK][4], sc[TOK];
#pragma unroll
    for (int i = 0; i < TOK; ++i) {  // all 16 row loads of the group in flight at once
      if (i < n) {
        load4(kp + i * tok_stride, kf[i]);
        load4(vp + i * tok_stride, vf[i]);
      } else {
#pragma unroll
        for (int j = 0; j < 4; ++j) kf[i][j] = vf[i][j] = 0.f;
      }
    }
#pragma unroll
    for (int i = 0; i < TOK; ++i)
      sc[i] = qf[0] * kf[i][0] + qf[1] * kf[i][1] + qf[2] * kf[i][2] + qf[3] * kf[i][3];
#pragma unroll
    for (int i = 0; i < TOK; ++i) sc[i] = warp_sum(sc[i]);
    float mx = m;
#pragma unroll
    for (int i = 0; i < TOK; ++i)
      if (i < n) mx = fmaxf(mx, sc[i]);
    const float alpha = exp2f(m - mx);  // m = -inf on the first group: alpha = 0
    l *= alpha;
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[j] *= alpha;
#pragma unroll
    for (int i = 0; i < TOK; ++i) {
      if (i < n) {
        const float p = exp2f(sc[i] - mx);
        l += p;
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[j] += p * vf[i][j];
      }
    }
    m = mx;
  }

  __shared__ float sm_m[WARPS], sm_l[WARPS], sm_acc[WARPS][D];
  if (lane == 0) { sm_m[warp] = m; sm_l[warp] = l; }
#pragma unroll
  for (int j = 0; j < 4; ++j) sm_acc[warp][lane * 4 + j] = acc[j];
  __syncthreads();

  const int d = threadIdx.x;  // WARPS * 32 == D: one thread per dimension
  float mm = -INFINITY;
#pragma unroll
  for (int w = 0; w < WARPS; ++w) mm = fmaxf(mm, sm_m[w]);
  float ll = 0.f, aa = 0.f;
#pragma unroll
  for (int w = 0; w < WARPS; ++w) {
    const float f = sm_m[w] == -INFINITY ? 0.f : exp2f(sm_m[w] - mm);
    ll += f * sm_l[w];
    aa += f * sm_acc[w][d];
  }
  const int64_t bh = (int64_t)b * heads + h;
  if (FINAL) {
    out[bh * D + d] = __float2bfloat16(aa / ll);
  } else {
    const int64_t part = bh * num_splits + s;
    g_part_acc[part * D + d] = aa;
    if (d == 0) { g_part_ml[part * 2] = mm; g_part_ml[part * 2 + 1] = ll; }
  }
}

__global__ void __launch_bounds__(D)
decode_merge(__nv_bfloat16* __restrict__ out, int heads, int num_splits) {
  const int h = blockIdx.x, b = blockIdx.y, d = threadIdx.x;
  const int64_t bh = (int64_t)b * heads + h;
  const float* ml = g_part_ml + bh * num_splits * 2;
  const float* acc = g_part_acc + bh * num_splits * D;
  float mm = -INFINITY;
  for (int s = 0; s < num_splits; ++s) mm = fmaxf(mm, ml[s * 2]);
  float ll = 0.f, aa = 0.f;
  for (int s = 0; s < num_splits; ++s) {
    const float ms = ml[s * 2];
    const float f = ms == -INFINITY ? 0.f : exp2f(ms - mm);
    ll += f * ml[s * 2 + 1];
    aa += f * acc[s * D + d];
  }
  out[bh * D + d] = __float2bfloat16(aa / ll);
}

int sm_count() {
  static int count = 0;
  if (count == 0) {
    int dev = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, dev);
    if (count <= 0) count = 132;
  }
  return count;
}

}  // namespace

extern "C" void run_kernel(const __nv_bfloat16* q, const __nv_bfloat16* k_cache, const __nv_bfloat16* v_cache,
                           const int32_t* block_table, const int32_t* seq_lens, __nv_bfloat16* out,
                           int64_t batch, int64_t num_heads, int64_t head_dim, int64_t page_size,
                           int64_t max_blocks) {
  if (head_dim != D || page_size != PAGE) {
    fprintf(stderr, "paged_decode.cu: built for head_dim %d and page size %d, got %lld and %lld\n", D, PAGE,
            (long long)head_dim, (long long)page_size);
    return;
  }
  const int64_t max_len = max_blocks * PAGE;
  const int64_t bh = batch * num_heads;
  // About four blocks per SM in total, each split a multiple of SPLIT_ALIGN tokens.
  int64_t want = (4 * (int64_t)sm_count() + bh - 1) / bh;
  if (want > MAX_PARTS / bh) want = MAX_PARTS / bh;
  if (want < 1) want = 1;
  int64_t per_split = (max_len + want - 1) / want;
  per_split = (per_split + SPLIT_ALIGN - 1) / SPLIT_ALIGN * SPLIT_ALIGN;
  const int num_splits = (int)((max_len + per_split - 1) / per_split);
  const float scale_log2 = 1.4426950408889634f / sqrtf((float)D);
  dim3 grid(num_splits, (unsigned)num_heads, (unsigned)batch);
  if (num_splits == 1) {
    decode_split<true><<<grid, WARPS * 32>>>(q, k_cache, v_cache, block_table, seq_lens, out, (int)num_heads,
                                             max_blocks, (int)per_split, 1, scale_log2);
  } else {
    decode_split<false><<<grid, WARPS * 32>>>(q, k_cache, v_cache, block_table, seq_lens, out, (int)num_heads,
                                              max_blocks, (int)per_split, num_splits, scale_log2);
    decode_merge<<<dim3((unsigned)num_heads, (unsigned)batch), D>>>(out, (int)num_heads, num_splits);
  }
}
