// Helpers shared by the CUDA decode GEMVs (int4_gemv.cu, rows_mma.cu): their op codes and
// flags (the launchers' int arguments, ops/quant_cuda.py and ops/rows_cuda.py), pairs of the
// dtype packed into and out of 32-bit words, one tensor-core MMA tile, the greedy argmax key,
// and their launch configuration.
// Included after decode_common.cuh (Pair<T>), inside each source's anonymous namespace.

constexpr int OP_LINEAR = 0;  // y = W @ norm?(x) + bias?
constexpr int OP_RESIDUAL = 1;  // res += W @ x
constexpr int OP_GATE_UP = 2;  // act = silu(Wg @ n) * (Wu @ n)
constexpr int OP_HEAD = 3;  // logits and / or argmax keys

constexpr int F_NORM = 1;
constexpr int F_BIAS = 2;
constexpr int F_PDL = 8;
constexpr int F_LOGITS = 16;  // HEAD: write the float32 logits
constexpr int F_KEYS = 32;    // HEAD: max the argmax keys into keys

// A 32-bit pair of the dtype from / to two floats.
template <typename T>
__device__ __forceinline__ float2 unpack(uint32_t bits) {
  return Pair<T>::f2(*reinterpret_cast<const typename Pair<T>::V*>(&bits));
}
template <typename T>
__device__ __forceinline__ uint32_t pack(float lo, float hi) {
  const typename Pair<T>::V p = Pair<T>::v2(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&p);
}

// d += A B for one m16n8k16 tile of the dtype, float32 accumulators.
template <typename T>
__device__ __forceinline__ void mma(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                    uint32_t a3, uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<T, __half>) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
}

// kernels/gemv.py `argmax_key`: an int64 ordered as greedy argmax orders (value, row): the
// larger value first (+0 and -0 equal, a NaN above every number), then the lower row (< 2^24).
__device__ __forceinline__ unsigned long long argmax_key(float value, int row) {
  const uint32_t bits = __float_as_uint(value == 0.f ? 0.f : value);
  const uint32_t ordered = bits >= 0x80000000u ? 0xFFFFFFFFu - bits : bits + 0x80000000u;
  return (unsigned long long)ordered * 0x1000000ull + (0xFFFFFFull - (unsigned long long)row);
}

// A launch of `threads` a CTA on `stream` (its grid left to the caller), with programmatic
// dependent launch when `pdl`; `attr` holds its one attribute and must outlive the launch.
inline cudaLaunchConfig_t launch_config(int threads, void* stream, bool pdl,
                                        cudaLaunchAttribute* attr) {
  cudaLaunchConfig_t cfg = {};
  cfg.blockDim = dim3(threads);
  cfg.stream = (cudaStream_t)stream;
  cfg.attrs = attr;
  cfg.numAttrs = 0;
  if (pdl) {
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.numAttrs = 1;
  }
  return cfg;
}
