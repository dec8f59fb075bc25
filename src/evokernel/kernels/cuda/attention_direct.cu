// GQA decode attention for short contexts in one pass, one CTA per (sequence, kv head), with
// the new token's q/k RMSNorm, RoPE and cache append fused (the CUDA C++ counterpart of
// kernels/attention.py's FUSED, DIRECT, CUDA-core path, for head_dim 128 and G = 2 or 4 query
// heads per kv head: Qwen3-0.6B has 2, Qwen3-4B/8B and Llama-3-8B 4). No split, so no second
// launch to merge chunks.
//
// Grid (B * Hkv * CL), 32 * W threads, a cluster of CL CTAs per (sequence, kv head) (CL = 1:
// no cluster), W = cdiv(bound, 16 TILES CL) <= 16 warps. Warp w of cluster rank r owns the
// TILES (1 or 2) tiles of 16 cache rows at 16(i W CL + rW + w) .. +15 of [0, seq_lens[b]),
// i < TILES, and the G query heads Gj .. Gj+G-1, scored a pair of heads at a time
// (decode_common.cuh's tile_score); its online-softmax state (max, sum, accumulator per head,
// float32, base 2), carried from its first tile to its second, is merged with the other warps'
// once,
// through shared memory (one block barrier). With CL = 1 the CTA then writes out[b, h, :] in
// the dtype; with CL > 1 each CTA leaves its merged state in its shared memory, and after a
// cluster barrier rank 0 merges the CL states through distributed shared memory and writes
// out (a second cluster barrier keeps the others' shared memory alive until it has read).
// Lane l owns dims 2l, 2l+1 of each head's low half and 64+2l, 64+2l+1 of its high half, so
// RoPE's pairs (i, i+64) sit in one lane and every vector access is coalesced.
//
// Before the PDL wait (griddepcontrol): seq_len, the position, its cos/sin, the norm weights
// and the warp's first 16 K and V rows into registers (written by earlier steps); with two
// tiles, its second tile's rows into its 8 KB of shared memory too (cp.async, each lane the 4
// bytes of each row half it reads back, zeros past seq_len), read back after the first tile's
// products. After it: the new token's q, k, v
// (every warp loads and normalises them itself, in parallel); the per-head RMSNorm then RoPE,
// rounded as transformers rounds; the append of k, v at the position by the warp whose rows
// hold it, which also counts the new row from registers; the warp's 32 partial dot products
// a lane per pair of heads (16 rows x 2 heads) reduce-scattered over the warp (31 shuffles),
// so lane 16g + r holds the score of the pair's head g, row r; rows at or past seq_len or at
// the position skipped; the probabilities rounded to the dtype for the value product. Positions at or past seq_lens[b]
// are never read.

#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

namespace {

namespace cg = cooperative_groups;

#include "decode_common.cuh"

constexpr int MAX_WARPS = 16;  // bounds up to 256 positions
constexpr int MAX_CLUSTER = 8;  // portable cluster size: bounds up to 2,048 positions

// 4 bytes global -> shared, asynchronously; zeros, without a read, where !live.
__device__ __forceinline__ void copy4(void* dst, const void* src, bool live) {
  const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(s), "l"(src),
               "r"(live ? 4 : 0)
               : "memory");
}

// A head's 16 probabilities of a tile, from the warp's shared-memory row (16-byte reads).
__device__ __forceinline__ void load_probs(const float* src, float (&pr)[ROWS]) {
#pragma unroll
  for (int i = 0; i < ROWS; i += 4) {
    const float4 f = *reinterpret_cast<const float4*>(src + i);
    pr[i] = f.x;
    pr[i + 1] = f.y;
    pr[i + 2] = f.z;
    pr[i + 3] = f.w;
  }
}

constexpr int STAGE_WORDS = ROWS * 4 * 32;  // a warp's staged tile: [row][k lo, k hi, v lo, v hi][lane]

template <typename T, int G, int TILES>
__global__ void __launch_bounds__(32 * MAX_WARPS) attention_direct_kernel(
    const T* __restrict__ qkv, const T* __restrict__ q_norm, const T* __restrict__ k_norm,
    const float* __restrict__ cos_t, const float* __restrict__ sin_t, const int* pos_ptr,
    const int* seq_lens, T* k_cache, T* v_cache, T* out, float scale, float eps, int hkv, int cl,
    int S, int P, int64_t stride_qb, int64_t stride_kb, int64_t stride_kh, int64_t stride_ks,
    int64_t stride_vb, int64_t stride_vh, int64_t stride_vs, int64_t stride_ob,
    int64_t stride_oh) {
  using PT = Pair<T>;
  using V = typename PT::V;
  static_assert(G % GROUP == 0 && G <= 4, "pairs of query heads, at most 4 a kv head");
  constexpr int PAIRS = G / GROUP;
  __shared__ float sm_m[MAX_WARPS][G], sm_l[MAX_WARPS][G];
  __shared__ __align__(16) float sm_acc[MAX_WARPS][G][D];
  __shared__ __align__(16) float sp[MAX_WARPS][G * ROWS];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const int head = blockIdx.x / cl, rank = blockIdx.x % cl;  // a cluster's CTAs are adjacent
  const int b = head / hkv, j = head % hkv;
  const int hq = hkv * G;

  const int seq_len = seq_lens[b];  // stable: set before this step began
  const int row0 = (rank * warps + warp) * ROWS;
  const int row1 = row0 + ROWS * warps * cl;  // the second tile (TILES == 2)
  const T* k_base = k_cache + (int64_t)b * stride_kb + (int64_t)j * stride_kh;
  const T* v_base = v_cache + (int64_t)b * stride_vb + (int64_t)j * stride_vh;
  Tile<T> t;
  const V zero = PT::v2(0.f, 0.f);
#pragma unroll
  for (int r = 0; r < ROWS; r++) {
    const bool live = row0 + r < seq_len;
    const V* k = reinterpret_cast<const V*>(k_base + (int64_t)(row0 + r) * stride_ks);
    const V* v = reinterpret_cast<const V*>(v_base + (int64_t)(row0 + r) * stride_vs);
    t.k_lo[r] = live ? __ldcs(k + lane) : zero;
    t.k_hi[r] = live ? __ldcs(k + HALF / 2 + lane) : zero;
    t.v_lo[r] = live ? __ldcs(v + lane) : zero;
    t.v_hi[r] = live ? __ldcs(v + HALF / 2 + lane) : zero;
  }
  extern __shared__ uint32_t stage[];  // TILES == 2: [warps][STAGE_WORDS]
  uint32_t* st = stage + warp * STAGE_WORDS + lane;
  if constexpr (TILES == 2) {
    if (row1 < seq_len) {
#pragma unroll
      for (int r = 0; r < ROWS; r++) {
        const bool live = row1 + r < seq_len;
        const int64_t row = live ? row1 + r : 0;
        const V* k = reinterpret_cast<const V*>(k_base + row * stride_ks);
        const V* v = reinterpret_cast<const V*>(v_base + row * stride_vs);
        copy4(st + (4 * r + 0) * 32, k + lane, live);
        copy4(st + (4 * r + 1) * 32, k + HALF / 2 + lane, live);
        copy4(st + (4 * r + 2) * 32, v + lane, live);
        copy4(st + (4 * r + 3) * 32, v + HALF / 2 + lane, live);
      }
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
  }
  const int pos = pos_ptr[b];
  const bool in_table = pos >= 0 && pos < P;
  float2 c = make_float2(0.f, 0.f), sn = make_float2(0.f, 0.f);
  if (in_table) {
    c = reinterpret_cast<const float2*>(cos_t + (int64_t)pos * HALF)[lane];
    sn = reinterpret_cast<const float2*>(sin_t + (int64_t)pos * HALF)[lane];
  }
  c = make_float2(PT::rnd(c.x), PT::rnd(c.y));
  sn = make_float2(PT::rnd(sn.x), PT::rnd(sn.y));
  const Quad qw = load_quad(q_norm, lane), kw = load_quad(k_norm, lane);

  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  asm volatile("griddepcontrol.wait;" ::: "memory");

  float m_run[G], l_run[G];
  Quad acc[G];
#pragma unroll
  for (int g = 0; g < G; g++) {
    m_run[g] = -INFINITY;
    l_run[g] = 0.f;
    acc[g].lo = make_float2(0.f, 0.f);
    acc[g].hi = make_float2(0.f, 0.f);
  }
  if (row0 < seq_len) {  // a warp with no live row only joins the merges
    const T* row_b = qkv + (int64_t)b * stride_qb;
    Quad q[G];
#pragma unroll
    for (int g = 0; g < G; g++) q[g] = load_quad(row_b + (j * G + g) * D, lane);
    Quad kn = load_quad(row_b + (hq + j) * D, lane);
    const Quad vn = load_quad(row_b + (hq + hkv + j) * D, lane);
#pragma unroll
    for (int g = 0; g < G; g++) q[g] = norm_rope<T>(q[g], qw, c, sn, eps);
    kn = norm_rope<T>(kn, kw, c, sn, eps);
    const float qk_scale = scale * 1.4426950408889634f;
    const bool mine = row0 <= pos && pos < row0 + ROWS;  // this warp's first tile holds the new row
    const bool mine1 = TILES == 2 && row1 <= pos && pos < row1 + ROWS;  // its second tile does
    if ((mine || mine1) && pos < S && in_table) {
      auto* kd = reinterpret_cast<V*>(k_cache + (int64_t)b * stride_kb + (int64_t)j * stride_kh +
                                      (int64_t)pos * stride_ks);
      auto* vd = reinterpret_cast<V*>(v_cache + (int64_t)b * stride_vb + (int64_t)j * stride_vh +
                                      (int64_t)pos * stride_vs);
      kd[lane] = PT::v2(kn.lo.x, kn.lo.y);
      kd[HALF / 2 + lane] = PT::v2(kn.hi.x, kn.hi.y);
      vd[lane] = PT::v2(vn.lo.x, vn.lo.y);
      vd[HALF / 2 + lane] = PT::v2(vn.hi.x, vn.hi.y);
    }
    float s_new[G];
#pragma unroll
    for (int g = 0; g < G; g++) s_new[g] = warp_sum(dot4(q[g], kn.lo, kn.hi)) * qk_scale;

    const int g_mine = lane >> 4;  // this lane's head within a pair
#pragma unroll
    for (int p = 0; p < PAIRS; p++) {  // heads 2p, 2p+1: lane 16g + r scores head 2p+g, row r
      const float score = tile_score(t, q + GROUP * p, row0, seq_len, pos, qk_scale, lane);
      float mt = score;
#pragma unroll
      for (int off = 8; off > 0; off >>= 1) mt = fmaxf(mt, __shfl_xor_sync(FULL, mt, off));
      const float m_other = __shfl_xor_sync(FULL, mt, 16);
      const float m_tile[GROUP] = {g_mine == 0 ? mt : m_other, g_mine == 0 ? m_other : mt};
#pragma unroll
      for (int g = 0; g < GROUP; g++) {
        const int h = GROUP * p + g;
        m_run[h] = mine ? fmaxf(m_tile[g], s_new[h]) : m_tile[g];
      }
      // m_run is finite: the warp has a live row, or holds the new one (its first row is pos).
      const float pb = ex2(score - (g_mine == 0 ? m_run[GROUP * p] : m_run[GROUP * p + 1]));
      float lt = pb;
#pragma unroll
      for (int off = 8; off > 0; off >>= 1) lt += __shfl_xor_sync(FULL, lt, off);
      const float l_other = __shfl_xor_sync(FULL, lt, 16);
      l_run[GROUP * p] = g_mine == 0 ? lt : l_other;
      l_run[GROUP * p + 1] = g_mine == 0 ? l_other : lt;
      sp[warp][GROUP * ROWS * p + lane] = PT::rnd(pb);  // in the dtype, for the value product
    }
    __syncwarp();
#pragma unroll
    for (int g = 0; g < G; g++) {
      const float fn = mine ? ex2(s_new[g] - m_run[g]) : 0.f;  // the new row's weight
      l_run[g] += fn;
      float pr[ROWS];
      load_probs(&sp[warp][g * ROWS], pr);
      Quad a;
      a.lo = make_float2(vn.lo.x * fn, vn.lo.y * fn);
      a.hi = make_float2(vn.hi.x * fn, vn.hi.y * fn);
      acc[g] = add_values(a, t, pr);
    }
    if constexpr (TILES == 2) {
      if (row1 < seq_len) {  // the second tile, from shared memory: the state rescaled
        asm volatile("cp.async.wait_all;" ::: "memory");  // this lane's own copies
#pragma unroll
        for (int r = 0; r < ROWS; r++) {
          const uint32_t w4[4] = {st[(4 * r + 0) * 32], st[(4 * r + 1) * 32],
                                  st[(4 * r + 2) * 32], st[(4 * r + 3) * 32]};
          t.k_lo[r] = *reinterpret_cast<const V*>(&w4[0]);
          t.k_hi[r] = *reinterpret_cast<const V*>(&w4[1]);
          t.v_lo[r] = *reinterpret_cast<const V*>(&w4[2]);
          t.v_hi[r] = *reinterpret_cast<const V*>(&w4[3]);
        }
        float rescale[G];
        __syncwarp();  // every lane has read the first tile's probabilities
#pragma unroll
        for (int p = 0; p < PAIRS; p++) {
          const float score = tile_score(t, q + GROUP * p, row1, seq_len, pos, qk_scale, lane);
          float mt = score;
#pragma unroll
          for (int off = 8; off > 0; off >>= 1) mt = fmaxf(mt, __shfl_xor_sync(FULL, mt, off));
          const float m_other = __shfl_xor_sync(FULL, mt, 16);
          const float m_tile[GROUP] = {g_mine == 0 ? mt : m_other, g_mine == 0 ? m_other : mt};
          float m_new[GROUP];
#pragma unroll
          for (int g = 0; g < GROUP; g++) {
            const int h = GROUP * p + g;
            m_new[g] = fmaxf(m_run[h], mine1 ? fmaxf(m_tile[g], s_new[h]) : m_tile[g]);
            rescale[h] = ex2(m_run[h] - m_new[g]);  // m_run finite: the first tile is live
            m_run[h] = m_new[g];
          }
          const float pb = ex2(score - (g_mine == 0 ? m_new[0] : m_new[1]));
          float lt = pb;
#pragma unroll
          for (int off = 8; off > 0; off >>= 1) lt += __shfl_xor_sync(FULL, lt, off);
          const float l_other = __shfl_xor_sync(FULL, lt, 16);
          l_run[GROUP * p] = l_run[GROUP * p] * rescale[GROUP * p] + (g_mine == 0 ? lt : l_other);
          l_run[GROUP * p + 1] =
              l_run[GROUP * p + 1] * rescale[GROUP * p + 1] + (g_mine == 0 ? l_other : lt);
          sp[warp][GROUP * ROWS * p + lane] = PT::rnd(pb);
        }
        __syncwarp();
#pragma unroll
        for (int g = 0; g < G; g++) {
          const float fn = mine1 ? ex2(s_new[g] - m_run[g]) : 0.f;
          l_run[g] += fn;
          float pr[ROWS];
          load_probs(&sp[warp][g * ROWS], pr);
          const float c = rescale[g];
          Quad a;
          a.lo = make_float2(acc[g].lo.x * c + vn.lo.x * fn, acc[g].lo.y * c + vn.lo.y * fn);
          a.hi = make_float2(acc[g].hi.x * c + vn.hi.x * fn, acc[g].hi.y * c + vn.hi.y * fn);
          acc[g] = add_values(a, t, pr);
        }
      }
    }
  }
#pragma unroll
  for (int g = 0; g < G; g++) {
    *reinterpret_cast<float2*>(&sm_acc[warp][g][2 * lane]) = acc[g].lo;
    *reinterpret_cast<float2*>(&sm_acc[warp][g][HALF + 2 * lane]) = acc[g].hi;
    if (lane == 0) {
      sm_m[warp][g] = m_run[g];
      sm_l[warp][g] = l_run[g];
    }
  }
  __syncthreads();
  // Item i < 64 G (threads stride over them: a CTA may have 32 threads) finishes dims 2u,
  // 2u+1 (u = i % 64) of head i / 64: over this CTA's warps, then (CL > 1) over the cluster.
  __shared__ float cta_m[G], cta_l[G];
  __shared__ __align__(16) float cta_o[G][D];
  for (int i = threadIdx.x; i < G * HALF; i += blockDim.x) {
    const int g = i / HALF, u = i % HALF;
    float m = -INFINITY;
    for (int w = 0; w < warps; w++) m = fmaxf(m, sm_m[w][g]);
    float l = 0.f;
    float2 o = make_float2(0.f, 0.f);
    for (int w = 0; w < warps; w++) {
      if (sm_m[w][g] == -INFINITY) continue;
      const float f = ex2(sm_m[w][g] - m);
      const float2 a = *reinterpret_cast<const float2*>(&sm_acc[w][g][2 * u]);
      l += sm_l[w][g] * f;
      o.x += a.x * f;
      o.y += a.y * f;
    }
    if (cl == 1) {
      const float inv = __frcp_rn(l);  // warp 0 always has a live row
      auto* dst = reinterpret_cast<V*>(out + (int64_t)b * stride_ob + (int64_t)(j * G + g) * stride_oh);
      dst[u] = PT::v2(o.x * inv, o.y * inv);
    } else {  // this CTA's state, not yet normalised (m -inf, l 0: no live row here)
      *reinterpret_cast<float2*>(&cta_o[g][2 * u]) = o;
      if (u == 0) {
        cta_m[g] = m;
        cta_l[g] = l;
      }
    }
  }
  if (cl == 1) return;
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();  // every CTA's state written and visible to the cluster
  if (rank == 0) {
    for (int i = threadIdx.x; i < G * HALF; i += blockDim.x) {
      const int g = i / HALF, u = i % HALF;
      float m = -INFINITY;
      for (int r = 0; r < cl; r++) m = fmaxf(m, *cluster.map_shared_rank(&cta_m[g], r));
      float l = 0.f;
      float2 o = make_float2(0.f, 0.f);
      for (int r = 0; r < cl; r++) {
        const float mr = *cluster.map_shared_rank(&cta_m[g], r);
        if (mr == -INFINITY) continue;
        const float f = ex2(mr - m);
        const float2 a = *reinterpret_cast<const float2*>(cluster.map_shared_rank(&cta_o[g][2 * u], r));
        l += *cluster.map_shared_rank(&cta_l[g], r) * f;
        o.x += a.x * f;
        o.y += a.y * f;
      }
      const float inv = __frcp_rn(l);  // rank 0's warp 0 always has a live row
      auto* dst = reinterpret_cast<V*>(out + (int64_t)b * stride_ob + (int64_t)(j * G + g) * stride_oh);
      dst[u] = PT::v2(o.x * inv, o.y * inv);
    }
  }
  cluster.sync();  // no CTA leaves while rank 0 still reads its shared memory
}

// One launch of the instantiation for (T, G, TILES); two tiles take the warps' staging
// buffers as dynamic shared memory (past the 48 KB default: the limit raised once a device,
// as a function attribute holds per device).
template <typename T, int G, int TILES, typename... Args>
cudaError_t launch_kernel(int device, cudaLaunchConfig_t cfg, Args... args) {
  auto* kernel = attention_direct_kernel<T, G, TILES>;
  if constexpr (TILES == 2) {
    constexpr int DEVICES = 64;
    static bool raised[DEVICES] = {};  // per instantiation and device
    if (device < 0 || device >= DEVICES) return cudaErrorInvalidDevice;
    if (!raised[device]) {
      const cudaError_t err = cudaFuncSetAttribute(
          kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
          (int)(sizeof(uint32_t) * STAGE_WORDS * MAX_WARPS));
      if (err != cudaSuccess) return err;
      raised[device] = true;
    }
    cfg.dynamicSmemBytes = sizeof(uint32_t) * STAGE_WORDS * (cfg.blockDim.x / 32);
  }
  return cudaLaunchKernelEx(&cfg, kernel, args...);
}

}  // namespace

// ptrs: qkv, q_norm, k_norm, cos, sin, positions, seq_lens, k_cache, v_cache, out;
// floats: scale, eps; ints: warps (cdiv(bound, 16 tiles cluster), <= 16), hkv, S, P, B,
// device, cluster (CTAs per (sequence, kv head), 1..8), query heads per kv head (2 or 4),
// tiles a warp (1 or 2); strides: qb, kb, kh, ks, vb, vh, vs, ob, oh. dtype 0 bfloat16,
// 1 float16. Returns a cudaError_t (0: launched).
extern "C" int evk_attention_direct(int dtype, int pdl, void** a, const float* f, const int* n,
                                    const int64_t* st, void* stream) {
  const int cl = n[6], group = n[7], tiles = n[8];
  if (n[0] < 1 || n[0] > MAX_WARPS || cl < 1 || cl > MAX_CLUSTER || (group != 2 && group != 4) ||
      (tiles != 1 && tiles != 2))
    return (int)cudaErrorInvalidValue;
  cudaError_t err = cudaSetDevice(n[5]);
  if (err != cudaSuccess) return (int)err;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(n[4] * n[1] * cl);
  cfg.blockDim = dim3(32 * n[0]);
  cfg.stream = (cudaStream_t)stream;
  cudaLaunchAttribute attr[2];
  int count = 0;
  if (pdl) {
    attr[count].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[count++].val.programmaticStreamSerializationAllowed = 1;
  }
  if (cl > 1) {
    attr[count].id = cudaLaunchAttributeClusterDimension;
    attr[count].val.clusterDim.x = cl;
    attr[count].val.clusterDim.y = 1;
    attr[count++].val.clusterDim.z = 1;
  }
  cfg.attrs = attr;
  cfg.numAttrs = count;
#define EVK_ARGS(T)                                                                        \
  (const T*)a[0], (const T*)a[1], (const T*)a[2], (const float*)a[3], (const float*)a[4], \
      (const int*)a[5], (const int*)a[6], (T*)a[7], (T*)a[8], (T*)a[9], f[0], f[1], n[1],  \
      cl, n[2], n[3], st[0], st[1], st[2], st[3], st[4], st[5], st[6], st[7], st[8]
#define EVK_LAUNCH(T, G)                                              \
  return (int)(tiles == 1 ? launch_kernel<T, G, 1>(n[5], cfg, EVK_ARGS(T)) \
                          : launch_kernel<T, G, 2>(n[5], cfg, EVK_ARGS(T)))
  if (dtype == 0 && group == 2) EVK_LAUNCH(__nv_bfloat16, 2);
  if (dtype == 0) EVK_LAUNCH(__nv_bfloat16, 4);
  if (group == 2) EVK_LAUNCH(__half, 2);
  EVK_LAUNCH(__half, 4);
#undef EVK_LAUNCH
#undef EVK_ARGS
}

extern "C" const char* evk_error_string(int err) { return cudaGetErrorString((cudaError_t)err); }
