// Decode GEMV for a batch of activation rows (1..32) on dense bfloat16 / float16 weights, on
// the tensor cores, fused as kernels/gemv.py's and kernels/rows.py's Triton kernels are, with
// their rounding but the norm's (below). Every weight is read once per launch, whatever the rows, and loaded into
// registers before the PDL wait, as the one-row Triton kernels load theirs.
//
// The products: mma.m16n8k16 with the activations as A (16 batch rows, a row tile; rows past M
// are zeros) and the weights as B (8 weight rows, a "tile"), float32 accumulators. The K of
// every MMA is a permutation of 16 of a chunk's 128 values, the same for A and B, so each lane
// loads whole 16-byte runs of its rows and no operand is reordered: lane l (g = l / 4, c4 =
// l % 4) owns, of chunk [k0, k0 + 128), the four 8-value runs k0 + 8 (4 i + c4), i = 0..3.
// Run i's words (.x, .y) are the k-slots (2 c4, 2 c4 + 1) and (2 c4 + 8, 2 c4 + 9) of MMA 2i,
// its words (.z, .w) those of MMA 2i + 1: B is weight row g's run, A the runs of batch rows g
// and g + 8. The four lanes of a row read 64 contiguous bytes a load.
//
// Work split: CTA c owns NT tiles (8 NT weight rows: 8(c NT + t) + 0..7; GATE_UP: tile 0 the
// gate rows 8c + 0..7, tile 1 the up rows I + 8c + 0..7, for outputs 8c + 0..7) over the
// whole K. Its W warps split K by chunks (warp w: chunks w, w + W, ...; the launcher gives
// every warp at most CMAX). Before the PDL wait each lane loads its weight runs (NT x chunks x
// 4 loads of 16 bytes) and, with NORM, copies its runs of the norm weight into shared memory
// (cp.async; each lane reads back only its own). After it: the activation runs (with NORM
// each run times the norm weight, round(x * w), and its squares summed into the lane's sum for
// its row) and the MMAs. The warps' [16 x 8] sums (and with NORM the rows' sums of squares,
// over the 4 lanes of a row and then the warps) meet in shared memory (one block barrier),
// and the CTA's threads finish one output each, with NORM from acc times its row's rstd =
// rsqrt(mean(x^2) + eps): the norm takes no pass of its own over the activations. Its
// products so hold one rounding where transformers rounds twice, round(round(x * rstd) * w):
// an error of the same size, not the same bits (the Triton kernels round as transformers):
//   LINEAR    y[b, n] = round(acc + bias[n])                       (qkv: norm_linear)
//   RESIDUAL  res[b, n] = round(res[b, n] + round(acc))            (o_proj, down_proj)
//   GATE_UP   act[b, j] = round(round(silu(round(g))) * round(u))
//   HEAD      logits[b, n] = round(acc) as float32, if asked; the argmax key of (round(acc),
//             n) (kernels/gemv.py `argmax_key`: the larger value, then the lower n) maxed
//             over the CTA's rows and atomically into keys[b]
// Rows past N are loaded as row N - 1 (their sums are never stored).

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include <type_traits>

namespace {

#include "decode_common.cuh"  // Pair<T> (the dtype's conversions and rounding), FULL
#include "gemv_common.cuh"    // op codes and flags, unpack, pack, mma, argmax_key

constexpr int CHUNK = 128;  // values of a row a warp's item covers (4 lanes x 4 runs of 8)
constexpr int TILE = 8;     // weight rows of a tile (an MMA's N)
constexpr int MAX_WARPS = 16;
constexpr int MAX_ROWS = 32;  // batch rows: two row tiles

struct Args {
  const void* x;       // [M, K], rows stride_x apart
  const void* norm_w;  // [K] (NORM)
  const void* bias;    // [N] (BIAS)
  const void* w;       // [N, K], rows stride_w apart
  void* out;           // y / the residual / act [M, *] in the dtype, or float32 logits [M, N]
  unsigned long long* keys;  // [M] (HEAD with KEYS)
  int64_t stride_x, stride_w, stride_out;
  int M, N, n_out, K, chunks, op, flags;
  float eps;
};

template <typename T>
__device__ __forceinline__ float sumsq8(uint4 v, float ss) {
  const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int e = 0; e < 4; e++) {
    const float2 p = unpack<T>(words[e]);
    ss = fmaf(p.x, p.x, fmaf(p.y, p.y, ss));
  }
  return ss;
}

// 16 bytes global -> shared, asynchronously (cp.async; waited for by cp.async.wait_all).
__device__ __forceinline__ void copy16(void* dst, const void* src) {
  const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(src) : "memory");
}

// A run of 8 values times the norm weight: round(x * w).
template <typename T>
__device__ __forceinline__ uint4 weighted(uint4 v, uint4 nw) {
  const uint32_t xs[4] = {v.x, v.y, v.z, v.w};
  const uint32_t ws[4] = {nw.x, nw.y, nw.z, nw.w};
  uint32_t o[4];
#pragma unroll
  for (int e = 0; e < 4; e++) {
    const float2 p = unpack<T>(xs[e]), q = unpack<T>(ws[e]);
    o[e] = pack<T>(p.x * q.x, p.y * q.y);
  }
  return make_uint4(o[0], o[1], o[2], o[3]);
}

// MT row tiles of 16 batch rows (MT 0: one tile of which only rows 0..7 are live, M <= 8: the
// A operand's rows 8..15 are zeros, never loaded), NT weight tiles a CTA, up to CMAX chunks a
// warp.
// WMAX: the most warps a CTA of this instantiation has; MINB: CTAs an SM its registers allow
// (launch bounds: two tiles of one chunk a warp, 8 warps at most, take <= 85 registers, so
// that three CTAs fit an SM).
template <typename T, int MT_, int NT, int CMAX, int WMAX, int MINB>
__global__ void __launch_bounds__(32 * WMAX, MINB) rows_mma_kernel(const Args a) {
  using PT = Pair<T>;
  constexpr int MT = MT_ == 0 ? 1 : MT_;  // row tiles
  constexpr int H = MT_ == 0 ? 1 : 2;     // live halves of a row tile (rows g, g + 8)
  extern __shared__ float smem[];
  const int W = blockDim.x >> 5;
  float* red = smem;                        // [W][NT][MT][16 x 8]: each warp's sums
  float* ssq = red + W * NT * MT * 128;     // [W][MT * 16]: each warp's sums of squares
  // [K]: the norm weight (NORM), each lane's runs copied in by the lane itself (no barrier)
  T* nws = reinterpret_cast<T*>(ssq + W * MT * 16);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, c4 = lane & 3;
  const T* w = reinterpret_cast<const T*>(a.w);
  const T* x = reinterpret_cast<const T*>(a.x);
  const int cw = (a.chunks - warp + W - 1) / W;  // this warp's chunks (>= 1: W <= chunks)

  // This lane's weight row of each tile, clamped to the last row.
  int64_t wrow[NT];
#pragma unroll
  for (int t = 0; t < NT; t++) {
    int r;
    if (a.op == OP_GATE_UP) {
      r = (t == 0 ? 0 : a.n_out) + min(TILE * (int)blockIdx.x + g, a.n_out - 1);
    } else {
      r = min(TILE * ((int)blockIdx.x * NT + t) + g, a.N - 1);
    }
    wrow[t] = (int64_t)r * a.stride_w;
  }
  uint4 wr[CMAX][NT][4];
  const T* norm_w = reinterpret_cast<const T*>(a.norm_w);
  const bool norm = a.flags & F_NORM;
#pragma unroll
  for (int c = 0; c < CMAX; c++) {
    const int k0 = (warp + c * W) * CHUNK + 8 * c4;
    const bool mine = c < cw;
#pragma unroll
    for (int t = 0; t < NT; t++) {
#pragma unroll
      for (int i = 0; i < 4; i++) {
        wr[c][t][i] = mine ? __ldcs(reinterpret_cast<const uint4*>(w + wrow[t] + k0 + 32 * i))
                           : make_uint4(0u, 0u, 0u, 0u);
      }
    }
    if (mine && norm) {  // the norm weight's runs of this lane, copied to shared memory
#pragma unroll
      for (int i = 0; i < 4; i++) copy16(nws + k0 + 32 * i, norm_w + k0 + 32 * i);
    }
  }
  if (a.flags & F_PDL) {
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    asm volatile("griddepcontrol.wait;" ::: "memory");
  }

  // This lane's batch rows of row tile mt: 16 mt + g (h = 0) and 16 mt + g + 8 (h = 1). Their
  // runs of chunk c are loaded all at once, unconditionally (a row past M reads row M - 1 and
  // is zeroed after), so that the loads are in flight together.
  auto load_runs = [&](uint4 (&v)[2][4], int mt, int c) {
    const int k = (warp + c * W) * CHUNK + 8 * c4;
#pragma unroll
    for (int h = 0; h < 2; h++) {
      if (h < H) {
        const int b = min(16 * mt + g + 8 * h, a.M - 1);
        const T* row = x + (int64_t)b * a.stride_x + k;
#pragma unroll
        for (int i = 0; i < 4; i++) v[h][i] = *reinterpret_cast<const uint4*>(row + 32 * i);
      } else {
#pragma unroll
        for (int i = 0; i < 4; i++) v[h][i] = make_uint4(0u, 0u, 0u, 0u);
      }
    }
  };
  float ss[MT][2];  // NORM: the sum of squares of this lane's runs of rows g and g + 8
#pragma unroll
  for (int mt = 0; mt < MT; mt++) ss[mt][0] = ss[mt][1] = 0.f;

  float acc[NT][MT][4];
#pragma unroll
  for (int t = 0; t < NT; t++)
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
      acc[t][mt][0] = acc[t][mt][1] = acc[t][mt][2] = acc[t][mt][3] = 0.f;
  if (norm) asm volatile("cp.async.wait_all;" ::: "memory");  // this lane's own copies
#pragma unroll
  for (int c = 0; c < CMAX; c++) {
    if (c < cw) {
      const int k0 = (warp + c * W) * CHUNK + 8 * c4;
#pragma unroll
      for (int mt = 0; mt < MT; mt++) {
        uint4 v[2][4];
        load_runs(v, mt, c);
#pragma unroll
        for (int i = 0; i < 4; i++) {
          // NORM: the norm weight's run i (each lane's own copy) times the rows' runs i
          const uint4 wn = norm ? *reinterpret_cast<const uint4*>(nws + k0 + 32 * i) : uint4{};
#pragma unroll
          for (int h = 0; h < H; h++) {
            if (norm) {
              ss[mt][h] = sumsq8<T>(v[h][i], ss[mt][h]);
              v[h][i] = weighted<T>(v[h][i], wn);
            }
            if (16 * mt + g + 8 * h >= a.M) v[h][i] = make_uint4(0u, 0u, 0u, 0u);
          }
#pragma unroll
          for (int t = 0; t < NT; t++) {
            const uint4 b = wr[c][t][i];
            mma<T>(acc[t][mt], v[0][i].x, v[1][i].x, v[0][i].y, v[1][i].y, b.x, b.y);
            mma<T>(acc[t][mt], v[0][i].z, v[1][i].z, v[0][i].w, v[1][i].w, b.z, b.w);
          }
        }
      }
    }
  }
  // D[row][col] (batch row 16 mt + row, weight row col of tile t) to red, then meet.
#pragma unroll
  for (int t = 0; t < NT; t++) {
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
      float* r = red + ((warp * NT + t) * MT + mt) * 128;
      *reinterpret_cast<float2*>(&r[g * 8 + 2 * c4]) = make_float2(acc[t][mt][0], acc[t][mt][1]);
      *reinterpret_cast<float2*>(&r[(g + 8) * 8 + 2 * c4]) =
          make_float2(acc[t][mt][2], acc[t][mt][3]);
    }
  }
  if (norm) {  // the rows' sums of squares: over the 4 lanes of a row, then into ssq
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
#pragma unroll
      for (int h = 0; h < H; h++) {
        float s = ss[mt][h];
        s += __shfl_xor_sync(FULL, s, 1);
        s += __shfl_xor_sync(FULL, s, 2);
        if (c4 == 0) ssq[warp * MT * 16 + 16 * mt + g + 8 * h] = s;
      }
    }
  }
  __syncthreads();

  auto total = [&](int t, int b, int col) {  // the warps' sums, in warp order
    const int off = (t * MT + (b >> 4)) * 128 + (b & 15) * 8 + col;
    float s = 0.f;
    for (int v = 0; v < W; v++) s += red[v * NT * MT * 128 + off];
    return s;
  };
  // Outputs item = b * per + j: the `per` outputs of batch row b are consecutive threads.
  const int per = a.op == OP_GATE_UP ? TILE : NT * TILE;  // 8, 16 or 32: divides 32
  const int items = a.M * per;
  for (int base = 0; base < items; base += blockDim.x) {
    const int item = base + threadIdx.x;
    const bool live = item < items;
    const int b = live ? item / per : 0, j = item % per;
    float scale = 1.f;  // NORM: batch row b's rstd, from the warps' sums in warp order
    if (norm) {
      float sum = 0.f;
      for (int v = 0; v < W; v++) sum += ssq[v * MT * 16 + b];
      scale = rsqrtf(sum / a.K + a.eps);
    }
    if (a.op == OP_GATE_UP) {
      const int o = TILE * blockIdx.x + j;
      if (live && o < a.n_out) {
        const float gate = PT::rnd(total(0, b, j) * scale);
        const float up = PT::rnd(total(1, b, j) * scale);
        const float silu = PT::rnd(gate / (1.0f + __expf(-gate)));
        reinterpret_cast<T*>(a.out)[(int64_t)b * a.stride_out + o] = PT::t(silu * up);
      }
      continue;
    }
    const int t = j >> 3, col = j & 7;
    const int n = TILE * ((int)blockIdx.x * NT + t) + col;
    const bool here = live && n < a.N;
    float acc_n = here ? total(t, b, col) * scale : 0.f;
    if (a.op == OP_HEAD) {
      const float v = PT::rnd(acc_n);
      if (here && (a.flags & F_LOGITS)) {
        reinterpret_cast<float*>(a.out)[(int64_t)b * a.stride_out + n] = v;
      }
      if (a.flags & F_KEYS) {  // every lane of the warp takes part (blockDim: whole warps)
        unsigned long long key = here ? argmax_key(v, n) : 0ull;
        for (int off = per / 2; off > 0; off >>= 1) {
          const unsigned long long other = __shfl_xor_sync(FULL, key, off);
          key = other > key ? other : key;
        }
        if (live && j == 0 && key != 0ull) atomicMax(a.keys + b, key);
      }
      continue;
    }
    if (!here) continue;
    T* dst = reinterpret_cast<T*>(a.out) + (int64_t)b * a.stride_out + n;
    if (a.op == OP_RESIDUAL) {
      *dst = PT::t(PT::f(*dst) + PT::rnd(acc_n));
    } else {
      if (a.flags & F_BIAS) acc_n += PT::f(reinterpret_cast<const T*>(a.bias)[n]);
      *dst = PT::t(acc_n);
    }
  }
}

template <typename T, int MT_, int NT, int CMAX, int WMAX, int MINB>
cudaError_t launch_typed(cudaLaunchConfig_t cfg, const Args& args) {
  constexpr int MT = MT_ == 0 ? 1 : MT_;
  const int W = (int)cfg.blockDim.x / 32;
  if (W > WMAX) return cudaErrorInvalidValue;
  cfg.dynamicSmemBytes = sizeof(float) * ((size_t)W * NT * MT * 128 + (size_t)W * MT * 16) +
                         sizeof(T) * ((args.flags & F_NORM) ? (size_t)args.K : 0);
  return cudaLaunchKernelEx(&cfg, rows_mma_kernel<T, MT_, NT, CMAX, WMAX, MINB>, args);
}

template <typename T, int MT>
cudaError_t launch_tiles(const cudaLaunchConfig_t& cfg, const Args& args, int nt, int cmax) {
  switch (nt * 10 + cmax) {
    case 11: return launch_typed<T, MT, 1, 1, MAX_WARPS, 1>(cfg, args);
    case 12: return launch_typed<T, MT, 1, 2, MAX_WARPS, 1>(cfg, args);
    case 14: return launch_typed<T, MT, 1, 4, MAX_WARPS, 1>(cfg, args);
    case 21: return launch_typed<T, MT, 2, 1, 8, 3>(cfg, args);
    case 22: return launch_typed<T, MT, 2, 2, 8, 2>(cfg, args);
    default: return cudaErrorInvalidValue;
  }
}

template <typename T>
cudaError_t launch_rows(const cudaLaunchConfig_t& cfg, const Args& args, int nt, int cmax) {
  if (args.M <= 8) return launch_tiles<T, 0>(cfg, args, nt, cmax);
  if (args.M <= 16) return launch_tiles<T, 1>(cfg, args, nt, cmax);
  return launch_tiles<T, 2>(cfg, args, nt, cmax);
}

}  // namespace

// ptrs: x [M, K], norm weight [K], bias [N], weight [N, K], out (y [M, N], the residual
// [M, N], act [M, I], or the head's float32 logits [M, N]; unused pointers may be any valid
// one), keys [M] (the head's int64 argmax keys, maxed into);
// floats: eps; ints: op (0 linear, 1 residual, 2 gate_up, 3 head), M (1..32), N (weight
// rows), n_out (outputs: N, or I for gate_up), K (a multiple of 128), flags (1 norm, 2 bias,
// 16 logits, 32 keys; PDL from `pdl`), warps a CTA (1..16, at most K / 128; two tiles: at
// most 8), tiles a CTA (1 or 2; gate_up 2), chunks a warp at most (1, 2 or 4; two tiles: 1
// or 2), device;
// strides: x, weight, out (elements). dtype 0 bfloat16, 1 float16.
// Returns a cudaError_t (0: launched).
extern "C" int evk_rows_mma(int dtype, int pdl, void** p, const float* f, const int* n,
                            const int64_t* st, void* stream) {
  Args args;
  args.x = p[0];
  args.norm_w = p[1];
  args.bias = p[2];
  args.w = p[3];
  args.out = p[4];
  args.keys = reinterpret_cast<unsigned long long*>(p[5]);
  args.stride_x = st[0];
  args.stride_w = st[1];
  args.stride_out = st[2];
  args.eps = f[0];
  args.op = n[0];
  args.M = n[1];
  args.N = n[2];
  args.n_out = n[3];
  args.K = n[4];
  args.flags = (n[5] & ~F_PDL) | (pdl ? F_PDL : 0);
  const int warps = n[6], nt = n[7], cmax = n[8];
  args.chunks = args.K / CHUNK;
  if (args.op < OP_LINEAR || args.op > OP_HEAD || args.M < 1 || args.M > MAX_ROWS ||
      args.K % CHUNK != 0 || args.K < CHUNK || warps < 1 || warps > MAX_WARPS ||
      warps > args.chunks || (args.chunks + warps - 1) / warps > cmax ||
      (args.op == OP_GATE_UP && nt != 2) || args.N < 1 || args.n_out < 1)
    return (int)cudaErrorInvalidValue;
  cudaError_t err = cudaSetDevice(n[9]);
  if (err != cudaSuccess) return (int)err;
  const int ctas = args.op == OP_GATE_UP ? (args.n_out + TILE - 1) / TILE
                                         : (args.N + TILE * nt - 1) / (TILE * nt);
  cudaLaunchAttribute attr[1];
  cudaLaunchConfig_t cfg = launch_config(32 * warps, stream, pdl, attr);
  cfg.gridDim = dim3(ctas);
  if (dtype == 0) return (int)launch_rows<__nv_bfloat16>(cfg, args, nt, cmax);
  return (int)launch_rows<__half>(cfg, args, nt, cmax);
}

extern "C" const char* evk_error_string(int err) { return cudaGetErrorString((cudaError_t)err); }
