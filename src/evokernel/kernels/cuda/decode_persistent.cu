// Every decoder layer of one batch-1 decode step in one persistent launch: one CTA per SM, the
// stages of a layer (norm + qkv, q/k norm + RoPE + append + attention, o_proj + residual,
// norm + gate_up + SiLU-mul, down + residual) handed on through tagged words in global memory
// instead of kernel boundaries, while each CTA's weights stream into a ring of shared memory
// ahead of the stage that needs them.
//
// Why: at Qwen3-0.6B's size a launched stage costs ~1.5 us beyond its bytes (the PDL wait, the
// chain after it, the exit) and a layer has five (docs/perf-log.md). Here the weight stream
// never waits for a stage boundary: the last warp of each CTA (the producer) issues bulk copies
// (cp.async.bulk, completion on an mbarrier) of the CTA's rows of every projection, layer after
// layer, as fast as ring slots free up; the 7 consumer warps wait only for the activations.
//
// Hand-over (no fences, no counters): every activation a stage writes (qkv, the attention's
// output, x after o_proj and after down, act) is a 32-bit word, its value's 16 bits under a
// 16-bit tag naming the (step, layer, write) that produced it, stored relaxed; a consumer polls
// the words it needs (relaxed loads, L2) until each carries the tag it expects. A word is
// written once per tag, so the value it carries is the one the tag names; the order of the
// stages makes every word's previous value dead before it is overwritten (each stage needs all
// of the one before it). The step number lives in `step` (the last CTA out advances it).
//
// Work split over the grid's C CTAs (the same functions on both sides of the ring):
//   * a projection of N rows and K columns: CTA c owns rows [cR, cR + R), R = cdiv(N, C), in
//     chunks of a power of two of whole rows, at most SLOT bytes; gate_up's CTA owns the same
//     R_i rows of the gate and of the up half; a warp multiplies a run of cdiv(R, 7) rows;
//   * attention: CTA a < Hkv * split takes kv head a / split, cache rows [cc CR, (cc+1) CR) of
//     chunk cc = a % split, a warp per 16-row tile (online softmax over its tiles); the warps
//     merge through shared memory; with split > 1 the chunk's state goes to `part` and the
//     last CTA of the head (a ticket after a fence) merges the split and writes the head.
// Numerics as the engine's Triton/CUDA kernels (and transformers) round: RMSNorm's x*rstd and
// its product with the weight rounded to T, each projection's sum (float32) rounded to T, the
// residual add rounded to T, silu(g) then silu(g)*u rounded to T; attention as
// attention_direct.cu (q/k norm, RoPE, probabilities rounded to T for the value product).
//
// Requirements (the launcher checks them): batch 1, head_dim 128, 2 query heads per kv head,
// q/k norms, no biases, H, I and Hq*D multiples of 256, a row of every projection at most SLOT
// bytes, a stage's chunks at most the ring's slots, the whole grid resident at once (one CTA
// per SM: grid = SMs, the shared memory keeps a second CTA off an SM). A wait longer than
// ~2 s sets `error` and the launch runs out without waiting (garbage out, never a hang).

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

namespace {

#include "decode_common.cuh"

constexpr int WARPS = 7;  // consumer warps (+ the producer: 8 warps, 2 an SMSP, 255 registers)
constexpr int NT = 32 * WARPS;  // consumer threads
constexpr int THREADS = 32 * (WARPS + 1);
constexpr int SLOT = 16384;  // bytes of one ring slot
constexpr int MAX_SLOTS = 16;
constexpr int MAX_ROWS = 64;  // rows of a stage per CTA (the launcher checks)
constexpr int BATCH = 8;  // words a consumer thread polls at once (one L2 round trip)
constexpr int PART = 2 * GROUP + GROUP * D;  // m[2], l[2], o[2][128] floats per chunk
constexpr uint64_t TIMEOUT_NS = 2000000000ull;
constexpr unsigned POLL_NS = 100;  // pause between polls of a tagged word

template <typename T>
struct Params {
  const T* const* qkv_w;      // [L] -> [(Hq + 2 Hkv) D, H]
  const T* const* o_w;        // [L] -> [H, Hq D]
  const T* const* gu_w;       // [L] -> [2 I, H] (gate rows, then up rows)
  const T* const* down_w;     // [L] -> [H, I]
  const T* const* in_norm;    // [L] -> [H]
  const T* const* post_norm;  // [L] -> [H]
  const T* const* q_norm;     // [L] -> [D]
  const T* const* k_norm;     // [L] -> [D]
  T* const* k_cache;          // [L] -> [1, Hkv, S, D]
  T* const* v_cache;
  const T* embed;             // [V, H]
  const int64_t* tokens;      // [1]
  const int* positions;       // [1]
  const int* seq_lens;        // [1]
  const float* cos_t;         // [P, 64]
  const float* sin_t;
  T* x;                       // [H] the residual stream after the last layer (out)
  uint32_t* x_w;              // [H] tagged words: x after each o_proj and down
  uint32_t* qkv_w_;           // [(Hq + 2 Hkv) D] tagged
  uint32_t* attn_w;           // [Hq D] tagged
  uint32_t* act_w;            // [I] tagged
  float* part;                // [Hkv * split, PART]
  unsigned* tickets;          // [L * Hkv + 1] zero at launch (the last CTA zeroes them)
  unsigned* step;             // [1] steps run so far (tags)
  int* error;
  uint64_t* trace;            // null, or [C, L, 32] globaltimer stamps (a timeline for study)
  float scale, eps;
  int L, H, I, hkv, S, P, split, chunk_rows, slots;
  int64_t stride_kh, stride_ks;  // cache strides (kv head, position); rows contiguous
};

// ---------------------------------------------------------------- synchronisation helpers

__device__ __forceinline__ uint64_t globaltimer() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ uint32_t ld_word(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void st_word(uint32_t* p, uint32_t v) {
  asm volatile("st.relaxed.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// Every `it` iterations of a wait: whether to give up (the error flag is up, or ~2 s passed
// since t0, which then raises it).
__device__ __noinline__ bool give_up(uint64_t& t0, int* error) {
  if (*(volatile int*)error) return true;
  const uint64_t now = globaltimer();
  if (t0 == 0) t0 = now;
  if (now - t0 > TIMEOUT_NS) {
    atomicExch(error, 1);
    return true;
  }
  return false;
}

// The tag of a write: 1..65535 (0 is the words' initial value), advancing with every write
// of a buffer in a step (`writes` a layer).
__device__ __forceinline__ uint32_t tag_of(unsigned step, int L, int layer, int writes, int w) {
  return 1u + (uint32_t)(((uint64_t)step * L * writes + (uint64_t)layer * writes + w) % 65535u);
}

// A timeline stamp (kernels built with TRACE only: the launch asked for `trace`).
template <bool TRACE, typename T>
__device__ __forceinline__ void stamp(const Params<T>& p, int layer, int k) {
  if constexpr (TRACE) p.trace[((size_t)blockIdx.x * p.L + layer) * 32 + k] = globaltimer();
}

__device__ __forceinline__ void consumers_sync() {  // the consumer warps (named barrier 1)
  asm volatile("bar.sync 1, %0;" ::"n"(NT) : "memory");
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbar_init(uint64_t* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count));
}

__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)),
               "r"(bytes)
               : "memory");
}

__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}

// Waits for the phase of `bar` with this parity to complete (or the error flag, or ~2 s).
__device__ __forceinline__ void mbar_wait(uint64_t* bar, unsigned parity, int* error) {
  const uint32_t a = smem_addr(bar);
  uint64_t t0 = 0;
  for (int i = 1;; i++) {
    uint32_t done;
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        " selp.u32 %0, 1, 0, p;\n}"
        : "=r"(done)
        : "r"(a), "r"(parity)
        : "memory");
    if (done || ((i & 63) == 0 && give_up(t0, error))) return;
  }
}

__device__ __forceinline__ void bulk_copy(void* dst, const void* src, unsigned bytes,
                                          uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
          "r"(smem_addr(dst)),
      "l"(src), "r"(bytes), "r"(smem_addr(bar))
      : "memory");
}

// Waits until the words src[base + u * NT + tid] (u < BATCH, below n) carry `tag`, and returns
// their values (all consumer threads; 0 past n).
template <typename T>
__device__ __forceinline__ void poll_words(const uint32_t* src, int base, int n, uint32_t tag,
                                           float (&v)[BATCH], int* error) {
  using PT = Pair<T>;
  uint32_t w[BATCH];
  uint64_t t0 = 0;
  {  // first one word a thread, with a pause between polls (the L2 also serves the weights)
    const int i = base + (int)threadIdx.x;
    for (int it = 1; i < n && (ld_word(src + i) >> 16) != tag; it++) {
      __nanosleep(POLL_NS);
      if ((it & 15) == 0 && give_up(t0, error)) break;
    }
  }
  for (int it = 1;; it++) {
    bool ok = true;
#pragma unroll
    for (int u = 0; u < BATCH; u++) {
      const int i = base + u * NT + (int)threadIdx.x;
      w[u] = i < n ? ld_word(src + i) : (tag << 16);
    }
#pragma unroll
    for (int u = 0; u < BATCH; u++) ok &= (w[u] >> 16) == tag;
    if (ok || ((it & 15) == 0 && give_up(t0, error))) break;
  }
#pragma unroll
  for (int u = 0; u < BATCH; u++) v[u] = PT::unbits(w[u] & 0xffffu);
}

// ---------------------------------------------------------------- the work split

struct Rows {  // a CTA's rows of a projection
  int start, count;
};

__device__ __forceinline__ Rows rows_of(int N, int c, int C) {
  const int R = (N + C - 1) / C, start = c * R;
  return {start, max(0, min(N - start, R))};
}

// A stage's geometry for this CTA (the same every layer): `segs` contiguous segments of
// `seg_rows` rows (gate_up: the gate rows, the up rows), chunks of 2^shift rows.
struct Geo {
  int start;     // the first row of the first segment
  int seg_rows, segs, K, shift, cps;  // cps: chunks a segment
  __device__ __forceinline__ int chunks() const { return segs * cps; }
  __device__ __forceinline__ int rows() const { return segs * seg_rows; }
};

__device__ __forceinline__ Geo geo_of(int N, int K, int segs, int itemsize, int c, int C) {
  const Rows r = rows_of(N, c, C);
  Geo g;
  g.start = r.start;
  g.seg_rows = r.count;
  g.segs = r.count > 0 ? segs : 0;
  g.K = K;
  int shift = 0;
  while ((2 << shift) * K * itemsize <= SLOT) shift++;
  g.shift = shift;
  g.cps = (r.count + (1 << shift) - 1) >> shift;
  return g;
}

// The stage's rows' first element: segment `seg` of stage `s` in `layer`.
template <typename T>
__device__ __forceinline__ const T* seg_base(const Params<T>& p, const Geo& g, int s, int layer,
                                             int seg) {
  if (s == 0) return p.qkv_w[layer] + (int64_t)g.start * g.K;
  if (s == 1) return p.o_w[layer] + (int64_t)g.start * g.K;
  if (s == 2) return p.gu_w[layer] + (int64_t)(g.start + seg * p.I) * g.K;
  return p.down_w[layer] + (int64_t)g.start * g.K;
}

// ---------------------------------------------------------------- the producer warp

template <bool TRACE, typename T>
__device__ void producer(const Params<T>& p, const Geo* geo, char* ring, uint64_t* full,
                         uint64_t* empty) {
  unsigned n = 0;  // chunk sequence number, as the consumers count it
  for (int layer = 0; layer < p.L; layer++) {
    for (int s = 0; s < 4; s++) {
      const Geo g = geo[s];
      for (int seg = 0; seg < g.segs; seg++) {
        const char* base = reinterpret_cast<const char*>(seg_base(p, g, s, layer, seg));
        for (int k = 0; k < g.cps; k++, n++) {
          const int slot = n % p.slots;
          if (n >= (unsigned)p.slots) mbar_wait(&empty[slot], ((n / p.slots) - 1) & 1, p.error);
          if (seg == 0 && k == 0) stamp<TRACE>(p, layer, 10 + s);
          const int rows = min(1 << g.shift, g.seg_rows - (k << g.shift));
          const unsigned bytes = rows * g.K * sizeof(T);
          mbar_expect_tx(&full[slot], bytes);
          bulk_copy(ring + (size_t)slot * SLOT, base + ((size_t)k << g.shift) * g.K * sizeof(T),
                    bytes, &full[slot]);
        }
      }
    }
  }
}

// ---------------------------------------------------------------- consumer parts

struct Ring {  // the consumers' view: the next stage's first chunk
  const char* mem;
  uint64_t *full, *empty;
  int slots;
  int slot;        // its slot
  unsigned phase;  // the parity of that slot's use
  __device__ __forceinline__ void advance(int chunks) {
    slot += chunks;
    while (slot >= slots) {
      slot -= slots;
      phase ^= 1u;
    }
  }
};

// The stage's products: red[r] = row r (of the CTA's stage rows) of W @ xs, float32. Warp w
// takes the contiguous rows [w q, (w + 1) q), q = cdiv(R, WARPS) <= MAX_WROWS, waits for the
// chunks that hold them, and multiplies them together: each step's activations (8 a lane) load
// once for all its rows, whose sums are independent chains. Every warp then arrives on every
// chunk's empty barrier (the launcher keeps a stage's chunks within the ring).
template <typename T>
__device__ __noinline__ void stage_products(const Geo& g, const Ring& ring, const float* xs,
                                            float* red, int warp, int lane, int* error) {
  using PT = Pair<T>;
  const int R = g.rows(), q = (R + WARPS - 1) / WARPS;
  const int r0 = warp * q, nr = min(R, r0 + q) - r0;
  int waited = -1;
#pragma unroll 1
  for (int i0 = 0; i0 < nr; i0 += 2) {  // two rows at a time (a small loop body)
    const T* w[2];
#pragma unroll
    for (int i = 0; i < 2; i++) {
      const int r = r0 + min(i0 + i, nr - 1), seg = r >= g.seg_rows ? 1 : 0;
      const int rr = r - seg * g.seg_rows, ch = seg * g.cps + (rr >> g.shift);
      int slot = ring.slot + ch;
      unsigned phase = ring.phase;
      if (slot >= ring.slots) {
        slot -= ring.slots;
        phase ^= 1u;
      }
      if (ch != waited) {
        mbar_wait(&ring.full[slot], phase, error);
        waited = ch;
      }
      w[i] = reinterpret_cast<const T*>(ring.mem + (size_t)slot * SLOT) +
             (int64_t)(rr & ((1 << g.shift) - 1)) * g.K;
    }
    float acc[2] = {0.f, 0.f};
#pragma unroll 2
    for (int k = lane * 8; k < g.K; k += 256) {
      const float4 xa = *reinterpret_cast<const float4*>(xs + k);
      const float4 xb = *reinterpret_cast<const float4*>(xs + k + 4);
#pragma unroll
      for (int i = 0; i < 2; i++) {
        const uint4 raw = *reinterpret_cast<const uint4*>(w[i] + k);
        const typename PT::V* v = reinterpret_cast<const typename PT::V*>(&raw);
        const float2 w0 = PT::f2(v[0]), w1 = PT::f2(v[1]), w2 = PT::f2(v[2]), w3 = PT::f2(v[3]);
        float a = acc[i];
        a = fmaf(w0.x, xa.x, a);
        a = fmaf(w0.y, xa.y, a);
        a = fmaf(w1.x, xa.z, a);
        a = fmaf(w1.y, xa.w, a);
        a = fmaf(w2.x, xb.x, a);
        a = fmaf(w2.y, xb.y, a);
        a = fmaf(w3.x, xb.z, a);
        a = fmaf(w3.y, xb.w, a);
        acc[i] = a;
      }
    }
#pragma unroll
    for (int i = 0; i < 2; i++) {
      float a = acc[i];
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) a += __shfl_xor_sync(FULL, a, off);
      if (lane == 0 && i0 + i < nr) red[r0 + i0 + i] = a;
    }
  }
  if (lane == 0) {
    int slot = ring.slot;
    for (int ch = 0; ch < g.chunks(); ch++) {
      mbar_arrive(&ring.empty[slot]);
      if (++slot == ring.slots) slot = 0;
    }
  }
}

// xs <- rms_norm(x) * w in float32, rounded as the engine rounds (all consumer threads): x from
// the tagged words (or, with `emb`, the embedding row), H <= BATCH * NT (the launcher checks).
template <typename T>
__device__ __noinline__ void norm_into(const uint32_t* words, uint32_t tag, const T* emb, const T* w, int H,
                          float eps, float* xs, float* scratch, int* error) {
  using PT = Pair<T>;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  float wv[BATCH], v[BATCH];
#pragma unroll
  for (int u = 0; u < BATCH; u++) {
    const int i = u * NT + tid;
    wv[u] = i < H ? PT::f(w[i]) : 0.f;
  }
  if (emb != nullptr) {
#pragma unroll
    for (int u = 0; u < BATCH; u++) {
      const int i = u * NT + tid;
      v[u] = i < H ? PT::f(emb[i]) : 0.f;
    }
  } else {
    poll_words<T>(words, 0, H, tag, v, error);
  }
  float ss = 0.f;
#pragma unroll
  for (int u = 0; u < BATCH; u++) ss += v[u] * v[u];
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) ss += __shfl_xor_sync(FULL, ss, off);
  if (lane == 0) scratch[warp] = ss;
  consumers_sync();
  float tot = 0.f;
#pragma unroll
  for (int i = 0; i < WARPS; i++) tot += scratch[i];
  const float rstd = rsqrtf(tot / H + eps);
#pragma unroll
  for (int u = 0; u < BATCH; u++) {
    const int i = u * NT + tid;
    if (i < H) xs[i] = PT::rnd(PT::rnd(v[u] * rstd) * wv[u]);
  }
  consumers_sync();
}

// xs <- the n tagged words (all consumer threads).
template <typename T>
__device__ __noinline__ void words_into(const uint32_t* words, int n, uint32_t tag, float* xs, int* error) {
  for (int base = 0; base < n; base += BATCH * NT) {
    float v[BATCH];
    poll_words<T>(words, base, n, tag, v, error);
#pragma unroll
    for (int u = 0; u < BATCH; u++) {
      const int i = base + u * NT + (int)threadIdx.x;
      if (i < n) xs[i] = v[u];
    }
  }
  consumers_sync();
}

// ---------------------------------------------------------------- attention (as attention_direct.cu; the shared helpers in decode_common.cuh)

template <typename T>
__device__ __forceinline__ void load_tile(Tile<T>& t, const T* k_base, const T* v_base,
                                          int64_t stride_ks, int row0, int seq_len, int lane) {
  using PT = Pair<T>;
  const typename PT::V zero = PT::v2(0.f, 0.f);
#pragma unroll
  for (int r = 0; r < ROWS; r++) {
    const bool live = row0 + r < seq_len;
    const auto* k = reinterpret_cast<const typename PT::V*>(k_base + (int64_t)(row0 + r) * stride_ks);
    const auto* v = reinterpret_cast<const typename PT::V*>(v_base + (int64_t)(row0 + r) * stride_ks);
    t.k_lo[r] = live ? __ldcs(k + lane) : zero;
    t.k_hi[r] = live ? __ldcs(k + HALF / 2 + lane) : zero;
    t.v_lo[r] = live ? __ldcs(v + lane) : zero;
    t.v_hi[r] = live ? __ldcs(v + HALF / 2 + lane) : zero;
  }
}

struct Online {  // a warp's online-softmax state for its 2 heads (base 2)
  float m[GROUP], l[GROUP];
  Quad acc[GROUP];
};

// One 16-row tile into the warp's state. `mine`: the new row (position pos) lies in the tile;
// its score s_new and value vn come from registers, the tile's row at pos is skipped.
template <typename T>
__device__ __forceinline__ void tile_step(Online& st, const Tile<T>& t, const Quad* q,
                                          const float* s_new, const Quad& vn, int row0,
                                          int seq_len, int pos, bool mine, float qk_scale,
                                          float* sp, int lane) {
  using PT = Pair<T>;
  const int g_mine = lane >> 4;
  const float score = tile_score(t, q, row0, seq_len, pos, qk_scale, lane);
  float mt = score;
#pragma unroll
  for (int off = 8; off > 0; off >>= 1) mt = fmaxf(mt, __shfl_xor_sync(FULL, mt, off));
  const float m_other = __shfl_xor_sync(FULL, mt, 16);
  const float m_tile[GROUP] = {g_mine == 0 ? mt : m_other, g_mine == 0 ? m_other : mt};
  float m_new[GROUP], alpha[GROUP];
#pragma unroll
  for (int g = 0; g < GROUP; g++) {
    m_new[g] = fmaxf(st.m[g], mine ? fmaxf(m_tile[g], s_new[g]) : m_tile[g]);
    alpha[g] = ex2(st.m[g] - m_new[g]);  // m -inf (first tile): 0
  }
  const float p = ex2(score - m_new[g_mine]);
  float lt = p;
#pragma unroll
  for (int off = 8; off > 0; off >>= 1) lt += __shfl_xor_sync(FULL, lt, off);
  const float l_other = __shfl_xor_sync(FULL, lt, 16);
  const float l_tile[GROUP] = {g_mine == 0 ? lt : l_other, g_mine == 0 ? l_other : lt};
  __syncwarp();
  sp[lane] = PT::rnd(p);
  __syncwarp();
  float pr[GROUP * ROWS];
#pragma unroll
  for (int i = 0; i < GROUP * ROWS; i += 4) {
    const float4 f = *reinterpret_cast<const float4*>(&sp[i]);
    pr[i] = f.x;
    pr[i + 1] = f.y;
    pr[i + 2] = f.z;
    pr[i + 3] = f.w;
  }
#pragma unroll
  for (int g = 0; g < GROUP; g++) {
    const float fn = mine ? ex2(s_new[g] - m_new[g]) : 0.f;
    st.l[g] = st.l[g] * alpha[g] + l_tile[g] + fn;
    Quad a;
    a.lo = make_float2(st.acc[g].lo.x * alpha[g] + vn.lo.x * fn, st.acc[g].lo.y * alpha[g] + vn.lo.y * fn);
    a.hi = make_float2(st.acc[g].hi.x * alpha[g] + vn.hi.x * fn, st.acc[g].hi.y * alpha[g] + vn.hi.y * fn);
    st.acc[g] = add_values(a, t, pr + g * ROWS);
    st.m[g] = m_new[g];
  }
}

struct __align__(16) AttnSmem {
  float m[WARPS][GROUP], l[WARPS][GROUP];
  float acc[WARPS][GROUP][D];
  float sp[WARPS][GROUP * ROWS];
  int ticket;
};

// The new token's q (both query heads), k and v of kv head j from the tagged qkv words: this
// lane's 4 dims of each, once every one carries `tag`.
template <typename T>
__device__ __forceinline__ void poll_qkv(const uint32_t* qkv, int j, int hq, int hkv, uint32_t tag,
                                         int lane, Quad (&out)[4], int* error) {
  using PT = Pair<T>;
  const int rows[4] = {j * GROUP, j * GROUP + 1, hq + j, hq + hkv + j};
  uint32_t w[16];
  uint64_t t0 = 0;
  for (int it = 1; (ld_word(qkv + rows[3] * D + 2 * lane) >> 16) != tag; it++) {
    __nanosleep(POLL_NS);
    if ((it & 15) == 0 && give_up(t0, error)) break;
  }
  for (int it = 1;; it++) {
    bool ok = true;
#pragma unroll
    for (int r = 0; r < 4; r++) {
      const uint32_t* base = qkv + rows[r] * D + 2 * lane;
      w[4 * r] = ld_word(base);
      w[4 * r + 1] = ld_word(base + 1);
      w[4 * r + 2] = ld_word(base + HALF);
      w[4 * r + 3] = ld_word(base + HALF + 1);
    }
#pragma unroll
    for (int i = 0; i < 16; i++) ok &= (w[i] >> 16) == tag;
    if (ok || ((it & 15) == 0 && give_up(t0, error))) break;
  }
#pragma unroll
  for (int r = 0; r < 4; r++) {
    out[r].lo = make_float2(PT::unbits(w[4 * r] & 0xffffu), PT::unbits(w[4 * r + 1] & 0xffffu));
    out[r].hi = make_float2(PT::unbits(w[4 * r + 2] & 0xffffu), PT::unbits(w[4 * r + 3] & 0xffffu));
  }
}

// The CTA's attention work for `layer` (CTA a < Hkv * split): each warp's first tile loaded
// (cache rows of earlier steps), then the new token's q/k/v polled, the tiles walked, the warps
// merged; the head's output written as tagged words (by this CTA, or by the last of the split).
template <bool TRACE, typename T>
__device__ __noinline__ void attention(const Params<T>& p, int layer, int a, AttnSmem& sm,
                                          int pos, int seq_len, uint32_t tag_qkv,
                                          uint32_t tag_attn) {
  using PT = Pair<T>;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int j = a / p.split, cc = a % p.split, hq = p.hkv * GROUP;
  const int c0 = cc * p.chunk_rows, c1 = min(c0 + p.chunk_rows, seq_len);
  const T* k_base = p.k_cache[layer] + (int64_t)j * p.stride_kh;
  const T* v_base = p.v_cache[layer] + (int64_t)j * p.stride_kh;
  Tile<T> t;
  load_tile<T>(t, k_base, v_base, p.stride_ks, c0 + warp * ROWS, c1, lane);
  Online st;
#pragma unroll
  for (int g = 0; g < GROUP; g++) {
    st.m[g] = -INFINITY;
    st.l[g] = 0.f;
    st.acc[g].lo = st.acc[g].hi = make_float2(0.f, 0.f);
  }
  const int row_first = c0 + warp * ROWS;
  if (row_first < c1) {  // the warp has a live row (or holds the new one: pos = seq_len - 1)
    const bool in_table = pos >= 0 && pos < p.P;
    float2 c = make_float2(0.f, 0.f), sn = make_float2(0.f, 0.f);
    if (in_table) {
      c = reinterpret_cast<const float2*>(p.cos_t + (int64_t)pos * HALF)[lane];
      sn = reinterpret_cast<const float2*>(p.sin_t + (int64_t)pos * HALF)[lane];
    }
    c = make_float2(PT::rnd(c.x), PT::rnd(c.y));
    sn = make_float2(PT::rnd(sn.x), PT::rnd(sn.y));
    const Quad qw = load_quad(p.q_norm[layer], lane, false);
    const Quad kw = load_quad(p.k_norm[layer], lane, false);
    Quad raw[4];
    poll_qkv<T>(p.qkv_w_, j, hq, p.hkv, tag_qkv, lane, raw, p.error);
    if (threadIdx.x == 0) stamp<TRACE>(p, layer, 2);
    Quad q[GROUP];
#pragma unroll
    for (int g = 0; g < GROUP; g++) q[g] = norm_rope<T>(raw[g], qw, c, sn, p.eps);
    const Quad kn = norm_rope<T>(raw[2], kw, c, sn, p.eps);
    const Quad vn = raw[3];
    const float qk_scale = p.scale * 1.4426950408889634f;
    float s_new[GROUP];
#pragma unroll
    for (int g = 0; g < GROUP; g++) s_new[g] = warp_sum(dot4(q[g], kn.lo, kn.hi)) * qk_scale;
    for (int row0 = row_first; row0 < c1; row0 += WARPS * ROWS) {
      const bool mine = row0 <= pos && pos < row0 + ROWS;
      if (mine && pos < p.S && in_table) {
        auto* kd = reinterpret_cast<typename PT::V*>(p.k_cache[layer] + (int64_t)j * p.stride_kh +
                                                     (int64_t)pos * p.stride_ks);
        auto* vd = reinterpret_cast<typename PT::V*>(p.v_cache[layer] + (int64_t)j * p.stride_kh +
                                                     (int64_t)pos * p.stride_ks);
        kd[lane] = PT::v2(kn.lo.x, kn.lo.y);
        kd[HALF / 2 + lane] = PT::v2(kn.hi.x, kn.hi.y);
        vd[lane] = PT::v2(vn.lo.x, vn.lo.y);
        vd[HALF / 2 + lane] = PT::v2(vn.hi.x, vn.hi.y);
      }
      if (row0 != row_first) load_tile<T>(t, k_base, v_base, p.stride_ks, row0, seq_len, lane);
      tile_step<T>(st, t, q, s_new, vn, row0, seq_len, pos, mine, qk_scale, sm.sp[warp], lane);
    }
  }
#pragma unroll
  for (int g = 0; g < GROUP; g++) {
    *reinterpret_cast<float2*>(&sm.acc[warp][g][2 * lane]) = st.acc[g].lo;
    *reinterpret_cast<float2*>(&sm.acc[warp][g][HALF + 2 * lane]) = st.acc[g].hi;
    if (lane == 0) {
      sm.m[warp][g] = st.m[g];
      sm.l[warp][g] = st.l[g];
    }
  }
  consumers_sync();
  float* part = p.part + (int64_t)a * PART;
  uint32_t* out = p.attn_w + j * GROUP * D;
  for (int i = threadIdx.x; i < GROUP * HALF; i += NT) {
    const int g = i / HALF, u = i % HALF;
    float m = -INFINITY;
    for (int w = 0; w < WARPS; w++) m = fmaxf(m, sm.m[w][g]);
    float l = 0.f;
    float2 o = make_float2(0.f, 0.f);
    for (int w = 0; w < WARPS; w++) {
      if (sm.m[w][g] == -INFINITY) continue;
      const float f = ex2(sm.m[w][g] - m);
      const float2 av = *reinterpret_cast<const float2*>(&sm.acc[w][g][2 * u]);
      l += sm.l[w][g] * f;
      o.x += av.x * f;
      o.y += av.y * f;
    }
    if (p.split == 1) {
      const float inv = __frcp_rn(l);
      st_word(out + g * D + 2 * u, (tag_attn << 16) | PT::bits(o.x * inv));
      st_word(out + g * D + 2 * u + 1, (tag_attn << 16) | PT::bits(o.y * inv));
    } else {
      *reinterpret_cast<float2*>(&part[2 * GROUP + g * D + 2 * u]) = o;
      if (u == 0) {
        part[g] = m;
        part[GROUP + g] = l;
      }
    }
  }
  if (p.split == 1) return;
  consumers_sync();
  unsigned* tickets = p.tickets + (int64_t)layer * p.hkv;
  if (threadIdx.x == 0) {
    __threadfence();
    sm.ticket = atomicAdd(&tickets[j], 1u);
    __threadfence();
  }
  consumers_sync();
  if (sm.ticket != p.split - 1) return;
  const float* parts = p.part + (int64_t)j * p.split * PART;
  for (int i = threadIdx.x; i < GROUP * HALF; i += NT) {
    const int g = i / HALF, u = i % HALF;
    float m = -INFINITY;
    for (int s = 0; s < p.split; s++) m = fmaxf(m, __ldcg(parts + s * PART + g));
    float l = 0.f;
    float2 o = make_float2(0.f, 0.f);
    for (int s = 0; s < p.split; s++) {
      const float ms = __ldcg(parts + s * PART + g);
      if (ms == -INFINITY) continue;
      const float f = ex2(ms - m);
      const float2 av =
          __ldcg(reinterpret_cast<const float2*>(parts + s * PART + 2 * GROUP + g * D + 2 * u));
      l += __ldcg(parts + s * PART + GROUP + g) * f;
      o.x += av.x * f;
      o.y += av.y * f;
    }
    const float inv = __frcp_rn(l);
    st_word(out + g * D + 2 * u, (tag_attn << 16) | PT::bits(o.x * inv));
    st_word(out + g * D + 2 * u + 1, (tag_attn << 16) | PT::bits(o.y * inv));
  }
}

// ---------------------------------------------------------------- the kernel

template <typename T, bool TRACE>
__global__ void __launch_bounds__(THREADS, 1)
    decode_persistent_kernel(const __grid_constant__ Params<T> p) {
  using PT = Pair<T>;
  extern __shared__ __align__(128) char smem[];
  __shared__ __align__(8) uint64_t full[MAX_SLOTS], empty[MAX_SLOTS];
  __shared__ float red[MAX_ROWS], scratch[WARPS];
  __shared__ float xown[MAX_ROWS];  // this CTA's rows of the residual stream (it owns them)
  __shared__ AttnSmem att;
  __shared__ int done_ticket;
  char* ring = smem;
  float* xs = reinterpret_cast<float*>(smem + (size_t)p.slots * SLOT);
  const int c = blockIdx.x, C = gridDim.x;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int hq = p.hkv * GROUP, nqkv = (hq + 2 * p.hkv) * D;
  const Geo geo[4] = {geo_of(nqkv, p.H, 1, sizeof(T), c, C), geo_of(p.H, hq * D, 1, sizeof(T), c, C),
                      geo_of(p.I, p.H, 2, sizeof(T), c, C), geo_of(p.H, p.I, 1, sizeof(T), c, C)};

  if (threadIdx.x == 0) {
    for (int i = 0; i < p.slots; i++) {
      mbar_init(&full[i], 1);
      mbar_init(&empty[i], WARPS);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();

  if (warp == WARPS) {  // the producer: weights only (written before this launch)
    if (lane == 0) producer<TRACE>(p, geo, ring, full, empty);
    return;
  }

  asm volatile("griddepcontrol.wait;" ::: "memory");  // tokens, positions: the previous step
  if (threadIdx.x == 0) {
    stamp<TRACE>(p, 0, 14);
    if constexpr (TRACE) p.trace[((size_t)blockIdx.x * p.L) * 32 + 15] = clock64();
  }
  const int pos = p.positions[0], seq_len = p.seq_lens[0];
  const unsigned step = *p.step;
  const T* emb = p.embed + p.tokens[0] * p.H;
  const Rows own = rows_of(p.H, c, C);  // o_proj's and down's rows: the same
  for (int i = threadIdx.x; i < own.count; i += NT) xown[i] = PT::f(emb[own.start + i]);
  Ring rg{ring, full, empty, p.slots, 0, 0u};
  const bool attends = c < p.hkv * p.split;

  for (int layer = 0; layer < p.L; layer++) {
    const bool last = layer == p.L - 1;
    if (last) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    const uint32_t t_qkv = tag_of(step, p.L, layer, 1, 0), t_attn = t_qkv, t_act = t_qkv;
    const uint32_t t_xo = tag_of(step, p.L, layer, 2, 0), t_xd = tag_of(step, p.L, layer, 2, 1);
    const uint32_t t_xprev = layer > 0 ? tag_of(step, p.L, layer - 1, 2, 1) : 0u;
    // ---- qkv = W_qkv @ rms_norm(x)
    if (geo[0].segs) {
      norm_into<T>(p.x_w, t_xprev, layer == 0 ? emb : nullptr, p.in_norm[layer], p.H, p.eps, xs,
                   scratch, p.error);
      if (threadIdx.x == 0) stamp<TRACE>(p, layer, 16);
      stage_products<T>(geo[0], rg, xs, red, warp, lane, p.error);
      consumers_sync();
      if (threadIdx.x == 0) stamp<TRACE>(p, layer, 17);
      for (int i = threadIdx.x; i < geo[0].seg_rows; i += NT)
        st_word(p.qkv_w_ + geo[0].start + i, (t_qkv << 16) | PT::bits(red[i]));
      rg.advance(geo[0].chunks());
      if (threadIdx.x == 0) stamp<TRACE>(p, layer, 1);
    }
    // ---- attention
    if (attends) {
      attention<TRACE>(p, layer, c, att, pos, seq_len, t_qkv, t_attn);
      if (threadIdx.x == 0) stamp<TRACE>(p, layer, 3);
    }
    // ---- x += W_o @ attn
    if (geo[1].segs) {
      words_into<T>(p.attn_w, hq * D, t_attn, xs, p.error);
      if (threadIdx.x == 0) stamp<TRACE>(p, layer, 18);
      stage_products<T>(geo[1], rg, xs, red, warp, lane, p.error);
      consumers_sync();
      if (threadIdx.x == 0) stamp<TRACE>(p, layer, 19);
      for (int i = threadIdx.x; i < own.count; i += NT) {
        const float v = PT::rnd(xown[i] + PT::rnd(red[i]));
        xown[i] = v;
        st_word(p.x_w + own.start + i, (t_xo << 16) | PT::bits(v));
      }
      rg.advance(geo[1].chunks());
      if (threadIdx.x == 0) stamp<TRACE>(p, layer, 5);
    }
    // ---- act = silu(W_g @ n) * (W_u @ n), n = rms_norm(x)
    if (geo[2].segs) {
      norm_into<T>(p.x_w, t_xo, nullptr, p.post_norm[layer], p.H, p.eps, xs, scratch, p.error);
      if (threadIdx.x == 0) stamp<TRACE>(p, layer, 20);
      stage_products<T>(geo[2], rg, xs, red, warp, lane, p.error);
      consumers_sync();
      if (threadIdx.x == 0) stamp<TRACE>(p, layer, 21);
      const int n = geo[2].seg_rows;
      for (int i = threadIdx.x; i < n; i += NT) {
        const float g = PT::rnd(red[i]), u = PT::rnd(red[n + i]);
        const float s = PT::rnd(g / (1.f + expf(-g)));
        st_word(p.act_w + geo[2].start + i, (t_act << 16) | PT::bits(s * u));
      }
      rg.advance(geo[2].chunks());
      if (threadIdx.x == 0) stamp<TRACE>(p, layer, 7);
    }
    // ---- x += W_down @ act
    if (geo[3].segs) {
      words_into<T>(p.act_w, p.I, t_act, xs, p.error);
      if (threadIdx.x == 0) stamp<TRACE>(p, layer, 22);
      stage_products<T>(geo[3], rg, xs, red, warp, lane, p.error);
      consumers_sync();
      if (threadIdx.x == 0) stamp<TRACE>(p, layer, 23);
      for (int i = threadIdx.x; i < own.count; i += NT) {
        const float v = PT::rnd(xown[i] + PT::rnd(red[i]));
        xown[i] = v;
        st_word(p.x_w + own.start + i, (t_xd << 16) | PT::bits(v));
        if (last) p.x[own.start + i] = PT::t(v);
      }
      rg.advance(geo[3].chunks());
      if (threadIdx.x == 0) stamp<TRACE>(p, layer, 9);
    }
  }
  if constexpr (TRACE) {
    if (threadIdx.x == 0) {
      p.trace[((size_t)blockIdx.x * p.L + p.L - 1) * 32 + 14] = globaltimer();
      p.trace[((size_t)blockIdx.x * p.L + p.L - 1) * 32 + 15] = clock64();
    }
  }
  // The last CTA out zeroes the tickets and advances the step for the next launch.
  unsigned* exit_cnt = p.tickets + (int64_t)p.L * p.hkv;
  consumers_sync();
  if (threadIdx.x == 0) {
    __threadfence();
    done_ticket = atomicAdd(exit_cnt, 1u);
  }
  consumers_sync();
  if (done_ticket == C - 1) {
    for (int i = threadIdx.x; i < p.L * p.hkv + 1; i += NT) p.tickets[i] = 0u;
    if (threadIdx.x == 0) *p.step = step + 1;
  }
}

}  // namespace

// ptrs: qkv_w, o_w, gu_w, down_w, in_norm, post_norm, q_norm, k_norm, k_cache, v_cache (each a
// device array of L pointers), embed, tokens, positions, seq_lens, cos, sin, x, x_words,
// qkv_words, attn_words, act_words, part, tickets, step, error, trace (or null); floats:
// scale, eps; ints: L, H, I, hkv, S, P, split, chunk_rows, slots, grid, device; int64:
// stride_kh, stride_ks. dtype 0 bfloat16, 1 float16. Returns a cudaError_t (0: launched).
template <typename T>
static int launch_t(int pdl, void** a, const float* f, const int* n, const int64_t* st,
                    void* stream) {
  Params<T> p;
  p.qkv_w = (const T* const*)a[0];
  p.o_w = (const T* const*)a[1];
  p.gu_w = (const T* const*)a[2];
  p.down_w = (const T* const*)a[3];
  p.in_norm = (const T* const*)a[4];
  p.post_norm = (const T* const*)a[5];
  p.q_norm = (const T* const*)a[6];
  p.k_norm = (const T* const*)a[7];
  p.k_cache = (T* const*)a[8];
  p.v_cache = (T* const*)a[9];
  p.embed = (const T*)a[10];
  p.tokens = (const int64_t*)a[11];
  p.positions = (const int*)a[12];
  p.seq_lens = (const int*)a[13];
  p.cos_t = (const float*)a[14];
  p.sin_t = (const float*)a[15];
  p.x = (T*)a[16];
  p.x_w = (uint32_t*)a[17];
  p.qkv_w_ = (uint32_t*)a[18];
  p.attn_w = (uint32_t*)a[19];
  p.act_w = (uint32_t*)a[20];
  p.part = (float*)a[21];
  p.tickets = (unsigned*)a[22];
  p.step = (unsigned*)a[23];
  p.error = (int*)a[24];
  p.trace = (uint64_t*)a[25];
  p.scale = f[0];
  p.eps = f[1];
  p.L = n[0];
  p.H = n[1];
  p.I = n[2];
  p.hkv = n[3];
  p.S = n[4];
  p.P = n[5];
  p.split = n[6];
  p.chunk_rows = n[7];
  p.slots = n[8];
  p.stride_kh = st[0];
  p.stride_ks = st[1];
  const int grid = n[9];
  if (p.slots < 2 || p.slots > MAX_SLOTS || grid < 1) return (int)cudaErrorInvalidValue;
  int xs_floats = p.I > p.H ? p.I : p.H;
  if (2 * p.hkv * D > xs_floats) xs_floats = 2 * p.hkv * D;
  const size_t dyn = (size_t)p.slots * SLOT + (size_t)xs_floats * sizeof(float);
  auto kernel = p.trace != nullptr ? decode_persistent_kernel<T, true>
                                   : decode_persistent_kernel<T, false>;
  cudaError_t err =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)dyn);
  if (err != cudaSuccess) return (int)err;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3(THREADS);
  cfg.dynamicSmemBytes = dyn;
  cfg.stream = (cudaStream_t)stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl ? 1 : 0;
  return (int)cudaLaunchKernelEx(&cfg, kernel, p);
}

extern "C" int evk_decode_persistent(int dtype, int pdl, void** a, const float* f, const int* n,
                                     const int64_t* st, void* stream) {
  cudaError_t err = cudaSetDevice(n[10]);
  if (err != cudaSuccess) return (int)err;
  if (dtype == 0) return launch_t<__nv_bfloat16>(pdl, a, f, n, st, stream);
  return launch_t<__half>(pdl, a, f, n, st, stream);
}

// Static shared memory of the kernel (bytes), for the launcher's slot count (or -error).
extern "C" int evk_decode_persistent_static_smem(int dtype, int device) {
  cudaSetDevice(device);
  cudaFuncAttributes attr;
  cudaError_t err = dtype == 0
                        ? cudaFuncGetAttributes(&attr, decode_persistent_kernel<__nv_bfloat16, true>)
                        : cudaFuncGetAttributes(&attr, decode_persistent_kernel<__half, true>);
  if (err != cudaSuccess) return -(int)err;
  return (int)attr.sharedSizeBytes;
}

extern "C" const char* evk_error_string(int err) { return cudaGetErrorString((cudaError_t)err); }
