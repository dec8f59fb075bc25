// Decode GEMVs whose weight tiles are staged in shared memory by the bulk-copy engine before
// the PDL wait, so the tile holds no registers while it waits (kernels/gemv.py's counterparts
// hold theirs in registers). A CTA's registers then stay few, and more CTAs of later kernels
// fit beside it and start their own weight loads early.
//
//   norm_gate_up: act[m, n] = silu(round(Wg[n] . xn)) * round(Wu[n] . xn), xn = rms_norm(x[m])
//                 rounded as transformers rounds (kernels/gemv.py norm_gate_up_kernel).
//
// Grid cdiv(I, 8), 128 threads. CTA c owns gate rows 8c .. 8c+7 and the same up rows: two
// contiguous [rows, K] blocks of W [2I, K], copied by `cp.async.bulk` into shared memory
// against one mbarrier, issued before griddepcontrol.launch_dependents / wait. After the wait:
// each row m of x is normalised (a block reduction) into shared memory as float32, then warp w
// takes gate rows w, w+4 and the matching up rows (lane l: columns 8l + 256i), reduces over the
// warp, and lane 0 writes the product. K must be a multiple of 256, at most 1024; rows of W
// 16-byte aligned.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

namespace {

constexpr int ROWS = 8;  // gate rows (and up rows) per CTA
constexpr int WARPS = 4;
constexpr int MAX_K = 1024;
constexpr unsigned FULL = 0xffffffffu;

template <typename T> struct Num;
template <> struct Num<__nv_bfloat16> {
  static __device__ __forceinline__ float f(__nv_bfloat16 x) { return __bfloat162float(x); }
  static __device__ __forceinline__ __nv_bfloat16 t(float x) { return __float2bfloat16_rn(x); }
};
template <> struct Num<__half> {
  static __device__ __forceinline__ float f(__half x) { return __half2float(x); }
  static __device__ __forceinline__ __half t(float x) { return __float2half_rn(x); }
};
template <typename T>
__device__ __forceinline__ float rnd(float x) {
  return Num<T>::f(Num<T>::t(x));
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return (uint32_t)__cvta_generic_to_shared(p);
}

__device__ __forceinline__ void bulk_copy(void* dst, const void* src, uint32_t bytes,
                                          uint64_t* bar) {
  // Weights are read once a step: first out of L2 (as the Triton GEMVs' evict_first).
  asm volatile(
      "{\n\t.reg .b64 pol;\n\t"
      "createpolicy.fractional.L2::evict_first.b64 pol, 1.0;\n\t"
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1], %2, [%3], pol;\n\t}"
      :
      : "r"(smem_addr(dst)), "l"(src), "r"(bytes), "r"(smem_addr(bar))
      : "memory");
}

__device__ __forceinline__ void wait_phase(uint64_t* bar, uint32_t phase) {
  uint32_t done = 0;
  while (!done) {
    asm volatile(
        "{\n\t.reg .pred p;\n\t"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
        "selp.u32 %0, 1, 0, p;\n\t}"
        : "=r"(done)
        : "r"(smem_addr(bar)), "r"(phase)
        : "memory");
  }
}

template <typename T>
__global__ void __launch_bounds__(32 * WARPS) norm_gate_up_kernel(
    const T* __restrict__ x, const T* __restrict__ norm_w, const T* __restrict__ w,
    T* __restrict__ act, int M, int I, int K, int64_t stride_x, int64_t stride_w,
    int64_t stride_act, float eps) {
  __shared__ __align__(128) T tile[2 * ROWS * MAX_K];  // gate rows, then up rows
  __shared__ __align__(16) float xs[MAX_K];
  __shared__ float partial[WARPS];
  __shared__ __align__(8) uint64_t bar;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int r0 = blockIdx.x * ROWS;
  const int rows = min(ROWS, I - r0);
  const uint32_t bytes = (uint32_t)(rows * K * sizeof(T));

  if (tid == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(&bar)));
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(&bar)),
                 "r"(2 * bytes)
                 : "memory");
  }
  __syncthreads();  // the barrier is initialised and armed before any copy signals it
  if (tid < 2 * ROWS) {  // one copy per weight row: 16 copies in flight
    const int half = tid / ROWS, r = tid % ROWS;
    if (r < rows)
      bulk_copy(tile + (half * ROWS + r) * K, w + (int64_t)(half * I + r0 + r) * stride_w,
                (uint32_t)(K * sizeof(T)), &bar);
  }
  // The norm weight for this thread's columns, before the wait too.
  float nw[MAX_K / (32 * WARPS)];
#pragma unroll
  for (int i = 0; i < MAX_K / (32 * WARPS); i++) {
    const int k = tid + i * 32 * WARPS;
    nw[i] = k < K ? Num<T>::f(norm_w[k]) : 0.f;
  }

  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  asm volatile("griddepcontrol.wait;" ::: "memory");

  for (int m = 0; m < M; m++) {
    const T* xr = x + (int64_t)m * stride_x;
    float xv[MAX_K / (32 * WARPS)];
    float ss = 0.f;
#pragma unroll
    for (int i = 0; i < MAX_K / (32 * WARPS); i++) {
      const int k = tid + i * 32 * WARPS;
      xv[i] = k < K ? Num<T>::f(xr[k]) : 0.f;
      ss += xv[i] * xv[i];
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) ss += __shfl_xor_sync(FULL, ss, off);
    if (lane == 0) partial[warp] = ss;
    __syncthreads();
    float total = 0.f;
#pragma unroll
    for (int i = 0; i < WARPS; i++) total += partial[i];
    const float rstd = rsqrtf(total / K + eps);
#pragma unroll
    for (int i = 0; i < MAX_K / (32 * WARPS); i++) {
      const int k = tid + i * 32 * WARPS;
      if (k < K) xs[k] = rnd<T>(rnd<T>(xv[i] * rstd) * nw[i]);
    }
    __syncthreads();
    if (m == 0) wait_phase(&bar, 0);  // the weights have landed

    // Warp w: gate rows w, w + 4 and the same up rows; lane l: columns 8l + 256i.
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    for (int k0 = 8 * lane; k0 < K; k0 += 256) {
      const float4 xa = *reinterpret_cast<const float4*>(&xs[k0]);
      const float4 xb = *reinterpret_cast<const float4*>(&xs[k0 + 4]);
      const float xk[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
#pragma unroll
      for (int r = 0; r < 4; r++) {
        const int row = (r & 1) * ROWS + warp + 4 * (r >> 1);  // gate w, up w, gate w+4, up w+4
        const uint4 raw = *reinterpret_cast<const uint4*>(&tile[row * K + k0]);
        const T* wv = reinterpret_cast<const T*>(&raw);
#pragma unroll
        for (int e = 0; e < 8; e++) acc[r] += Num<T>::f(wv[e]) * xk[e];
      }
    }
#pragma unroll
    for (int r = 0; r < 4; r++) {
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) acc[r] += __shfl_xor_sync(FULL, acc[r], off);
    }
    if (lane == 0) {
#pragma unroll
      for (int h = 0; h < 2; h++) {
        const int n = warp + 4 * h;
        if (n < rows) {
          const float g = rnd<T>(acc[2 * h]), u = rnd<T>(acc[2 * h + 1]);
          const float s = rnd<T>(g / (1.f + __expf(-g)));
          act[(int64_t)m * stride_act + r0 + n] = Num<T>::t(s * u);
        }
      }
    }
    __syncthreads();  // xs is rewritten for the next row
  }
}

}  // namespace

// ptrs: x, norm_w, w, act; ints: M, I, K, device; strides: x, w, act. dtype 0 bf16, 1 fp16.
extern "C" int evk_norm_gate_up(int dtype, int pdl, void** p, const int* n, const int64_t* st,
                                float eps, void* stream) {
  cudaError_t err = cudaSetDevice(n[3]);
  if (err != cudaSuccess) return (int)err;
  if (n[2] % 256 != 0 || n[2] > MAX_K) return (int)cudaErrorInvalidValue;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3((n[1] + ROWS - 1) / ROWS);
  cfg.blockDim = dim3(32 * WARPS);
  cfg.stream = (cudaStream_t)stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl ? 1 : 0;
  static bool carved = false;  // all shared memory, as the other kernels of the step
  if (!carved) {
    cudaFuncSetAttribute(norm_gate_up_kernel<__nv_bfloat16>,
                         cudaFuncAttributePreferredSharedMemoryCarveout, 100);
    cudaFuncSetAttribute(norm_gate_up_kernel<__half>,
                         cudaFuncAttributePreferredSharedMemoryCarveout, 100);
    carved = true;
  }
  if (dtype == 0)
    return (int)cudaLaunchKernelEx(&cfg, norm_gate_up_kernel<__nv_bfloat16>,
                                   (const __nv_bfloat16*)p[0], (const __nv_bfloat16*)p[1],
                                   (const __nv_bfloat16*)p[2], (__nv_bfloat16*)p[3], n[0], n[1],
                                   n[2], st[0], st[1], st[2], eps);
  return (int)cudaLaunchKernelEx(&cfg, norm_gate_up_kernel<__half>, (const __half*)p[0],
                                 (const __half*)p[1], (const __half*)p[2], (__half*)p[3], n[0],
                                 n[1], n[2], st[0], st[1], st[2], eps);
}

extern "C" const char* evk_error_string(int err) { return cudaGetErrorString((cudaError_t)err); }
