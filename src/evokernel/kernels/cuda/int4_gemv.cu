// Decode GEMV for one activation row on 4-bit weights (GPTQ and AWQ as model/quant/packed.py
// holds them: `Int4Weight`), fused as the Triton kernels of kernels/quant_gemv.py are, with
// their rounding, on the tensor cores: each packed value costs under an instruction, so
// the kernel is left to keep enough 16-byte weight loads in flight.
//
// Layout read: qweight int32 [N, K/8], value k of a row at bits 4(k%8) .. 4(k%8)+3 of word
// k/8; scales [N, G] (bfloat16, float16 or float32); zero points uint8 [N, G] + zoff, or none
// (symmetric: 8). The launcher (ops/quant_cuda.py) takes K as a multiple of 128 and the group
// size as 128 times a power of two (or one group a row), so a chunk of 128 values lies in one
// group, found by a shift.
//
// The products: a warp computes a tile of 16 weight rows x 128 values (one chunk) with 8
// mma.m16n8k16 (fp32 accumulate). Lane l (g = l/4, c4 = l%4) loads 16 bytes of row g and of
// row g+8: values 32 c4 .. 32 c4 + 31 of the chunk, 4 words. A word's nibbles (i, i+4) become
// one 32-bit pair of the model dtype with one mask-and-or into the mantissa of 2^7 (bfloat16:
// 128 + q) or 2^10 (float16: 1024 + q), exact, and one paired subtract (q - 8, exact: the
// MMA's sums stay the size of the result's), so word m gives the A operands of MMAs 2m
// (nibble pairs (0,4), (1,5)) and 2m+1 ((2,6), (3,7)). The MMA's k order is thereby a
// permutation of the chunk's values; the activations are staged in shared memory in the same
// order (each 8 values' pairs (i, i+4)), so every B operand is one 16-byte shared load that 8
// lanes share; all 8 columns of B hold the same row, so every lane's accumulator holds its
// rows' sums. Per chunk: acc += s (D - (z - 8) sum x), with the chunk's float32 sum of x
// (symmetric weights: acc += s D).
//
// Grid: up to as many CTAs as fit on the GPU at once, each staging the activation row once
// (RMS-normalised when NORM, rounded as transformers rounds) and walking row groups
// blockIdx.x, + gridDim.x, ...; a group is 16 weight rows (GATE_UP: gate rows 8i .. 8i+7 and
// up rows I+8i .. I+8i+7, for outputs 8i .. 8i+7), its chunks split over the CTA's warps
// (warp w: chunks w, w + W, ...), the warps' sums met in shared memory at the group's end
// (one block barrier) and finished by warp 0 (a warp walking whole groups alone measured
// 1.2-6x slower: too few warps). The epilogues:
//   LINEAR    y[r] = round(acc + bias[r])            (qkv: norm_linear; linear)
//   RESIDUAL  res[r] = round(res[r] + round(acc))    (o_proj, down_proj)
//   GATE_UP   act[j] = round(round(silu(round(g))) * round(u))
//   HEAD      logits[r] = acc (float32), if asked; the argmax key of (acc, r) (greedy order:
//             the larger value, then the lower row; kernels/gemv.py `argmax_key`) kept per
//             CTA by warp 0 and atomically maxed into keys[0] once, at the CTA's end
// Each warp's items (group, chunk) are software-pipelined PIPE deep: the loads of item
// f + PIPE - 1 are issued before item f is computed, the first PIPE - 1 before the PDL wait
// (the weights do not depend on the previous kernel).

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include <type_traits>

namespace {

constexpr int TILE = 16;    // weight rows of a group (an MMA's M)
constexpr int CHUNK = 128;  // values of a row an item covers (4 lanes x 32)
constexpr int MAX_WARPS = 16;
// The registers a thread may take: CTAs of up to 8 warps, 3 of them an SM (85 registers; at 64
// the stages spilled: 24 warps an SM); CTAs of 9-16 warps, 2 an SM (64 registers, 32 warps).
template <int WMAX>
constexpr int min_ctas() {
  return WMAX <= 8 ? 3 : 2;
}

constexpr int F_ZEROS = 4;  // zero points given (the other flags: gemv_common.cuh)

#include "decode_common.cuh"  // Pair<T> (the dtype's conversions and rounding), warp_sum
#include "gemv_common.cuh"    // op codes and flags, unpack, pack, mma, argmax_key

// The dtype's magic: a nibble OR-ed into MAGIC's mantissa is MAGIC_VALUE + q, exact. bfloat16's
// MMA takes 128 + q (the sums keep 20 bits past the magic's part: enough for a result rounded
// to bfloat16's 8); float16's takes q - 8, CENTER subtracted first (with 1024 + q the sums lost
// float16 ulps of the result). SHIFT: what the MMA's value is over q.
template <typename T> struct Num;
template <> struct Num<__nv_bfloat16> {
  static constexpr uint32_t MAGIC = 0x43004300u;  // bfloat16 pair (128, 128)
  static constexpr bool CENTERED = false;
  static constexpr float SHIFT = 128.f;
};
template <> struct Num<__half> {
  static constexpr uint32_t MAGIC = 0x64006400u;   // float16 pair (1024, 1024)
  static constexpr uint32_t CENTER = 0x64086408u;  // (1032, 1032): 1024 + q - 1032 = q - 8
  static constexpr bool CENTERED = true;
  static constexpr float SHIFT = -8.f;
};

template <typename T>
__device__ __forceinline__ float rnd(float v) {
  return Pair<T>::rnd(v);
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

// The pair of nibbles (sh/4, sh/4 + 4) of word w as a pair of q + SHIFT in the model dtype,
// exact: (magic + q) by a mask-and-or, then (float16) minus (magic + 8).
template <typename T>
__device__ __forceinline__ uint32_t nibble_pair(uint32_t w, int sh, uint32_t magic) {
  uint32_t v;  // (w >> sh) & 0x000F000F | magic in one LOP3 (the magic in a register)
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(v) : "r"(w >> sh), "n"(0x000F000F), "r"(magic));
  if constexpr (Num<T>::CENTERED) {
    const uint32_t center = Num<T>::CENTER;
    const __half2 d = __hsub2(*reinterpret_cast<const __half2*>(&v),
                              *reinterpret_cast<const __half2*>(&center));
    return *reinterpret_cast<const uint32_t*>(&d);
  } else {
    return v;
  }
}

// What one item loads: this lane's 16 bytes of its two rows, their scales and zero points.
struct Stage {
  uint4 lo, hi;
  uint32_t s_lo, s_hi, z_lo, z_hi;
};

struct Work {
  const uint4* q;
  const void* scales;
  const uint8_t* zeros;
  int N, n_out, chunks, groups, gpc_shift, scale_code, flags, op;
};

// Where the next item's loads come from: this lane's 16 bytes of chunk 0 of its two rows of
// the group (row g and row g + 8 of the tile, clamped to the weight's last: sums of rows past
// it go to outputs nobody stores), the rows' first scale index, the item within the group and
// its chunk. Moved by counters: no division, the row addresses computed once a group.
struct Cursor {
  const uint4* q_lo;
  const uint4* q_hi;
  int64_t s_lo, s_hi;
  int i, k, c;
};

__device__ __forceinline__ void set_group(const Work& wk, int i, int g, int c4, int c0,
                                          Cursor& cu) {
  int lo, hi;
  if (wk.op == OP_GATE_UP) {
    lo = min(8 * i + g, wk.n_out - 1);
    hi = wk.n_out + lo;
  } else {
    lo = min(TILE * i + g, wk.N - 1);
    hi = min(TILE * i + g + 8, wk.N - 1);
  }
  cu.q_lo = wk.q + (int64_t)lo * wk.chunks * 4 + c4;
  cu.q_hi = wk.q + (int64_t)hi * wk.chunks * 4 + c4;
  cu.s_lo = (int64_t)lo * wk.groups;
  cu.s_hi = (int64_t)hi * wk.groups;
  cu.i = i;
  cu.k = 0;
  cu.c = c0;
}

__device__ __forceinline__ void load_stage(const Work& wk, const Cursor& cu, Stage& st) {
  st.lo = __ldcs(cu.q_lo + cu.c * 4);
  st.hi = __ldcs(cu.q_hi + cu.c * 4);
  const int grp = cu.c >> wk.gpc_shift;  // the chunk's scale group (shift 31: one group)
  st.s_lo = load_scale_bits(wk.scales, cu.s_lo + grp, wk.scale_code);
  st.s_hi = load_scale_bits(wk.scales, cu.s_hi + grp, wk.scale_code);
  if (wk.flags & F_ZEROS) {
    st.z_lo = __ldg(wk.zeros + cu.s_lo + grp);
    st.z_hi = __ldg(wk.zeros + cu.s_hi + grp);
  } else {
    st.z_lo = st.z_hi = 0u;
  }
}

template <typename T>
__device__ __forceinline__ void compute_stage(const Work& wk, const Stage& st, int c, int c4,
                                              int zoff, uint32_t magic, const uint32_t* xp,
                                              const float* xsum, float& acc_lo, float& acc_hi) {
  // B operands: words (c * 4 + c4) * 16 .. + 15, two per MMA
  const uint4* b4 = reinterpret_cast<const uint4*>(xp + (c * 4 + c4) * 16);
  // Two accumulators (MMAs 2m and 2m + 1): chains of 4 dependent MMAs, not 8.
  float d0[4] = {0.f, 0.f, 0.f, 0.f}, d1[4] = {0.f, 0.f, 0.f, 0.f};
  const uint32_t lo[4] = {st.lo.x, st.lo.y, st.lo.z, st.lo.w};
  const uint32_t hi[4] = {st.hi.x, st.hi.y, st.hi.z, st.hi.w};
#pragma unroll
  for (int m = 0; m < 4; m++) {
    const uint4 b = b4[m];  // MMA 2m: b.x, b.y; MMA 2m + 1: b.z, b.w
    mma<T>(d0, nibble_pair<T>(lo[m], 0, magic), nibble_pair<T>(hi[m], 0, magic),
                nibble_pair<T>(lo[m], 4, magic), nibble_pair<T>(hi[m], 4, magic), b.x, b.y);
    mma<T>(d1, nibble_pair<T>(lo[m], 8, magic), nibble_pair<T>(hi[m], 8, magic),
                nibble_pair<T>(lo[m], 12, magic), nibble_pair<T>(hi[m], 12, magic), b.z, b.w);
  }
  // sum (q + SHIFT) x, then minus (SHIFT + z) sum x
  const float sx = xsum[c];
  const float z_lo = (wk.flags & F_ZEROS) ? (float)((int)st.z_lo + zoff) : 8.f;
  const float z_hi = (wk.flags & F_ZEROS) ? (float)((int)st.z_hi + zoff) : 8.f;
  const float y_lo = fmaf(-(Num<T>::SHIFT + z_lo), sx, d0[0] + d1[0]);
  const float y_hi = fmaf(-(Num<T>::SHIFT + z_hi), sx, d0[2] + d1[2]);
  acc_lo = fmaf(scale_value(st.s_lo, wk.scale_code), y_lo, acc_lo);
  acc_hi = fmaf(scale_value(st.s_hi, wk.scale_code), y_hi, acc_hi);
}

// Output row `row` (< N) of a LINEAR or RESIDUAL op from its sum a.
template <typename T>
__device__ __forceinline__ void store_row(const Work& wk, int row, float a, const T* bias, T* out) {
  if (wk.op == OP_RESIDUAL) {
    out[row] = Pair<T>::t(Pair<T>::f(out[row]) + rnd<T>(a));
  } else {
    if (wk.flags & F_BIAS) a += Pair<T>::f(bias[row]);
    out[row] = Pair<T>::t(a);
  }
}

// GATE_UP's output from the gate and up sums.
template <typename T>
__device__ __forceinline__ T silu_mul(float gate, float up) {
  const float g = rnd<T>(gate);
  const float silu = rnd<T>(g / (1.0f + __expf(-g)));
  return Pair<T>::t(silu * rnd<T>(up));
}

// The group's rows from the warps' sums (red [W][16]), by warp 0's lanes 0..15 (split groups).
// HEAD: the logits stored if asked, this lane's best key so far in `best`.
template <typename T, bool HEAD>
__device__ __forceinline__ void finish_group(const Work& wk, int i, int lane, int warps,
                                             const float* red, const T* bias, T* out,
                                             float* logits, unsigned long long& best) {
  float a = 0.f;
  if (lane < TILE) {
    for (int w = 0; w < warps; w++) a += red[w * TILE + lane];
  }
  if constexpr (HEAD) {
    const int row = TILE * i + lane;
    if (lane < TILE && row < wk.N) {
      if (wk.flags & F_LOGITS) logits[row] = a;
      const unsigned long long key = argmax_key(a, row);
      best = key > best ? key : best;
    }
    return;
  }
  if (wk.op == OP_GATE_UP) {
    const float u = __shfl_down_sync(FULL, a, 8);
    const int o = 8 * i + lane;
    if (lane < 8 && o < wk.n_out) out[o] = silu_mul<T>(a, u);
    return;
  }
  const int row = TILE * i + lane;
  if (lane < TILE && row < wk.N) store_row<T>(wk, row, a, bias, out);
}

// The activation row into shared memory in the MMAs' k order: each 8 values x0..x7 as the
// pairs (x0, x4), (x1, x5), (x2, x6), (x3, x7) of the model dtype (RMS-normalised first when
// NORM), and xsum[c] the float32 sum of chunk c's 128 values. red: 32 floats.
template <typename T>
__device__ __forceinline__ void stage_x(const T* x, const T* norm_w, int K, float eps, int flags,
                                        uint32_t* xp, float* xsum, float* red) {
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
        const float2 p = unpack<T>(words[e]);
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
  // Trip counts uniform per warp (blockDim is a multiple of 32, vecs of 16): the sums shuffle.
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
        float2 p = unpack<T>(words[e]);
        if (flags & F_NORM) {
          const float2 wn = unpack<T>(nwords[e]);
          p.x = rnd<T>(rnd<T>(p.x * rstd) * wn.x);
          p.y = rnd<T>(rnd<T>(p.y * rstd) * wn.y);
        }
        vals[2 * e] = p.x;
        vals[2 * e + 1] = p.y;
      }
      reinterpret_cast<uint4*>(xp)[v] =
          make_uint4(pack<T>(vals[0], vals[4]), pack<T>(vals[1], vals[5]),
                     pack<T>(vals[2], vals[6]), pack<T>(vals[3], vals[7]));
#pragma unroll
      for (int e = 0; e < 8; e++) part += vals[e];
    }
    // 16 consecutive loads make a chunk of 128 values
#pragma unroll
    for (int off = 1; off < 16; off <<= 1) part += __shfl_xor_sync(FULL, part, off);
    if (v < vecs && (v & 15) == 0) xsum[v >> 4] = part;
  }
  __syncthreads();
}

// HEAD: the head's kernel (op OP_HEAD), apart so that the other ops' registers stay as they were.
template <typename T, int PIPE, int WMAX, bool HEAD>
__global__ void __launch_bounds__(32 * WMAX, min_ctas<WMAX>()) int4_gemv_kernel(
    const T* __restrict__ x, const T* __restrict__ norm_w, const T* __restrict__ bias,
    const uint4* __restrict__ q, const void* __restrict__ scales,
    const uint8_t* __restrict__ zeros, T* out, float* logits, unsigned long long* keys, int op,
    int N, int n_out, int K, int groups, int gpc_shift, int scale_code, int zoff, int flags,
    float eps) {
  extern __shared__ uint32_t smem[];
  uint32_t* xp = smem;                                  // K / 2 words
  float* xsum = reinterpret_cast<float*>(xp + K / 2);  // K / 128
  float* red = xsum + K / CHUNK;                        // [2][W][16] (and 32 for the norm)
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, W = blockDim.x >> 5;
  const int g = lane >> 2, c4 = lane & 3;

  Work wk;
  wk.q = q;
  wk.scales = scales;
  wk.zeros = zeros;
  wk.N = N;
  wk.n_out = n_out;
  wk.chunks = K / CHUNK;
  wk.groups = groups;
  wk.gpc_shift = gpc_shift;
  wk.scale_code = scale_code;
  wk.flags = flags;
  wk.op = op;
  const int n_groups = op == OP_GATE_UP ? (n_out + 7) / 8 : (N + TILE - 1) / TILE;
  // The CTA walks groups blockIdx.x, + gridDim.x, ...; warp w takes chunks w, w + W, ... of
  // each (the launcher gives W <= chunks: every warp has chunks in every group, so it meets
  // the same block barriers).
  const int team = blockIdx.x, stride = gridDim.x, c0 = warp, cstep = W;
  const int cw = (wk.chunks - warp + W - 1) / W;
  const int mine = team < n_groups ? (n_groups - team + stride - 1) / stride : 0;
  const int items = mine * cw;

  // Item f: group team + (f / cw) stride, chunk c0 + (f % cw) cstep, walked by counters (a
  // division by a run-time value is ~20 instructions; they were half of the loop's).
  Cursor next;  // the next item to load
  set_group(wk, team, g, c4, c0, next);
  auto advance = [&](Cursor& cu) {
    if (++cu.k == cw) {
      set_group(wk, cu.i + stride, g, c4, c0, cu);
    } else {
      cu.c += cstep;
    }
  };
  Stage st[PIPE];
#pragma unroll
  for (int p = 0; p < PIPE - 1; p++) {
    if (p < items) {
      load_stage(wk, next, st[p]);
      advance(next);
    }
  }
  if (flags & F_PDL) {
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    asm volatile("griddepcontrol.wait;" ::: "memory");
  }
  stage_x<T>(x, norm_w, K, eps, flags, xp, xsum, red);
  uint32_t magic;  // in a register, opaque to the compiler (else it splits each LOP3 in two)
  asm("mov.b32 %0, %1;" : "=r"(magic) : "n"(Num<T>::MAGIC));

  float acc_lo = 0.f, acc_hi = 0.f;
  unsigned long long best = 0ull;  // HEAD: warp 0's lanes' best keys (0: below every key)
  int buf = 0, i = team, k = 0;  // the item computed
  for (int f0 = 0; f0 < items; f0 += PIPE) {
#pragma unroll
    for (int p = 0; p < PIPE; p++) {
      const int f = f0 + p;
      if (f < items) {
        if (f + PIPE - 1 < items) {
          load_stage(wk, next, st[(p + PIPE - 1) % PIPE]);
          advance(next);
        }
        compute_stage<T>(wk, st[p], c0 + k * cstep, c4, zoff, magic, xp, xsum, acc_lo, acc_hi);
        if (k == cw - 1) {  // the group's end
          float* r = red + buf * W * TILE;  // meet the other warps
          if (c4 == 0) {
            r[warp * TILE + g] = acc_lo;
            r[warp * TILE + g + 8] = acc_hi;
          }
          __syncthreads();
          if (warp == 0) finish_group<T, HEAD>(wk, i, lane, W, r, bias, out, logits, best);
          buf ^= 1;
          acc_lo = acc_hi = 0.f;
        }
        if (++k == cw) {
          k = 0;
          i += stride;
        }
      }
    }
  }
  if (HEAD && (flags & F_KEYS) && warp == 0) {  // one atomic a CTA
#pragma unroll
    for (int off = 8; off > 0; off >>= 1) {
      const unsigned long long other = __shfl_xor_sync(FULL, best, off);
      best = other > best ? other : best;
    }
    if (lane == 0 && best != 0ull) atomicMax(keys, best);
  }
}

template <typename T, int PIPE, int WMAX, bool HEAD = false>
cudaError_t launch_typed(const cudaLaunchConfig_t& base, void** a, const float* f, const int* n,
                         int flags, int n_groups) {
  cudaLaunchConfig_t cfg = base;
  auto kernel = int4_gemv_kernel<T, PIPE, WMAX, HEAD>;
  const int K = n[3];
  const int W = (int)cfg.blockDim.x / 32;
  const size_t smem = sizeof(uint32_t) * ((size_t)K / 2 + K / CHUNK + 2 * W * TILE + 32);
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
  grid = grid < n_groups ? grid : n_groups;
  cfg.gridDim = dim3(grid > 0 ? grid : 1);
  cfg.dynamicSmemBytes = smem;
  return cudaLaunchKernelEx(&cfg, kernel, (const T*)a[0], (const T*)a[1], (const T*)a[2],
                            (const uint4*)a[3], (const void*)a[4], (const uint8_t*)a[5], (T*)a[6],
                            (float*)a[6], (unsigned long long*)a[7], n[0], n[1], n[2], K, n[4],
                            n[5], n[6], n[7], flags, f[0]);
}

}  // namespace

// ptrs: x [K], norm weight [K], bias [N], qweight [N, K/8] int32, scales [N, G], zeros [N, G]
// (unused pointers may be any valid one), out (y [N], the residual [N], act [I], or the head's
// float32 logits [N]), keys (the head's int64 argmax key, maxed into);
// floats: eps; ints: op (0 linear, 1 residual, 2 gate_up, 3 head), N (weight rows), n_out
// (outputs: N, or I for gate_up), K (a multiple of 128), G (groups a row), log2 of the chunks
// of 128 a group (a power of two; 31 for one group a row), scale dtype (0 bfloat16, 1 float16,
// 2 float32), zero offset, flags (1 norm, 2 bias, 4 zero points, 16 logits, 32 keys; PDL
// from `pdl`), warps a CTA (1..16, lowered to K / 128; the head 1..8), pipeline depth (2 or
// 3; 2 beyond 8 warps: registers), CTAs an SM (0: as many as fit), device. dtype 0 bfloat16,
// 1 float16. Returns a cudaError_t (0: launched).
extern "C" int evk_int4_gemv(int dtype, int pdl, void** a, const float* f, const int* n,
                             const int64_t* st, void* stream) {
  (void)st;
  const int K = n[3], pipe = n[10];
  if (n[9] < 1 || n[9] > MAX_WARPS || K % CHUNK != 0 || K < CHUNK || n[5] < 0 || n[5] > 31 ||
      n[0] < 0 || n[0] > OP_HEAD)
    return (int)cudaErrorInvalidValue;
  const int warps = n[9] < K / CHUNK ? n[9] : K / CHUNK;
  cudaError_t err = cudaSetDevice(n[12]);
  if (err != cudaSuccess) return (int)err;
  cudaLaunchAttribute attr[1];
  const cudaLaunchConfig_t cfg = launch_config(32 * warps, stream, pdl, attr);
  const int n_groups = n[0] == OP_GATE_UP ? (n[2] + 7) / 8 : (n[1] + TILE - 1) / TILE;
  const int flags = (n[8] & ~F_PDL) | (pdl ? F_PDL : 0);
  const bool head = n[0] == OP_HEAD;
  if (head && warps > 8) return (int)cudaErrorInvalidValue;  // the head's kernel: up to 8 warps
#define EVK_PIPE(T)                                                                  \
  switch ((warps > 8 ? 2 : pipe) * 100 + (warps > 8 ? 16 : 8) + (head ? 1000 : 0)) { \
    case 1208: return (int)launch_typed<T, 2, 8, true>(cfg, a, f, n, flags, n_groups); \
    case 1308: return (int)launch_typed<T, 3, 8, true>(cfg, a, f, n, flags, n_groups); \
    case 208: return (int)launch_typed<T, 2, 8>(cfg, a, f, n, flags, n_groups);     \
    case 308: return (int)launch_typed<T, 3, 8>(cfg, a, f, n, flags, n_groups);     \
    case 216: return (int)launch_typed<T, 2, 16>(cfg, a, f, n, flags, n_groups);    \
    case 316: return (int)launch_typed<T, 3, 16>(cfg, a, f, n, flags, n_groups);    \
    default: return (int)cudaErrorInvalidValue;                                     \
  }
  if (dtype == 0) {
    EVK_PIPE(__nv_bfloat16)
  }
  EVK_PIPE(__half)
#undef EVK_PIPE
}

extern "C" const char* evk_error_string(int err) { return cudaGetErrorString((cudaError_t)err); }
