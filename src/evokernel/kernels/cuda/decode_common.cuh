// Helpers shared by the CUDA decode kernels (attention_direct.cu, decode_persistent.cu): the
// dtype pair type, a warp's head of 128 dims as four values a lane (lo = dims 2l, 2l+1; hi =
// dims 64+2l, 64+2l+1, so RoPE's pairs sit in one lane), the q/k RMSNorm + RoPE rounded as
// transformers rounds, a warp's tile of 16 cache rows, and the warp reductions. Included
// inside each source's anonymous namespace, so every symbol stays internal to its library.

constexpr int D = 128;
constexpr int HALF = 64;
constexpr int ROWS = 16;  // cache rows of a warp's attention tile
constexpr int GROUP = 2;  // query heads tile_score scores together (decode_persistent.cu: a kv head's)
constexpr unsigned FULL = 0xffffffffu;

template <typename T> struct Pair;
template <> struct Pair<__nv_bfloat16> {
  using V = __nv_bfloat162;
  static __device__ __forceinline__ float2 f2(V v) { return __bfloat1622float2(v); }
  static __device__ __forceinline__ V v2(float a, float b) { return __floats2bfloat162_rn(a, b); }
  static __device__ __forceinline__ float rnd(float x) {
    return __bfloat162float(__float2bfloat16_rn(x));
  }
  static __device__ __forceinline__ float f(__nv_bfloat16 v) { return __bfloat162float(v); }
  static __device__ __forceinline__ __nv_bfloat16 t(float x) { return __float2bfloat16_rn(x); }
  static __device__ __forceinline__ uint32_t bits(float x) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(x));
  }
  static __device__ __forceinline__ float unbits(uint32_t b) {
    return __bfloat162float(__ushort_as_bfloat16((unsigned short)b));
  }
};
template <> struct Pair<__half> {
  using V = __half2;
  static __device__ __forceinline__ float2 f2(V v) { return __half22float2(v); }
  static __device__ __forceinline__ V v2(float a, float b) { return __floats2half2_rn(a, b); }
  static __device__ __forceinline__ float rnd(float x) { return __half2float(__float2half_rn(x)); }
  static __device__ __forceinline__ float f(__half v) { return __half2float(v); }
  static __device__ __forceinline__ __half t(float x) { return __float2half_rn(x); }
  static __device__ __forceinline__ uint32_t bits(float x) {
    return __half_as_ushort(__float2half_rn(x));
  }
  static __device__ __forceinline__ float unbits(uint32_t b) {
    return __half2float(__ushort_as_half((unsigned short)b));
  }
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

// l2_only: loaded through L2 only (values another CTA of this launch wrote)
template <typename T>
__device__ __forceinline__ Quad load_quad(const T* row, int lane, bool l2_only = false) {
  using PT = Pair<T>;
  const auto* p = reinterpret_cast<const typename PT::V*>(row);
  Quad q;
  q.lo = PT::f2(l2_only ? __ldcg(p + lane) : p[lane]);
  q.hi = PT::f2(l2_only ? __ldcg(p + HALF / 2 + lane) : p[HALF / 2 + lane]);
  return q;
}

// RMSNorm over the head (a warp reduction), then RoPE; every step rounded to T as
// transformers rounds it. w: the norm weight, c/s: cos/sin already rounded to T.
template <typename T>
__device__ __forceinline__ Quad norm_rope(Quad x, Quad w, float2 c, float2 s, float eps) {
  using PT = Pair<T>;
  float ss = x.lo.x * x.lo.x + x.lo.y * x.lo.y + x.hi.x * x.hi.x + x.hi.y * x.hi.y;
  float rstd = rsqrtf(warp_sum(ss) / D + eps);
  auto y = [&](float v, float wv) { return PT::rnd(PT::rnd(v * rstd) * wv); };
  float y1a = y(x.lo.x, w.lo.x), y1b = y(x.lo.y, w.lo.y);
  float y2a = y(x.hi.x, w.hi.x), y2b = y(x.hi.y, w.hi.y);
  Quad o;
  o.lo.x = PT::rnd(PT::rnd(y1a * c.x) + PT::rnd(-y2a * s.x));
  o.lo.y = PT::rnd(PT::rnd(y1b * c.y) + PT::rnd(-y2b * s.y));
  o.hi.x = PT::rnd(PT::rnd(y2a * c.x) + PT::rnd(y1a * s.x));
  o.hi.y = PT::rnd(PT::rnd(y2b * c.y) + PT::rnd(y1b * s.y));
  return o;
}

__device__ __forceinline__ float dot4(Quad a, float2 lo, float2 hi) {
  return a.lo.x * lo.x + a.lo.y * lo.y + a.hi.x * hi.x + a.hi.y * hi.y;
}

template <typename T>
struct Tile {  // a warp's 16 cache rows of one kv head, this lane's 4 dims of each, raw
  typename Pair<T>::V k_lo[ROWS], k_hi[ROWS], v_lo[ROWS], v_hi[ROWS];
};

// v[0..N) summed over the lanes that differ in bit N/2, halves scattered: after the steps
// for N = 32, 16, ..., 2 lane l holds the warp's sum of its value number l.
template <int N>
__device__ __forceinline__ void reduce_scatter(float* v, int lane) {
  const bool upper = lane & (N / 2);
#pragma unroll
  for (int k = 0; k < N / 2; k++) {
    float send = upper ? v[k] : v[k + N / 2];
    float keep = upper ? v[k + N / 2] : v[k];
    v[k] = keep + __shfl_xor_sync(FULL, send, N / 2);
  }
}

// The warp's scores of a tile: head g's q against row r's key, reduced over the warp; lane
// 16g + r returns head g's score of row row0 + r (times qk_scale, base 2), -inf at or past
// seq_len and at pos (the new row, scored apart from registers).
template <typename T>
__device__ __forceinline__ float tile_score(const Tile<T>& t, const Quad* q, int row0,
                                            int seq_len, int pos, float qk_scale, int lane) {
  using PT = Pair<T>;
  float v[GROUP * ROWS];  // partial scores, index g * 16 + r
#pragma unroll
  for (int r = 0; r < ROWS; r++) {
    const float2 klo = PT::f2(t.k_lo[r]), khi = PT::f2(t.k_hi[r]);
#pragma unroll
    for (int g = 0; g < GROUP; g++) v[g * ROWS + r] = dot4(q[g], klo, khi);
  }
  reduce_scatter<32>(v, lane);  // lane 16g + r: head g, row r
  reduce_scatter<16>(v, lane);
  reduce_scatter<8>(v, lane);
  reduce_scatter<4>(v, lane);
  reduce_scatter<2>(v, lane);
  const int row = row0 + (lane & 15);
  return (row < seq_len && row != pos) ? v[0] * qk_scale : -INFINITY;
}

// a + sum over the tile's rows of w[r] * value row r (this lane's 4 dims), in row order.
template <typename T>
__device__ __forceinline__ Quad add_values(Quad a, const Tile<T>& t, const float* w) {
  using PT = Pair<T>;
#pragma unroll
  for (int r = 0; r < ROWS; r++) {
    const float2 vlo = PT::f2(t.v_lo[r]), vhi = PT::f2(t.v_hi[r]);
    a.lo.x += w[r] * vlo.x;
    a.lo.y += w[r] * vlo.y;
    a.hi.x += w[r] * vhi.x;
    a.hi.y += w[r] * vhi.y;
  }
  return a;
}
