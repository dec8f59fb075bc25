// Split-KV GQA decode attention for short contexts, with the new token's q/k RMSNorm, RoPE
// and cache append fused (the CUDA C++ counterpart of kernels/attention.py's FUSED, CUDA-core
// path, for head_dim 128 and 2 query heads per kv head).
//
// Grid (B * Hkv, SPLIT), 4 warps. Program (b, j, s) serves kv head j of sequence b and both
// query heads 2j, 2j+1 over the s-th chunk of [0, seq_lens[b]) (chunks of a multiple of 16
// positions, trailing ones may be empty), in 16-row tiles: warp w takes rows 4w .. 4w+3 of
// each tile and keeps its own online softmax (max, sum, accumulator per head) in float32,
// base 2; the four warps' states are merged once at the end through shared memory (one block
// barrier). Lane l owns dims 2l, 2l+1 of each head's low half and 64+2l, 64+2l+1 of its high
// half, so RoPE's pairs (i, i+64) sit in one lane and every vector access is coalesced.
//
// Before the PDL wait (griddepcontrol): seq_len, the position, its cos/sin, the norm weights
// and each warp's rows of the chunk's first tile of K and V (written by earlier steps). After
// it: the new token's q, k, v (every warp loads and normalises them itself, in parallel); the
// per-head RMSNorm then RoPE, rounded as transformers rounds (to the dtype before and after the
// norm weight, each RoPE product and the sum); the append of k, v at the position by warp 0 of
// the program whose chunk holds it, which also counts the new row, from registers; then the
// tiles. A warp's 8 partial dot products a lane (4 rows x 2 heads) are reduce-scattered over
// the warp (9 shuffles), so lanes 4i .. 4i+3 hold score i (head i / 4, row i % 4); cache rows
// at or past seq_len or at the position are skipped; the probabilities are rounded to the
// dtype for the value product, as the Triton kernel rounds them.
// Out: SPLIT == 1 (DIRECT) writes out[b, h, :] in the dtype; otherwise the normalised partial
// [D] and log2-sum-exp per query head (-inf for an empty chunk), merged by the Triton combine
// kernel. Positions at or past seq_lens[b] are never read.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cooperative_groups.h>
#include <cuda_runtime.h>
#include <stdint.h>

namespace {

constexpr int D = 128;
constexpr int HALF = 64;
constexpr int ROWS = 16;  // rows per tile
constexpr int WARPS = 4;
constexpr int WROWS = ROWS / WARPS;  // rows per warp and tile
constexpr int GROUP = 2;
constexpr unsigned FULL = 0xffffffffu;
constexpr int MAX_CLUSTER = 16;  // the largest (non-portable) cluster on sm_90

// How a program's result leaves it.
enum Mode : int {
  DIRECT = 0,   // SPLIT == 1: out[b, h, :] in the dtype
  PARTIAL = 1,  // the chunk's partial and log2-sum-exp, for the combine kernel
  CLUSTER = 2,  // the SPLIT programs of a (b, j) are one cluster: rank 0 merges, writes out
};

template <typename T> struct Pair;
template <> struct Pair<__nv_bfloat16> {
  using V = __nv_bfloat162;
  static __device__ __forceinline__ float2 f2(V v) { return __bfloat1622float2(v); }
  static __device__ __forceinline__ V v2(float a, float b) { return __floats2bfloat162_rn(a, b); }
  static __device__ __forceinline__ float rnd(float x) {
    return __bfloat162float(__float2bfloat16_rn(x));
  }
};
template <> struct Pair<__half> {
  using V = __half2;
  static __device__ __forceinline__ float2 f2(V v) { return __half22float2(v); }
  static __device__ __forceinline__ V v2(float a, float b) { return __floats2half2_rn(a, b); }
  static __device__ __forceinline__ float rnd(float x) { return __half2float(__float2half_rn(x)); }
};

__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) x += __shfl_xor_sync(FULL, x, off);
  return x;
}

// A head's 4 values in this lane: lo = dims (2l, 2l+1), hi = dims (64+2l, 64+2l+1).
struct Quad {
  float2 lo, hi;
};

template <typename T>
__device__ __forceinline__ Quad load_quad(const T* row, int lane) {
  using P = Pair<T>;
  const auto* p = reinterpret_cast<const typename P::V*>(row);
  Quad q;
  q.lo = P::f2(p[lane]);
  q.hi = P::f2(p[HALF / 2 + lane]);
  return q;
}

// RMSNorm over the head (a warp reduction), then RoPE; every step rounded to T as
// transformers rounds it. w: the norm weight, c/s: cos/sin already rounded to T.
template <typename T>
__device__ __forceinline__ Quad norm_rope(Quad x, Quad w, float2 c, float2 s, float eps) {
  using P = Pair<T>;
  float ss = x.lo.x * x.lo.x + x.lo.y * x.lo.y + x.hi.x * x.hi.x + x.hi.y * x.hi.y;
  float rstd = rsqrtf(warp_sum(ss) / D + eps);
  auto y = [&](float v, float wv) { return P::rnd(P::rnd(v * rstd) * wv); };
  float y1a = y(x.lo.x, w.lo.x), y1b = y(x.lo.y, w.lo.y);
  float y2a = y(x.hi.x, w.hi.x), y2b = y(x.hi.y, w.hi.y);
  Quad o;
  o.lo.x = P::rnd(P::rnd(y1a * c.x) + P::rnd(-y2a * s.x));
  o.lo.y = P::rnd(P::rnd(y1b * c.y) + P::rnd(-y2b * s.y));
  o.hi.x = P::rnd(P::rnd(y2a * c.x) + P::rnd(y1a * s.x));
  o.hi.y = P::rnd(P::rnd(y2b * c.y) + P::rnd(y1b * s.y));
  return o;
}

__device__ __forceinline__ float dot4(Quad a, float2 lo, float2 hi) {
  return a.lo.x * lo.x + a.lo.y * lo.y + a.hi.x * hi.x + a.hi.y * hi.y;
}

template <typename T>
struct Rows {  // a warp's 4 rows of a tile of one kv head, this lane's 4 dims of each, raw
  typename Pair<T>::V k_lo[WROWS], k_hi[WROWS], v_lo[WROWS], v_hi[WROWS];
};

template <typename T>
__device__ __forceinline__ void load_rows(Rows<T>& t, const T* k_base, const T* v_base,
                                          int64_t stride_ks, int64_t stride_vs, int row0,
                                          int end, int lane) {
  using V = typename Pair<T>::V;
  const V zero = Pair<T>::v2(0.f, 0.f);
#pragma unroll
  for (int r = 0; r < WROWS; r++) {
    const bool live = row0 + r < end;
    const V* k = reinterpret_cast<const V*>(k_base + (int64_t)(row0 + r) * stride_ks);
    const V* v = reinterpret_cast<const V*>(v_base + (int64_t)(row0 + r) * stride_vs);
    t.k_lo[r] = live ? __ldcs(k + lane) : zero;
    t.k_hi[r] = live ? __ldcs(k + HALF / 2 + lane) : zero;
    t.v_lo[r] = live ? __ldcs(v + lane) : zero;
    t.v_hi[r] = live ? __ldcs(v + HALF / 2 + lane) : zero;
  }
}

template <int N>
__device__ __forceinline__ void reduce_scatter(float* v, int lane, int off) {
  const bool upper = lane & off;
#pragma unroll
  for (int k = 0; k < N / 2; k++) {
    float send = upper ? v[k] : v[k + N / 2];
    float keep = upper ? v[k + N / 2] : v[k];
    v[k] = keep + __shfl_xor_sync(FULL, send, off);
  }
}

struct Softmax {  // one warp's running state per query head, replicated in its lanes
  float m[GROUP], l[GROUP];
  Quad acc[GROUP];
};

// A warp's rows row0 .. row0+3 of the online softmax, below `end`, except row `pos`.
template <typename T>
__device__ __forceinline__ void rows_step(Softmax& st, const Rows<T>& t, const Quad* q, int row0,
                                          int end, int pos, float qk_scale, int lane) {
  using P = Pair<T>;
  float v[GROUP * WROWS];  // partial scores, index g * 4 + r
#pragma unroll
  for (int r = 0; r < WROWS; r++) {
    float2 klo = P::f2(t.k_lo[r]), khi = P::f2(t.k_hi[r]);
#pragma unroll
    for (int g = 0; g < GROUP; g++) v[g * WROWS + r] = dot4(q[g], klo, khi);
  }
  // Index bits 2, 1, 0 follow lane bits 4, 3, 2; lane bits 1, 0 then sum the rest.
  reduce_scatter<8>(v, lane, 16);
  reduce_scatter<4>(v, lane, 8);
  reduce_scatter<2>(v, lane, 4);
  float x = v[0];
  x += __shfl_xor_sync(FULL, x, 2);
  x += __shfl_xor_sync(FULL, x, 1);
  const int g_mine = lane >> 4, row = row0 + ((lane >> 2) & 3);
  const float score = (row < end && row != pos) ? x * qk_scale : -INFINITY;
  float mt = fmaxf(score, __shfl_xor_sync(FULL, score, 4));  // over the 4 rows (lane bits 2, 3)
  mt = fmaxf(mt, __shfl_xor_sync(FULL, mt, 8));
  const float m_other = __shfl_xor_sync(FULL, mt, 16);
  const float m_tile[GROUP] = {g_mine == 0 ? mt : m_other, g_mine == 0 ? m_other : mt};
  float m_new[GROUP], alpha[GROUP];
#pragma unroll
  for (int g = 0; g < GROUP; g++) {
    m_new[g] = fmaxf(st.m[g], m_tile[g]);
    alpha[g] = m_new[g] == -INFINITY ? 1.f : ex2(st.m[g] - m_new[g]);
  }
  const float p = m_new[g_mine] == -INFINITY ? 0.f : ex2(score - m_new[g_mine]);
  float lt = p + __shfl_xor_sync(FULL, p, 4);
  lt += __shfl_xor_sync(FULL, lt, 8);
  const float l_other = __shfl_xor_sync(FULL, lt, 16);
  const float l_tile[GROUP] = {g_mine == 0 ? lt : l_other, g_mine == 0 ? l_other : lt};
  const float pr = P::rnd(p);  // the probability in the dtype, for the value product
  float w[GROUP * WROWS];
#pragma unroll
  for (int i = 0; i < GROUP * WROWS; i++) w[i] = __shfl_sync(FULL, pr, 4 * i);
#pragma unroll
  for (int g = 0; g < GROUP; g++) {
    st.l[g] = st.l[g] * alpha[g] + l_tile[g];
    st.m[g] = m_new[g];
    Quad a;
    a.lo = make_float2(st.acc[g].lo.x * alpha[g], st.acc[g].lo.y * alpha[g]);
    a.hi = make_float2(st.acc[g].hi.x * alpha[g], st.acc[g].hi.y * alpha[g]);
#pragma unroll
    for (int r = 0; r < WROWS; r++) {
      float2 vlo = P::f2(t.v_lo[r]), vhi = P::f2(t.v_hi[r]);
      const float pw = w[g * WROWS + r];
      a.lo.x += pw * vlo.x;
      a.lo.y += pw * vlo.y;
      a.hi.x += pw * vhi.x;
      a.hi.y += pw * vhi.y;
    }
    st.acc[g] = a;
  }
}

template <typename T, int MODE>
__global__ void __launch_bounds__(32 * WARPS) attention_short_kernel(
    const T* __restrict__ qkv, const T* __restrict__ q_norm, const T* __restrict__ k_norm,
    const float* __restrict__ cos_t, const float* __restrict__ sin_t, const int* pos_ptr,
    const int* seq_lens, T* k_cache, T* v_cache, T* out, float* part, float* lse_out,
    float scale, float eps, int split, int hkv, int S, int P, int64_t stride_qb,
    int64_t stride_kb, int64_t stride_kh, int64_t stride_ks, int64_t stride_vb,
    int64_t stride_vh, int64_t stride_vs, int64_t stride_ob, int64_t stride_oh) {
  using PT = Pair<T>;
  __shared__ float sm_m[WARPS][GROUP], sm_l[WARPS][GROUP];
  __shared__ __align__(16) float sm_acc[WARPS][GROUP][D];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int b = blockIdx.x / hkv, j = blockIdx.x % hkv, s = blockIdx.y;
  const int hq = hkv * GROUP;

  const int seq_len = seq_lens[b];  // stable: set before this step began
  const int per = (seq_len + split - 1) / split;
  const int chunk = (per + ROWS - 1) / ROWS * ROWS;
  const int start = s * chunk;
  const int end = min(start + chunk, seq_len);
  const T* k_base = k_cache + (int64_t)b * stride_kb + (int64_t)j * stride_kh;
  const T* v_base = v_cache + (int64_t)b * stride_vb + (int64_t)j * stride_vh;
  Rows<T> rows;
  load_rows(rows, k_base, v_base, stride_ks, stride_vs, start + WROWS * warp, end, lane);

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

  const T* row_b = qkv + (int64_t)b * stride_qb;
  Quad q[GROUP];
#pragma unroll
  for (int g = 0; g < GROUP; g++) q[g] = load_quad(row_b + (j * GROUP + g) * D, lane);
  Quad kn = load_quad(row_b + (hq + j) * D, lane);
  const Quad vn = load_quad(row_b + (hq + hkv + j) * D, lane);
#pragma unroll
  for (int g = 0; g < GROUP; g++) q[g] = norm_rope<T>(q[g], qw, c, sn, eps);
  kn = norm_rope<T>(kn, kw, c, sn, eps);

  const bool holds = start <= pos && pos < end;  // this chunk holds the new row
  const bool mine = holds && warp == 0;          // warp 0 appends it and counts it
  if (mine && pos < S && in_table) {
    auto* kd = reinterpret_cast<typename PT::V*>(k_cache + (int64_t)b * stride_kb +
                                                 (int64_t)j * stride_kh + (int64_t)pos * stride_ks);
    auto* vd = reinterpret_cast<typename PT::V*>(v_cache + (int64_t)b * stride_vb +
                                                 (int64_t)j * stride_vh + (int64_t)pos * stride_vs);
    kd[lane] = PT::v2(kn.lo.x, kn.lo.y);
    kd[HALF / 2 + lane] = PT::v2(kn.hi.x, kn.hi.y);
    vd[lane] = PT::v2(vn.lo.x, vn.lo.y);
    vd[HALF / 2 + lane] = PT::v2(vn.hi.x, vn.hi.y);
  }

  const float qk_scale = scale * 1.4426950408889634f;
  Softmax st;
#pragma unroll
  for (int g = 0; g < GROUP; g++) {
    const float s_new = warp_sum(dot4(q[g], kn.lo, kn.hi));
    st.m[g] = mine ? s_new * qk_scale : -INFINITY;
    st.l[g] = mine ? 1.f : 0.f;
    st.acc[g].lo = mine ? vn.lo : make_float2(0.f, 0.f);
    st.acc[g].hi = mine ? vn.hi : make_float2(0.f, 0.f);
  }
  if (start < end) rows_step<T>(st, rows, q, start + WROWS * warp, end, pos, qk_scale, lane);
  for (int row0 = start + ROWS; row0 < end; row0 += ROWS) {
    load_rows(rows, k_base, v_base, stride_ks, stride_vs, row0 + WROWS * warp, end, lane);
    rows_step<T>(st, rows, q, row0 + WROWS * warp, end, pos, qk_scale, lane);
  }

  // Merge the warps' states: thread t finishes dims 2u, 2u+1 (u = t % 64) of head t / 64.
#pragma unroll
  for (int g = 0; g < GROUP; g++) {
    *reinterpret_cast<float2*>(&sm_acc[warp][g][2 * lane]) = st.acc[g].lo;
    *reinterpret_cast<float2*>(&sm_acc[warp][g][HALF + 2 * lane]) = st.acc[g].hi;
    if (lane == 0) {
      sm_m[warp][g] = st.m[g];
      sm_l[warp][g] = st.l[g];
    }
  }
  __syncthreads();
  const int g = threadIdx.x >> 6, u = threadIdx.x & 63, h = j * GROUP + g;
  float m = -INFINITY;
#pragma unroll
  for (int w = 0; w < WARPS; w++) m = fmaxf(m, sm_m[w][g]);
  float l = 0.f;
  float2 o = make_float2(0.f, 0.f);
#pragma unroll
  for (int w = 0; w < WARPS; w++) {
    const float f = m == -INFINITY ? 0.f : ex2(sm_m[w][g] - m);
    const float2 a = *reinterpret_cast<const float2*>(&sm_acc[w][g][2 * u]);
    l += sm_l[w][g] * f;
    o.x += a.x * f;
    o.y += a.y * f;
  }
  auto* dst = reinterpret_cast<typename PT::V*>(out + (int64_t)b * stride_ob +
                                                (int64_t)h * stride_oh);
  if (MODE == CLUSTER) {
    // Rank 0 of the cluster reads every program's (m, l, o) from its shared memory.
    __shared__ float cm[GROUP], cl[GROUP];
    __shared__ __align__(16) float2 co[GROUP][HALF];
    co[g][u] = o;
    if (u == 0) {
      cm[g] = m;
      cl[g] = l;
    }
    cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
    cluster.sync();
    if (cluster.block_rank() == 0) {
      float mr[MAX_CLUSTER];
      float top = -INFINITY;
#pragma unroll
      for (int r = 0; r < MAX_CLUSTER; r++) {
        mr[r] = r < split ? *cluster.map_shared_rank(&cm[g], r) : -INFINITY;
        top = fmaxf(top, mr[r]);
      }
      float lsum = 0.f;
      float2 osum = make_float2(0.f, 0.f);
#pragma unroll
      for (int r = 0; r < MAX_CLUSTER; r++) {
        if (r < split && mr[r] != -INFINITY) {
          const float f = ex2(mr[r] - top);
          const float2 orr = *cluster.map_shared_rank(&co[g][u], r);
          lsum += *cluster.map_shared_rank(&cl[g], r) * f;
          osum.x += orr.x * f;
          osum.y += orr.y * f;
        }
      }
      const float inv = __frcp_rn(lsum);  // chunk 0 is never empty
      dst[u] = PT::v2(osum.x * inv, osum.y * inv);
    }
    cluster.sync();  // every program's shared memory stays until rank 0 has read it
    return;
  }
  const bool empty = l == 0.f;
  const float inv = empty ? 0.f : __frcp_rn(l);
  if (MODE == DIRECT) {
    if (s == 0) dst[u] = PT::v2(o.x * inv, o.y * inv);
  } else {
    const int64_t row = ((int64_t)b * hq + h) * split + s;
    reinterpret_cast<float2*>(part + row * D)[u] = make_float2(o.x * inv, o.y * inv);
    if (u == 0) lse_out[row] = empty ? -INFINITY : m + __log2f(l);
  }
}

template <typename T, int MODE>
cudaError_t launch(const cudaLaunchConfig_t& cfg, void** a, const float* f, const int* n,
                   const int64_t* st) {
  return cudaLaunchKernelEx(
      &cfg, attention_short_kernel<T, MODE>, (const T*)a[0], (const T*)a[1], (const T*)a[2],
      (const float*)a[3], (const float*)a[4], (const int*)a[5], (const int*)a[6], (T*)a[7],
      (T*)a[8], (T*)a[9], (float*)a[10], (float*)a[11], f[0], f[1], n[0], n[1], n[2], n[3],
      st[0], st[1], st[2], st[3], st[4], st[5], st[6], st[7], st[8]);
}

}  // namespace

// ptrs: qkv, q_norm, k_norm, cos, sin, positions, seq_lens, k_cache, v_cache, out, part, lse
// floats: scale, eps; ints: split, hkv, S, P, B, device; strides: qb, kb, kh, ks, vb, vh, vs,
// ob, oh. dtype 0 bfloat16, 1 float16. Returns a cudaError_t (0: launched).
template <typename T>
cudaError_t launch_mode(const cudaLaunchConfig_t& cfg, int mode, void** a, const float* f,
                        const int* n, const int64_t* st) {
  if (mode == DIRECT) return launch<T, DIRECT>(cfg, a, f, n, st);
  if (mode == PARTIAL) return launch<T, PARTIAL>(cfg, a, f, n, st);
  static bool wide = false;  // clusters of more than 8 programs
  if (!wide) {
    cudaError_t err = cudaFuncSetAttribute(attention_short_kernel<T, CLUSTER>,
                                           cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
    if (err != cudaSuccess) return err;
    wide = true;
  }
  return launch<T, CLUSTER>(cfg, a, f, n, st);
}

// ptrs: qkv, q_norm, k_norm, cos, sin, positions, seq_lens, k_cache, v_cache, out, part, lse
// floats: scale, eps; ints: split, hkv, S, P, B, device, cluster (1: the split's programs
// merge in a cluster, split <= 16; part and lse unused); strides: qb, kb, kh, ks, vb, vh, vs,
// ob, oh. dtype 0 bfloat16, 1 float16. Returns a cudaError_t (0: launched).
extern "C" int evk_attention_short(int dtype, int pdl, void** ptrs, const float* floats,
                                   const int* ints, const int64_t* strides, void* stream) {
  const int split = ints[0];
  const int mode = split == 1 ? DIRECT : ints[6] ? CLUSTER : PARTIAL;
  if (mode == CLUSTER && split > MAX_CLUSTER) return (int)cudaErrorInvalidValue;
  cudaError_t err = cudaSetDevice(ints[5]);
  if (err != cudaSuccess) return (int)err;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(ints[4] * ints[1], split);
  cfg.blockDim = dim3(32 * WARPS);
  cfg.stream = (cudaStream_t)stream;
  cudaLaunchAttribute attr[2];
  int count = 0;
  if (pdl) {
    attr[count].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[count++].val.programmaticStreamSerializationAllowed = 1;
  }
  if (mode == CLUSTER) {
    attr[count].id = cudaLaunchAttributeClusterDimension;
    attr[count].val.clusterDim.x = 1;
    attr[count].val.clusterDim.y = split;
    attr[count++].val.clusterDim.z = 1;
  }
  cfg.attrs = attr;
  cfg.numAttrs = count;
  if (dtype == 0) return (int)launch_mode<__nv_bfloat16>(cfg, mode, ptrs, floats, ints, strides);
  return (int)launch_mode<__half>(cfg, mode, ptrs, floats, ints, strides);
}

extern "C" const char* evk_error_string(int err) { return cudaGetErrorString((cudaError_t)err); }
