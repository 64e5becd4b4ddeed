// Correct CUDA C++ candidate: out = a + b.
#include <cstdint>

__global__ void add_kernel(const float* a, const float* b, float* out, int64_t n) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] + b[i];
}

extern "C" void run_kernel(const float* a, const float* b, float* out, int64_t n) {
  add_kernel<<<(unsigned)((n + 255) / 256), 256>>>(a, b, out, n);
}
