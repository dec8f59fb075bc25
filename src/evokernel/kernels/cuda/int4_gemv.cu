// Decode GEMV for one activation row on 4-bit weights (GPTQ and AWQ as model/quant/packed.py
// holds them: `Int4Weight`), fused as the Triton kernels of kernels/quant_gemv.py are, with
// their rounding. Streaming: every SM keeps many 16-byte weight loads in flight, and each
// packed value costs three instructions (a mask-and-or, a subtract, a fused multiply-add).
//
// Layout read: qweight int32 [N, K/8], value k of a row at bits 4(k%8) .. 4(k%8)+3 of word
// k/8; scales [N, G] (bfloat16, float16 or float32); zero points uint8 [N, G] + zoff, or none
// (symmetric: 8). The launcher (ops/quant_cuda.py) takes K and the group size as multiples of
// 32, so a lane's 16-byte chunk (32 values, `CHUNK`) lies in one group.
//
// Grid: persistent, at most as many CTAs as fit on the GPU at once. After the PDL wait each
// CTA stages the activation row once into shared memory, as float32: RMS-normalised when NORM
// (rounded as transformers rounds), value k multiplied by 16^-(k%4) (exact), plus each chunk's
// sum of the unscaled values. Before the wait each warp has already asked for its first
// weights (they do not depend on the previous kernel).
//
// Work: warp w of the grid owns row groups w, w + warps, ...; a group is ROWS = 4 weight rows
// (GATE_UP: gate rows 2j, 2j+1 and up rows I+2j, I+2j+1, for outputs 2j, 2j+1), walked in
// items of one 16-byte chunk per lane per row (a row's chunks c = 32 it + lane). Items are
// software-pipelined PIPE deep: the loads of item f + PIPE - 1 are issued before item f is
// computed. A nibble at bits 4i of a 16-bit half (i = 0..3) is masked in place and OR-ed
// into the mantissa of 2^23: the float is 2^23 + q 16^i exactly, minus 2^23 is q 16^i, and
// times the staged x 16^-i is q x. Per chunk: acc += s (sum q x - z sum x). A group ends with
// a warp reduction and the epilogue:
//   LINEAR    y[r] = round(acc + bias[r])            (qkv: norm_linear; linear)
//   RESIDUAL  res[r] = round(res[r] + round(acc))    (o_proj, down_proj)
//   GATE_UP   act[j] = round(round(silu(round(g))) * round(u))

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

namespace {

constexpr int ROWS = 4;    // weight rows a warp works on at once
constexpr int CHUNK = 32;  // values in a lane's 16-byte load
constexpr int MAX_WARPS = 16;
constexpr float TWO23 = 8388608.0f;
constexpr unsigned FULL = 0xffffffffu;

[[maybe_unused]] constexpr int OP_LINEAR = 0;
constexpr int OP_RESIDUAL = 1;
constexpr int OP_GATE_UP = 2;

constexpr int F_NORM = 1;
constexpr int F_BIAS = 2;
constexpr int F_ZEROS = 4;
constexpr int F_PDL = 8;

template <typename T> struct Num;
template <> struct Num<__nv_bfloat16> {
  static __device__ __forceinline__ float f(__nv_bfloat16 v) { return __bfloat162float(v); }
  static __device__ __forceinline__ __nv_bfloat16 t(float v) { return __float2bfloat16_rn(v); }
  static __device__ __forceinline__ float2 f2(uint32_t bits) {
    return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&bits));
  }
};
template <> struct Num<__half> {
  static __device__ __forceinline__ float f(__half v) { return __half2float(v); }
  static __device__ __forceinline__ __half t(float v) { return __float2half_rn(v); }
  static __device__ __forceinline__ float2 f2(uint32_t bits) {
    return __half22float2(*reinterpret_cast<const __half2*>(&bits));
  }
};

template <typename T>
__device__ __forceinline__ float rnd(float v) {
  return Num<T>::f(Num<T>::t(v));
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(FULL, v, off);
  return v;
}

// A scale's raw bits (loaded early, converted when used). code 0 bfloat16, 1 float16, 2 float32.
__device__ __forceinline__ uint32_t load_scale_bits(const void* s, int64_t i, int code) {
  if (code == 2) return __ldg(reinterpret_cast<const uint32_t*>(s) + i);
  return __ldg(reinterpret_cast<const unsigned short*>(s) + i);
}

__device__ __forceinline__ float scale_value(uint32_t bits, int code) {
  if (code == 0) return __uint_as_float(bits << 16);
  if (code == 1) return __half2float(__ushort_as_half((unsigned short)bits));
  return __uint_as_float(bits);
}

// What one item loads: this lane's chunk of each of the group's rows, with its scale and
// zero point (raw).
struct Stage {
  uint4 w[ROWS];
  uint32_t s[ROWS];
  uint32_t z[ROWS];
};

struct Work {
  const uint4* q;
  const void* scales;
  const uint8_t* zeros;
  int N, n_out, chunks, iters, groups, gpg, scale_code, flags, op;
};

// Weight row r (0..ROWS-1) of row group j, or -1 past the weight.
__device__ __forceinline__ int weight_row(const Work& wk, int j, int r) {
  if (wk.op == OP_GATE_UP) {
    const int out = 2 * j + (r & 1);
    if (out >= wk.n_out) return -1;
    return r < 2 ? out : wk.n_out + out;
  }
  const int row = ROWS * j + r;
  return row < wk.N ? row : -1;
}

__device__ __forceinline__ void load_stage(const Work& wk, int j, int it, int lane, Stage& st) {
  const int c = it * 32 + lane;
  const bool live_c = c < wk.chunks;
#pragma unroll
  for (int r = 0; r < ROWS; r++) {
    const int row = weight_row(wk, j, r);
    if (row >= 0 && live_c) {
      st.w[r] = __ldcs(wk.q + (int64_t)row * wk.chunks + c);
      const int64_t g = (int64_t)row * wk.groups + c / wk.gpg;
      st.s[r] = load_scale_bits(wk.scales, g, wk.scale_code);
      st.z[r] = (wk.flags & F_ZEROS) ? (uint32_t)__ldg(wk.zeros + g) : 0u;
    } else {
      st.w[r] = make_uint4(0u, 0u, 0u, 0u);
      st.s[r] = 0u;
      st.z[r] = 0u;
    }
  }
}

// sum over a 32-bit word's 8 values of q * x (xs: the staged x of those 8 values).
__device__ __forceinline__ float word_dot(uint32_t w, const float* xv) {
  const uint32_t hi = w >> 16;
  float a = 0.f, b = 0.f;
#pragma unroll
  for (int i = 0; i < 4; i++) {
    const float tl = __uint_as_float((w & (0xFu << (4 * i))) | 0x4B000000u) - TWO23;
    const float th = __uint_as_float((hi & (0xFu << (4 * i))) | 0x4B000000u) - TWO23;
    a = fmaf(tl, xv[i], a);
    b = fmaf(th, xv[4 + i], b);
  }
  return a + b;
}

__device__ __forceinline__ void compute_stage(const Work& wk, const Stage& st, int it, int lane,
                                              int zoff, const float* xs, const float* xsum,
                                              float* acc) {
  const int c = it * 32 + lane;
  if (c >= wk.chunks) return;
  const float4* x4 = reinterpret_cast<const float4*>(xs + c * CHUNK);
  float d[ROWS] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
  for (int m = 0; m < 4; m++) {  // the chunk's 4 words, 8 values each
    const float4 lo = x4[2 * m], hi = x4[2 * m + 1];
    const float xv[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
    for (int r = 0; r < ROWS; r++) {
      const uint32_t w = m == 0 ? st.w[r].x : m == 1 ? st.w[r].y : m == 2 ? st.w[r].z : st.w[r].w;
      d[r] += word_dot(w, xv);
    }
  }
  const float sx = xsum[c];
#pragma unroll
  for (int r = 0; r < ROWS; r++) {
    const float z = (wk.flags & F_ZEROS) ? (float)((int)st.z[r] + zoff) : 8.f;
    acc[r] = fmaf(scale_value(st.s[r], wk.scale_code), fmaf(-z, sx, d[r]), acc[r]);
  }
}

template <typename T>
__device__ __forceinline__ void finish_group(const Work& wk, int j, int lane, float* acc,
                                             const T* bias, T* out) {
#pragma unroll
  for (int r = 0; r < ROWS; r++) acc[r] = warp_sum(acc[r]);
  if (wk.op == OP_GATE_UP) {
    if (lane < 2) {
      const int o = 2 * j + lane;
      if (o < wk.n_out) {
        const float g = rnd<T>(lane == 0 ? acc[0] : acc[1]);
        const float u = rnd<T>(lane == 0 ? acc[2] : acc[3]);
        const float silu = rnd<T>(g / (1.0f + __expf(-g)));
        out[o] = Num<T>::t(silu * u);
      }
    }
  } else if (lane < ROWS) {
    const int row = ROWS * j + lane;
    float a = acc[0];
#pragma unroll
    for (int r = 1; r < ROWS; r++) a = lane == r ? acc[r] : a;
    if (row < wk.N) {
      if (wk.op == OP_RESIDUAL) {
        out[row] = Num<T>::t(Num<T>::f(out[row]) + rnd<T>(a));
      } else {
        if (wk.flags & F_BIAS) a += Num<T>::f(bias[row]);
        out[row] = Num<T>::t(a);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < ROWS; r++) acc[r] = 0.f;
}

// The activation row into shared memory: xs[k] = x_k 16^-(k%4), xsum[c] = the chunk's sum of
// x_k, x RMS-normalised first when NORM. red: 32 floats for the block reduction.
template <typename T>
__device__ __forceinline__ void stage_x(const T* x, const T* norm_w, int K, float eps, int flags,
                                        float* xs, float* xsum, float* red) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nw = blockDim.x >> 5;
  const int vecs = K / 8;  // 8 values a 16-byte load
  const uint4* x8 = reinterpret_cast<const uint4*>(x);
  float rstd = 1.f;
  if (flags & F_NORM) {
    float ss = 0.f;
    for (int v = tid; v < vecs; v += blockDim.x) {
      const uint4 raw = x8[v];
      const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const float2 p = Num<T>::f2(words[e]);
        ss = fmaf(p.x, p.x, fmaf(p.y, p.y, ss));
      }
    }
    ss = warp_sum(ss);
    if (lane == 0) red[warp] = ss;
    __syncthreads();
    float total = 0.f;
    for (int i = 0; i < nw; i++) total += red[i];
    rstd = rsqrtf(total / K + eps);
  }
  const uint4* w8 = reinterpret_cast<const uint4*>(norm_w);
  // Trip counts uniform per warp (blockDim is a multiple of 32): the chunk sums shuffle.
  for (int base = 0; base < vecs; base += blockDim.x) {
    const int v = base + tid;
    float part = 0.f;
    if (v < vecs) {
      const uint4 raw = x8[v];
      const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
      uint32_t nwords[4] = {0u, 0u, 0u, 0u};
      if (flags & F_NORM) {
        const uint4 nraw = w8[v];
        nwords[0] = nraw.x;
        nwords[1] = nraw.y;
        nwords[2] = nraw.z;
        nwords[3] = nraw.w;
      }
      float vals[8];
#pragma unroll
      for (int e = 0; e < 4; e++) {
        float2 p = Num<T>::f2(words[e]);
        if (flags & F_NORM) {
          const float2 wn = Num<T>::f2(nwords[e]);
          p.x = rnd<T>(rnd<T>(p.x * rstd) * wn.x);
          p.y = rnd<T>(rnd<T>(p.y * rstd) * wn.y);
        }
        vals[2 * e] = p.x;
        vals[2 * e + 1] = p.y;
      }
      const float inv16[4] = {1.f, 0.0625f, 0.00390625f, 0.000244140625f};
      float4* dst = reinterpret_cast<float4*>(xs + 8 * v);
      dst[0] = make_float4(vals[0], vals[1] * inv16[1], vals[2] * inv16[2], vals[3] * inv16[3]);
      dst[1] = make_float4(vals[4], vals[5] * inv16[1], vals[6] * inv16[2], vals[7] * inv16[3]);
#pragma unroll
      for (int e = 0; e < 8; e++) part += vals[e];
    }
    // 4 consecutive loads make a chunk of 32 values
    part += __shfl_xor_sync(FULL, part, 1);
    part += __shfl_xor_sync(FULL, part, 2);
    if (v < vecs && (v & 3) == 0) xsum[v >> 2] = part;
  }
  __syncthreads();
}

template <typename T, int PIPE>
__global__ void __launch_bounds__(32 * MAX_WARPS) int4_gemv_kernel(
    const T* __restrict__ x, const T* __restrict__ norm_w, const T* __restrict__ bias,
    const uint4* __restrict__ q, const void* __restrict__ scales,
    const uint8_t* __restrict__ zeros, T* out, int op, int N, int n_out, int K, int groups,
    int gpg, int scale_code, int zoff, int flags, float eps) {
  extern __shared__ float smem[];
  float* xs = smem;
  float* xsum = xs + K;
  float* red = xsum + K / CHUNK;
  const int lane = threadIdx.x & 31;
  const int warps = gridDim.x * (blockDim.x >> 5);
  const int gw = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);

  Work wk;
  wk.q = q;
  wk.scales = scales;
  wk.zeros = zeros;
  wk.N = N;
  wk.n_out = n_out;
  wk.chunks = K / CHUNK;
  wk.iters = (wk.chunks + 31) / 32;
  wk.groups = groups;
  wk.gpg = gpg;
  wk.scale_code = scale_code;
  wk.flags = flags;
  wk.op = op;
  const int n_groups = op == OP_GATE_UP ? (n_out + 1) / 2 : (N + ROWS - 1) / ROWS;
  const int mine = gw < n_groups ? (n_groups - gw + warps - 1) / warps : 0;
  const int items = mine * wk.iters;

  // Items f = 0, 1, ...: row group gw + (f / iters) warps, chunk pass f % iters.
  Stage st[PIPE];
#pragma unroll
  for (int p = 0; p < PIPE - 1; p++) {
    if (p < items) load_stage(wk, gw + (p / wk.iters) * warps, p % wk.iters, lane, st[p]);
  }
  if (flags & F_PDL) {
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    asm volatile("griddepcontrol.wait;" ::: "memory");
  }
  stage_x<T>(x, norm_w, K, eps, flags, xs, xsum, red);

  float acc[ROWS] = {0.f, 0.f, 0.f, 0.f};
  for (int f0 = 0; f0 < items; f0 += PIPE) {
#pragma unroll
    for (int p = 0; p < PIPE; p++) {
      const int f = f0 + p;
      if (f < items) {
        const int ahead = f + PIPE - 1;
        if (ahead < items)
          load_stage(wk, gw + (ahead / wk.iters) * warps, ahead % wk.iters, lane,
                     st[(p + PIPE - 1) % PIPE]);
        const int it = f % wk.iters;
        const int j = gw + (f / wk.iters) * warps;
        compute_stage(wk, st[p], it, lane, zoff, xs, xsum, acc);
        if (it == wk.iters - 1) finish_group<T>(wk, j, lane, acc, bias, out);
      }
    }
  }
}

template <typename T, int PIPE>
cudaError_t launch_typed(const cudaLaunchConfig_t& base, void** a, const float* f, const int* n,
                         int flags, int grid_cap) {
  cudaLaunchConfig_t cfg = base;
  auto kernel = int4_gemv_kernel<T, PIPE>;
  const int K = n[3];
  const size_t smem = sizeof(float) * ((size_t)K + K / CHUNK + 32);
  cudaError_t err = cudaSuccess;
  if (smem > 48 * 1024) {
    err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (err != cudaSuccess) return err;
  }
  int per_sm = 0, sms = 0, device = 0;
  err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, (int)cfg.blockDim.x, smem);
  if (err != cudaSuccess) return err;
  if (per_sm < 1) return cudaErrorInvalidConfiguration;
  err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (err != cudaSuccess) return err;
  int grid = per_sm * sms;
  if (n[11] > 0 && n[11] < per_sm) grid = n[11] * sms;  // CTAs an SM, when asked for fewer
  grid = grid < grid_cap ? grid : grid_cap;
  cfg.gridDim = dim3(grid > 0 ? grid : 1);
  cfg.dynamicSmemBytes = smem;
  return cudaLaunchKernelEx(&cfg, kernel, (const T*)a[0], (const T*)a[1], (const T*)a[2],
                            (const uint4*)a[3], (const void*)a[4], (const uint8_t*)a[5], (T*)a[6],
                            n[0], n[1], n[2], K, n[4], n[5], n[6], n[7], flags, f[0]);
}

}  // namespace

// ptrs: x [K], norm weight [K], bias [N], qweight [N, K/8] int32, scales [N, G], zeros [N, G]
// (unused pointers may be any valid one), out (y [N], the residual [N], or act [I]);
// floats: eps; ints: op (0 linear, 1 residual, 2 gate_up), N (weight rows), n_out (outputs:
// N, or I for gate_up), K (a multiple of 32), G (groups a row), chunks per group (the group
// size / 32), scale dtype (0 bfloat16, 1 float16, 2 float32), zero offset, flags (1 norm,
// 2 bias, 4 zero points; PDL from `pdl`), warps a CTA (1..16), pipeline depth (2 or 3), CTAs an SM (0:
// as many as fit), device. dtype 0 bfloat16, 1 float16. Returns a cudaError_t (0: launched).
extern "C" int evk_int4_gemv(int dtype, int pdl, void** a, const float* f, const int* n,
                             const int64_t* st, void* stream) {
  (void)st;
  const int warps = n[9], pipe = n[10];
  if (warps < 1 || warps > MAX_WARPS || n[3] % CHUNK != 0 || n[5] < 1 || n[0] < 0 || n[0] > 2)
    return (int)cudaErrorInvalidValue;
  cudaError_t err = cudaSetDevice(n[12]);
  if (err != cudaSuccess) return (int)err;
  cudaLaunchConfig_t cfg = {};
  cfg.blockDim = dim3(32 * warps);
  cfg.stream = (cudaStream_t)stream;
  cudaLaunchAttribute attr[1];
  cfg.attrs = attr;
  cfg.numAttrs = 0;
  if (pdl) {
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.numAttrs = 1;
  }
  const int n_groups = n[0] == OP_GATE_UP ? (n[2] + 1) / 2 : (n[1] + ROWS - 1) / ROWS;
  const int grid_cap = (n_groups + warps - 1) / warps;
  const int flags = (n[8] & ~F_PDL) | (pdl ? F_PDL : 0);
#define EVK_PIPE(T)                                                        \
  switch (pipe) {                                                         \
    case 2: return (int)launch_typed<T, 2>(cfg, a, f, n, flags, grid_cap);       \
    case 3: return (int)launch_typed<T, 3>(cfg, a, f, n, flags, grid_cap);       \
    default: return (int)cudaErrorInvalidValue;                           \
  }
  if (dtype == 0) {
    EVK_PIPE(__nv_bfloat16)
  }
  EVK_PIPE(__half)
#undef EVK_PIPE
}

extern "C" const char* evk_error_string(int err) { return cudaGetErrorString((cudaError_t)err); }
