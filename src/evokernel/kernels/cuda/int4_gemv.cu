// Decode GEMV for one activation row on 4-bit weights (GPTQ and AWQ as model/quant/packed.py
// holds them: `Int4Weight`), fused as the Triton kernels of kernels/quant_gemv.py are, with
// their rounding, on the tensor cores: each packed value costs under an instruction, so
// the kernel is left to keep enough 16-byte weight loads in flight.
//
// Layout read: qweight int32 [N, K/8], value k of a row at bits 4(k%8) .. 4(k%8)+3 of word
// k/8; scales [N, G] (bfloat16, float16 or float32); zero points uint8 [N, G] + zoff, or none
// (symmetric: 8). The launcher (ops/quant_cuda.py) takes K as a multiple of 128 and the group
// size as a multiple of 128 (or one group a row), so a chunk of 128 values lies in one group.
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
// Each warp's items (group, chunk) are software-pipelined PIPE deep through shared memory:
// the copies of item f + PIPE - 1 (cp.async: no registers held while they fly) are issued
// before item f is computed, the first PIPE - 1 before the PDL wait (the weights do not
// depend on the previous kernel). Holding the stages in registers instead capped the depth
// at 2-3 (64 registers a thread for 32 warps an SM) and the loads in flight with it.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

namespace {

constexpr int TILE = 16;    // weight rows of a group (an MMA's M)
constexpr int CHUNK = 128;  // values of a row an item covers (4 lanes x 32)
constexpr int MAX_WARPS = 16;
// Resident CTAs of MAX_WARPS an SM the registers must allow: 64 registers a thread, 32 warps an
// SM (the MMA chains and loads in flight want warps more than registers).
constexpr int MIN_CTAS = 2;
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
  static constexpr uint32_t MAGIC = 0x43004300u;   // bfloat16 pair (128, 128)
  static constexpr uint32_t CENTER = 0x43084308u;  // (136, 136): 128 + q - 136 = q - 8
  // The MMA takes 128 + q (the sums keep 20 bits past the magic's part: enough for a result
  // rounded to bfloat16's 8), so no subtract.
  static constexpr bool CENTERED = false;
  static constexpr float SHIFT = 128.f;
  static __device__ __forceinline__ uint32_t sub(uint32_t a, uint32_t b) {
    const __nv_bfloat162 d = __hsub2(*reinterpret_cast<const __nv_bfloat162*>(&a),
                                     *reinterpret_cast<const __nv_bfloat162*>(&b));
    return *reinterpret_cast<const uint32_t*>(&d);
  }
  static __device__ __forceinline__ float f(__nv_bfloat16 v) { return __bfloat162float(v); }
  static __device__ __forceinline__ __nv_bfloat16 t(float v) { return __float2bfloat16_rn(v); }
  static __device__ __forceinline__ float2 f2(uint32_t bits) {
    return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&bits));
  }
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    const __nv_bfloat162 p = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&p);
  }
  static __device__ __forceinline__ void mma(float (&d)[4], uint32_t a0, uint32_t a1,
                                             uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
};
template <> struct Num<__half> {
  static constexpr uint32_t MAGIC = 0x64006400u;   // float16 pair (1024, 1024)
  static constexpr uint32_t CENTER = 0x64086408u;  // (1032, 1032): 1024 + q - 1032 = q - 8
  // The MMA takes q - 8: with 1024 + q the sums lost float16 ulps of the result.
  static constexpr bool CENTERED = true;
  static constexpr float SHIFT = -8.f;
  static __device__ __forceinline__ uint32_t sub(uint32_t a, uint32_t b) {
    const __half2 d = __hsub2(*reinterpret_cast<const __half2*>(&a),
                              *reinterpret_cast<const __half2*>(&b));
    return *reinterpret_cast<const uint32_t*>(&d);
  }
  static __device__ __forceinline__ float f(__half v) { return __half2float(v); }
  static __device__ __forceinline__ __half t(float v) { return __float2half_rn(v); }
  static __device__ __forceinline__ float2 f2(uint32_t bits) {
    return __half22float2(*reinterpret_cast<const __half2*>(&bits));
  }
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    const __half2 p = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&p);
  }
  static __device__ __forceinline__ void mma(float (&d)[4], uint32_t a0, uint32_t a1,
                                             uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
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

// The scale of index gi from the 4-byte word holding it. code 0 bfloat16, 1 float16, 2 float32.
__device__ __forceinline__ float scale_value(uint32_t word, int64_t gi, int code) {
  if (code == 2) return __uint_as_float(word);
  const uint32_t bits = (word >> (16 * (int)(gi & 1))) & 0xFFFFu;
  if (code == 0) return __uint_as_float(bits << 16);
  return __half2float(__ushort_as_half((unsigned short)bits));
}

// The pair of nibbles (sh/4, sh/4 + 4) of word w as a pair of q + SHIFT in the model dtype,
// exact: (magic + q) by a mask-and-or, then (float16) minus (magic + 8).
template <typename T>
__device__ __forceinline__ uint32_t nibble_pair(uint32_t w, int sh) {
  const uint32_t v = ((w >> sh) & 0x000F000Fu) | Num<T>::MAGIC;
  return Num<T>::CENTERED ? Num<T>::sub(v, Num<T>::CENTER) : v;
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return (uint32_t)__cvta_generic_to_shared(p);
}

// Asynchronous copies global -> shared (not through registers): 16 bytes through L2 only,
// 4 bytes through L1; a commit closes this thread's group of copies, a wait leaves at most N
// of its groups in flight.
__device__ __forceinline__ void cp16(void* dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_addr(dst)), "l"(src)
               : "memory");
}
__device__ __forceinline__ void cp4(void* dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(smem_addr(dst)), "l"(src)
               : "memory");
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// A lane's part of one pipeline stage in shared memory: its 16 bytes of rows g and g + 8 and
// the 4-byte words holding their scales and zero points (48 bytes: a warp's LDS.128 of the
// rows then falls in distinct banks 8 lanes at a time). Each lane reads back only what it
// copied, so a lane's own cp.async wait is the only ordering needed.
struct Slot {
  uint4 lo, hi;
  uint32_t s_lo, s_hi, z_lo, z_hi;
};

struct Work {
  const uint4* q;
  const void* scales;
  const uint8_t* zeros;
  int N, n_out, chunks, groups, gpc, scale_code, flags, op;
};

// This lane's two weight rows of group i (row g and row g + 8 of the tile). Rows past the
// weight are clamped to its last: their sums go to outputs nobody stores.
__device__ __forceinline__ int2 lane_rows(const Work& wk, int i, int g) {
  if (wk.op == OP_GATE_UP) {
    const int out = min(8 * i + g, wk.n_out - 1);
    return make_int2(out, wk.n_out + out);
  }
  const int lo = TILE * i + g;
  return make_int2(min(lo, wk.N - 1), min(lo + 8, wk.N - 1));
}

__device__ __forceinline__ int64_t group_index(const Work& wk, int row, int c) {
  return (int64_t)row * wk.groups + c / wk.gpc;
}

// The copies of item (group i, chunk c) into this lane's slot.
__device__ __forceinline__ void issue(const Work& wk, int i, int c, int g, int c4, Slot* slot) {
  const int2 rows = lane_rows(wk, i, g);
  cp16(&slot->lo, wk.q + ((int64_t)rows.x * wk.chunks + c) * 4 + c4);
  cp16(&slot->hi, wk.q + ((int64_t)rows.y * wk.chunks + c) * 4 + c4);
  const int esize = wk.scale_code == 2 ? 4 : 2;
  const char* sb = reinterpret_cast<const char*>(wk.scales);
  const int64_t g_lo = group_index(wk, rows.x, c), g_hi = group_index(wk, rows.y, c);
  cp4(&slot->s_lo, sb + ((g_lo * esize) & ~(int64_t)3));
  cp4(&slot->s_hi, sb + ((g_hi * esize) & ~(int64_t)3));
  if (wk.flags & F_ZEROS) {
    cp4(&slot->z_lo, wk.zeros + (g_lo & ~(int64_t)3));
    cp4(&slot->z_hi, wk.zeros + (g_hi & ~(int64_t)3));
  }
}

template <typename T>
__device__ __forceinline__ void compute_item(const Work& wk, const Slot* slot, int i, int c,
                                             int g, int c4, int zoff, const uint32_t* xp,
                                             const float* xsum, float& acc_lo, float& acc_hi) {
  const uint4 wl = slot->lo, wh = slot->hi;
  // B operands: words (c * 4 + c4) * 16 .. + 15, two per MMA
  const uint4* b4 = reinterpret_cast<const uint4*>(xp + (c * 4 + c4) * 16);
  // Two accumulators (MMAs 2m and 2m + 1): chains of 4 dependent MMAs, not 8.
  float d0[4] = {0.f, 0.f, 0.f, 0.f}, d1[4] = {0.f, 0.f, 0.f, 0.f};
  const uint32_t lo[4] = {wl.x, wl.y, wl.z, wl.w};
  const uint32_t hi[4] = {wh.x, wh.y, wh.z, wh.w};
#pragma unroll
  for (int m = 0; m < 4; m++) {
    const uint4 b = b4[m];  // MMA 2m: b.x, b.y; MMA 2m + 1: b.z, b.w
    Num<T>::mma(d0, nibble_pair<T>(lo[m], 0), nibble_pair<T>(hi[m], 0),
                nibble_pair<T>(lo[m], 4), nibble_pair<T>(hi[m], 4), b.x, b.y);
    Num<T>::mma(d1, nibble_pair<T>(lo[m], 8), nibble_pair<T>(hi[m], 8),
                nibble_pair<T>(lo[m], 12), nibble_pair<T>(hi[m], 12), b.z, b.w);
  }
  const int2 rows = lane_rows(wk, i, g);
  const int64_t g_lo = group_index(wk, rows.x, c), g_hi = group_index(wk, rows.y, c);
  // sum (q + SHIFT) x, then minus (SHIFT + z) sum x
  const float sx = xsum[c];
  float z_lo = 8.f, z_hi = 8.f;
  if (wk.flags & F_ZEROS) {
    z_lo = (float)((int)((slot->z_lo >> (8 * (int)(g_lo & 3))) & 0xFFu) + zoff);
    z_hi = (float)((int)((slot->z_hi >> (8 * (int)(g_hi & 3))) & 0xFFu) + zoff);
  }
  const float y_lo = fmaf(-(Num<T>::SHIFT + z_lo), sx, d0[0] + d1[0]);
  const float y_hi = fmaf(-(Num<T>::SHIFT + z_hi), sx, d0[2] + d1[2]);
  acc_lo = fmaf(scale_value(slot->s_lo, g_lo, wk.scale_code), y_lo, acc_lo);
  acc_hi = fmaf(scale_value(slot->s_hi, g_hi, wk.scale_code), y_hi, acc_hi);
}

// Output row `row` (< N) of a LINEAR or RESIDUAL op from its sum a.
template <typename T>
__device__ __forceinline__ void store_row(const Work& wk, int row, float a, const T* bias, T* out) {
  if (wk.op == OP_RESIDUAL) {
    out[row] = Num<T>::t(Num<T>::f(out[row]) + rnd<T>(a));
  } else {
    if (wk.flags & F_BIAS) a += Num<T>::f(bias[row]);
    out[row] = Num<T>::t(a);
  }
}

// GATE_UP's output from the gate and up sums.
template <typename T>
__device__ __forceinline__ T silu_mul(float gate, float up) {
  const float g = rnd<T>(gate);
  const float silu = rnd<T>(g / (1.0f + __expf(-g)));
  return Num<T>::t(silu * rnd<T>(up));
}

// The group's rows from the warps' sums (red [W][16]), by warp 0's lanes 0..15 (split groups).
template <typename T>
__device__ __forceinline__ void finish_group(const Work& wk, int i, int lane, int warps,
                                             const float* red, const T* bias, T* out) {
  float a = 0.f;
  if (lane < TILE) {
    for (int w = 0; w < warps; w++) a += red[w * TILE + lane];
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
        float2 p = Num<T>::f2(words[e]);
        if (flags & F_NORM) {
          const float2 wn = Num<T>::f2(nwords[e]);
          p.x = rnd<T>(rnd<T>(p.x * rstd) * wn.x);
          p.y = rnd<T>(rnd<T>(p.y * rstd) * wn.y);
        }
        vals[2 * e] = p.x;
        vals[2 * e + 1] = p.y;
      }
      reinterpret_cast<uint4*>(xp)[v] =
          make_uint4(Num<T>::pack(vals[0], vals[4]), Num<T>::pack(vals[1], vals[5]),
                     Num<T>::pack(vals[2], vals[6]), Num<T>::pack(vals[3], vals[7]));
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

template <typename T, int PIPE>
__global__ void __launch_bounds__(32 * MAX_WARPS, MIN_CTAS) int4_gemv_kernel(
    const T* __restrict__ x, const T* __restrict__ norm_w, const T* __restrict__ bias,
    const uint4* __restrict__ q, const void* __restrict__ scales,
    const uint8_t* __restrict__ zeros, T* out, int op, int N, int n_out, int K, int groups,
    int gpc, int scale_code, int zoff, int flags, float eps) {
  extern __shared__ uint32_t smem[];
  uint32_t* xp = smem;                                  // K / 2 words
  float* xsum = reinterpret_cast<float*>(xp + K / 2);  // K / 128
  float* red = xsum + K / CHUNK;                        // [2][W][16] (and 32 for the norm)
  const int W0 = blockDim.x >> 5;
  // the stages: [W][PIPE][32] Slots, 16-byte aligned
  uint32_t* slots_base = smem + ((K / 2 + K / CHUNK + 2 * W0 * TILE + 32 + 3) & ~3);
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
  wk.gpc = gpc;
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

  // Item f: group team + (f / cw) stride, chunk c0 + (f % cw) cstep, in stage f % PIPE.
  Slot* my = reinterpret_cast<Slot*>(slots_base) + warp * PIPE * 32 + lane;
#pragma unroll
  for (int p = 0; p < PIPE - 1; p++) {
    if (p < items) issue(wk, team + (p / cw) * stride, c0 + (p % cw) * cstep, g, c4, my + p * 32);
    cp_commit();
  }
  if (flags & F_PDL) {
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    asm volatile("griddepcontrol.wait;" ::: "memory");
  }
  stage_x<T>(x, norm_w, K, eps, flags, xp, xsum, red);

  float acc_lo = 0.f, acc_hi = 0.f;
  int buf = 0;
  for (int f = 0; f < items; f++) {
    const int ahead = f + PIPE - 1;
    if (ahead < items)
      issue(wk, team + (ahead / cw) * stride, c0 + (ahead % cw) * cstep, g, c4,
            my + (ahead % PIPE) * 32);
    cp_commit();
    cp_wait<PIPE - 1>();  // item f's copies have landed
    const int k = f % cw, i = team + (f / cw) * stride;
    compute_item<T>(wk, my + (f % PIPE) * 32, i, c0 + k * cstep, g, c4, zoff, xp, xsum, acc_lo,
                    acc_hi);
    if (k == cw - 1) {  // the group's end: meet the other warps
      float* r = red + buf * W * TILE;
      if (c4 == 0) {
        r[warp * TILE + g] = acc_lo;
        r[warp * TILE + g + 8] = acc_hi;
      }
      __syncthreads();
      if (warp == 0) finish_group<T>(wk, i, lane, W, r, bias, out);
      buf ^= 1;
      acc_lo = acc_hi = 0.f;
    }
  }
  cp_wait<0>();
}

template <typename T, int PIPE>
cudaError_t launch_typed(const cudaLaunchConfig_t& base, void** a, const float* f, const int* n,
                         int flags, int n_groups) {
  cudaLaunchConfig_t cfg = base;
  auto kernel = int4_gemv_kernel<T, PIPE>;
  const int K = n[3];
  const int W = (int)cfg.blockDim.x / 32;
  const size_t smem = sizeof(uint32_t) * (((size_t)K / 2 + K / CHUNK + 2 * W * TILE + 32 + 3) & ~3) +
                      sizeof(Slot) * (size_t)W * PIPE * 32;
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
                            n[0], n[1], n[2], K, n[4], n[5], n[6], n[7], flags, f[0]);
}

}  // namespace

// ptrs: x [K], norm weight [K], bias [N], qweight [N, K/8] int32, scales [N, G], zeros [N, G]
// (unused pointers may be any valid one), out (y [N], the residual [N], or act [I]);
// floats: eps; ints: op (0 linear, 1 residual, 2 gate_up), N (weight rows), n_out (outputs:
// N, or I for gate_up), K (a multiple of 128), G (groups a row), chunks of 128 a group
// (the group size / 128, or K / 128 for one group), scale dtype (0 bfloat16, 1 float16,
// 2 float32), zero offset, flags (1 norm, 2 bias, 4 zero points; PDL from `pdl`), warps a CTA
// (1..16, lowered to K / 128), pipeline depth (4, 6 or 8), CTAs an SM (0: as many as fit),
// device. dtype 0 bfloat16, 1 float16. Returns a cudaError_t (0: launched).
extern "C" int evk_int4_gemv(int dtype, int pdl, void** a, const float* f, const int* n,
                             const int64_t* st, void* stream) {
  (void)st;
  const int K = n[3], pipe = n[10];
  if (n[9] < 1 || n[9] > MAX_WARPS || K % CHUNK != 0 || K < CHUNK || n[5] < 1 || n[0] < 0 ||
      n[0] > 2)
    return (int)cudaErrorInvalidValue;
  const int warps = n[9] < K / CHUNK ? n[9] : K / CHUNK;
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
  const int n_groups = n[0] == OP_GATE_UP ? (n[2] + 7) / 8 : (n[1] + TILE - 1) / TILE;
  const int flags = (n[8] & ~F_PDL) | (pdl ? F_PDL : 0);
#define EVK_PIPE(T)                                                         \
  switch (pipe) {                                                          \
    case 4: return (int)launch_typed<T, 4>(cfg, a, f, n, flags, n_groups); \
    case 6: return (int)launch_typed<T, 6>(cfg, a, f, n, flags, n_groups); \
    case 8: return (int)launch_typed<T, 8>(cfg, a, f, n, flags, n_groups); \
    default: return (int)cudaErrorInvalidValue;                            \
  }
  if (dtype == 0) {
    EVK_PIPE(__nv_bfloat16)
  }
  EVK_PIPE(__half)
#undef EVK_PIPE
}

extern "C" const char* evk_error_string(int err) { return cudaGetErrorString((cudaError_t)err); }
