#include "common/compression.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"

namespace pstrain {
namespace {

// ---------------------------------------------------------------------------------------------
// Bit-level conversions. Each is a chain of integer operations and selects (no branches) that
// -O3 vectorizes; they rely on the FPU's default round-to-nearest-even mode and on fp32
// subnormals not being flushed to zero, which holds unless built with -ffast-math.

// On x86-64 the bf16 loops are compiled twice, for the baseline (SSE2) that the build targets and
// for AVX2, and the dynamic loader picks one for the CPU (GCC and Clang function multiversioning).
// AVX2 has the unsigned packs and wider registers these conversions want: about twice the
// throughput of SSE2 (bench/compression_bench.cc). Both run the same source, so give the same bits.
// Not in a sanitizer build (PSTRAIN_SANITIZE): the loader runs the choosing function (an ifunc
// resolver, instrumented like the rest) before the sanitizer's runtime has started.
#if defined(__x86_64__) && defined(__linux__) && (defined(__GNUC__) || defined(__clang__)) && !defined(PSTRAIN_SANITIZE)
#define PSTRAIN_VECTOR_LOOP __attribute__((target_clones("avx2", "default")))
#else
#define PSTRAIN_VECTOR_LOOP
#endif

inline uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

inline float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

constexpr uint32_t kAbsMask = 0x7fffffffu;
constexpr uint32_t kFp32Inf = 0x7f800000u;
// The smallest magnitudes that round to Inf: 65520 (halfway between fp16's 65504 and 2^16, a tie
// that goes to the even 2^16), and halfway above bf16's largest finite 0x7f7f (odd, so it too
// rounds up).
constexpr uint32_t kFp16OverflowBits = 0x477ff000u;
constexpr uint32_t kBf16OverflowBits = 0x7f7f8000u;

// All-ones when `condition`, else zero. Merging with masks rather than `?:` keeps GCC from turning
// a select whose inputs involve float arithmetic back into a branch, which stops the vectorizer.
inline uint32_t Mask(bool condition) { return 0u - static_cast<uint32_t>(condition); }

inline uint32_t Select(uint32_t mask, uint32_t if_set, uint32_t if_clear) {
  return (if_set & mask) | (if_clear & ~mask);
}

// Comparisons of magnitudes (sign bit clear) are made on int32: SSE2 has signed 32-bit compares
// only, and the unsigned form costs extra instructions per element.
inline bool Below(uint32_t magnitude, uint32_t limit) {
  return static_cast<int32_t>(magnitude) < static_cast<int32_t>(limit);
}

inline uint16_t Fp16FromBits(uint32_t x) {
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t a = x & kAbsMask;
  // |f| >= 2^-14 (fp16 normal): rebias the exponent from 127 to 15 and round off the 13 low
  // mantissa bits, ties to even. A carry out of the mantissa bumps the exponent, which is the
  // right result, up to and including Inf (0x7c00) for 65520 <= |f| < 2^16.
  const uint32_t normal = (a - (112u << 23) + 0xfffu + ((a >> 13) & 1u)) >> 13;
  // |f| < 2^-14 (fp16 subnormal or zero): adding 0.5 leaves 2^-24 as the unit of the last place,
  // so the FPU's own rounding puts the fp16 mantissa in the low bits.
  const uint32_t subnormal = Bits(FromBits(a) + 0.5f) - Bits(0.5f);
  // |f| >= 2^16: Inf, or NaN made quiet with the top of its payload, as x86's F16C does.
  const uint32_t special = Select(Mask(Below(kFp32Inf, a)), 0x7e00u | ((a >> 13) & 0x3ffu), 0x7c00u);
  uint32_t h = Select(Mask(Below(a, 113u << 23)), subnormal, normal);
  h = Select(Mask(Below(a, 143u << 23)), h, special);
  return static_cast<uint16_t>(sign | h);
}

inline float Fp16ToFloatInline(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t em = h & 0x7fffu;  // exponent and mantissa
  // Normal: shift into place and rebias the exponent from 15 to 127. Inf and NaN need exponent
  // 255, so twice the rebias.
  const uint32_t normal = (em << 13) + (112u << 23) + (~Mask(Below(em, 0x7c00u)) & (112u << 23));
  // Subnormal and zero: the value is mantissa * 2^-24, exact in fp32.
  const uint32_t subnormal = Bits(static_cast<float>(static_cast<int32_t>(em)) * 0x1p-24f);
  return FromBits(sign | Select(Mask(Below(em, 0x400u)), subnormal, normal));
}

inline uint16_t Bf16FromBits(uint32_t x) {
  // Round off the low 16 bits, ties to even; a carry bumps the exponent, up to Inf. The sign bit
  // never overflows because the largest finite magnitude plus the rounding stays below 2^31.
  const uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  // NaN: keep the sign and the top of the payload, and set the quiet bit, since rounding could
  // carry a NaN into Inf.
  const uint32_t nan = (x >> 16) | 0x0040u;
  return static_cast<uint16_t>(Select(Mask(Below(kFp32Inf, x & kAbsMask)), nan, rounded));
}

inline float Bf16ToFloatInline(uint16_t b) { return FromBits(static_cast<uint32_t>(b) << 16); }

absl::Status SizeMismatch(absl::string_view what, size_t got, size_t expected) {
  return absl::InvalidArgumentError(
      absl::StrCat(what, ": got ", got, " values, expected ", expected, " (the destination's size)"));
}

// The error for the first finite element of `src` whose magnitude bits are >= overflow_bits, or
// OK. The encoders' fast loops flag any magnitude at or beyond the threshold, or any Inf or NaN
// code (F16C), which is one compare per element; this pass, run only then, tells an overflow from
// a non-finite input.
absl::Status CheckOverflow(absl::Span<const float> src, uint32_t overflow_bits, absl::string_view format,
                           float largest) {
  for (size_t i = 0; i < src.size(); ++i) {
    const uint32_t a = Bits(src[i]) & kAbsMask;
    if (a >= overflow_bits && a < kFp32Inf) {
      return absl::InvalidArgumentError(
          absl::StrCat("element ", i, " is ", src[i], ", beyond ", format, "'s largest finite ", largest));
    }
  }
  return absl::OkStatus();
}

// The portable fp16 loops. Suspects are flagged, not branched on, so that the loops stay
// vectorized. No AVX2 clone: every x86 CPU with AVX2 also has F16C, below.

bool EncodeFp16Portable(const float* in, uint16_t* out, size_t n) {
  uint32_t suspect = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t x = Bits(in[i]);
    suspect |= static_cast<uint32_t>(!Below(x & kAbsMask, kFp16OverflowBits));
    out[i] = Fp16FromBits(x);
  }
  return suspect != 0;
}

void DecodeFp16Portable(const uint16_t* in, float* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = Fp16ToFloatInline(in[i]);
}

void AccumulateFp16Portable(const uint16_t* in, float weight, float* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] += weight * Fp16ToFloatInline(in[i]);
}

// x86's F16C instructions convert 8 values at a time: 2x (16M floats) to 6x (1M floats) the
// throughput of the portable loops compiled for AVX2, with the same results (round to nearest
// even, whatever MXCSR says; NaN payloads as in Fp16FromBits). Each does the largest multiple of 8
// elements and returns how many; the portable loop does the rest.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define PSTRAIN_F16C 1

// F16C from CPUID leaf 1 rather than __builtin_cpu_supports("f16c"), which clang 14 (the fuzz
// build's compiler) does not know. Asked once: CPUID costs hundreds of cycles, and traps to the
// hypervisor in a VM (tens of microseconds), while a table row's value is 16 to 64 codes.
bool HaveF16c() {
  static const bool have = [] {
    unsigned eax, ebx, ecx, edx;
    return __builtin_cpu_supports("avx2") && __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
  }();
  return have;
}

// Sets *special when a code is Inf or NaN.
__attribute__((target("avx2,f16c"))) size_t EncodeFp16F16c(const float* in, uint16_t* out, size_t n, bool* special) {
  const __m128i exponent = _mm_set1_epi16(0x7c00);
  __m128i any = _mm_setzero_si128();
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT);
    any = _mm_or_si128(any, _mm_cmpeq_epi16(_mm_and_si128(h, exponent), exponent));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
  }
  *special = _mm_movemask_epi8(any) != 0;
  return i;
}

__attribute__((target("avx2,f16c"))) size_t DecodeFp16F16c(const uint16_t* in, float* out, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
  }
  return i;
}

// dst += weight * x as a multiply and an add, no FMA: the same rounding as the portable loop.
__attribute__((target("avx2,f16c"))) size_t AccumulateFp16F16c(const uint16_t* in, float weight, float* out, size_t n) {
  const __m256 w = _mm256_set1_ps(weight);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i)));
    _mm256_storeu_ps(out + i, _mm256_add_ps(_mm256_loadu_ps(out + i), _mm256_mul_ps(w, x)));
  }
  return i;
}
#endif  // x86-64

// The first index whose code has all of `exponent` set (Inf or NaN), or -1.
int64_t FindAllOnesExponent(absl::Span<const uint16_t> src, uint16_t exponent) {
  const uint16_t* in = src.data();
  uint32_t any = 0;
  for (size_t i = 0; i < src.size(); ++i) any |= static_cast<uint32_t>((in[i] & exponent) == exponent);
  if (any == 0) return -1;
  for (size_t i = 0; i < src.size(); ++i) {
    if ((in[i] & exponent) == exponent) return static_cast<int64_t>(i);
  }
  return -1;
}

}  // namespace

int64_t FindNonFiniteFp16(absl::Span<const uint16_t> src) { return FindAllOnesExponent(src, 0x7c00); }
int64_t FindNonFiniteBf16(absl::Span<const uint16_t> src) { return FindAllOnesExponent(src, 0x7f80); }

uint16_t FloatToFp16(float value) { return Fp16FromBits(Bits(value)); }
float Fp16ToFloat(uint16_t bits) { return Fp16ToFloatInline(bits); }
uint16_t FloatToBf16(float value) { return Bf16FromBits(Bits(value)); }
float Bf16ToFloat(uint16_t bits) { return Bf16ToFloatInline(bits); }

absl::Status EncodeFp16(absl::Span<const float> src, absl::Span<uint16_t> dst) {
  if (src.size() != dst.size()) return SizeMismatch("fp16 encode", src.size(), dst.size());
  size_t done = 0;
  bool suspect = false;
#ifdef PSTRAIN_F16C
  if (HaveF16c()) done = EncodeFp16F16c(src.data(), dst.data(), src.size(), &suspect);
#endif
  suspect |= EncodeFp16Portable(src.data() + done, dst.data() + done, src.size() - done);
  return suspect ? CheckOverflow(src, kFp16OverflowBits, "fp16", 65504.0f) : absl::OkStatus();
}

PSTRAIN_VECTOR_LOOP
absl::Status EncodeBf16(absl::Span<const float> src, absl::Span<uint16_t> dst) {
  if (src.size() != dst.size()) return SizeMismatch("bf16 encode", src.size(), dst.size());
  const float* in = src.data();
  uint16_t* out = dst.data();
  const size_t n = src.size();
  uint32_t suspect = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t x = Bits(in[i]);
    const uint32_t a = x & kAbsMask;
    suspect |= static_cast<uint32_t>(!Below(a, kBf16OverflowBits));
    out[i] = Bf16FromBits(x);
  }
  if (suspect != 0) return CheckOverflow(src, kBf16OverflowBits, "bf16", Bf16ToFloatInline(0x7f7f));
  return absl::OkStatus();
}

absl::Status DecodeFp16(absl::Span<const uint16_t> src, absl::Span<float> dst) {
  if (src.size() != dst.size()) return SizeMismatch("fp16 decode", src.size(), dst.size());
  size_t done = 0;
#ifdef PSTRAIN_F16C
  if (HaveF16c()) done = DecodeFp16F16c(src.data(), dst.data(), src.size());
#endif
  DecodeFp16Portable(src.data() + done, dst.data() + done, src.size() - done);
  return absl::OkStatus();
}

PSTRAIN_VECTOR_LOOP
absl::Status DecodeBf16(absl::Span<const uint16_t> src, absl::Span<float> dst) {
  if (src.size() != dst.size()) return SizeMismatch("bf16 decode", src.size(), dst.size());
  const uint16_t* in = src.data();
  float* out = dst.data();
  for (size_t i = 0; i < src.size(); ++i) out[i] = Bf16ToFloatInline(in[i]);
  return absl::OkStatus();
}

absl::Status AccumulateFp16(absl::Span<const uint16_t> src, float weight, absl::Span<float> dst) {
  if (src.size() != dst.size()) return SizeMismatch("fp16 accumulate", src.size(), dst.size());
  size_t done = 0;
#ifdef PSTRAIN_F16C
  if (HaveF16c()) done = AccumulateFp16F16c(src.data(), weight, dst.data(), src.size());
#endif
  AccumulateFp16Portable(src.data() + done, weight, dst.data() + done, src.size() - done);
  return absl::OkStatus();
}

PSTRAIN_VECTOR_LOOP
absl::Status AccumulateBf16(absl::Span<const uint16_t> src, float weight, absl::Span<float> dst) {
  if (src.size() != dst.size()) return SizeMismatch("bf16 accumulate", src.size(), dst.size());
  const uint16_t* in = src.data();
  float* out = dst.data();
  for (size_t i = 0; i < src.size(); ++i) out[i] += weight * Bf16ToFloatInline(in[i]);
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// Compression descriptions.

namespace {

constexpr absl::string_view kTopKPrefix = "topk:";

absl::Status BadCompression(absl::string_view text, absl::string_view expected) {
  return absl::InvalidArgumentError(absl::StrCat("--compression: got '", text, "', expected ", expected));
}

}  // namespace

absl::StatusOr<Compression> ParseCompression(absl::string_view text) {
  Compression c;
  if (text == "none") {
    c.kind = Compression::kNone;
  } else if (text == "fp16") {
    c.kind = Compression::kFp16;
  } else if (text == "bf16") {
    c.kind = Compression::kBf16;
  } else if (absl::string_view ratio_text = text; absl::ConsumePrefix(&ratio_text, kTopKPrefix)) {
    double ratio = 0.0;
    // The negated comparison also rejects NaN.
    if (!absl::SimpleAtod(ratio_text, &ratio) || !(ratio > 0.0 && ratio <= 1.0)) {
      return BadCompression(text, "a ratio in (0, 1]");
    }
    c.kind = Compression::kTopK;
    c.topk_ratio = ratio;
  } else {
    return BadCompression(text, "none, fp16, bf16 or topk:RATIO with RATIO in (0, 1]");
  }
  return c;
}

std::string CompressionName(const Compression& compression) {
  switch (compression.kind) {
    case Compression::kNone:
      return "none";
    case Compression::kFp16:
      return "fp16";
    case Compression::kBf16:
      return "bf16";
    case Compression::kTopK:
      break;
  }
  std::string ratio;
  for (int digits = 1; digits <= 17; ++digits) {
    ratio = absl::StrFormat("%.*g", digits, compression.topk_ratio);
    double back = 0.0;
    if (absl::SimpleAtod(ratio, &back) && back == compression.topk_ratio) break;
  }
  return absl::StrCat(kTopKPrefix, ratio);
}

int64_t TopKCount(double ratio, int64_t n) {
  if (n <= 0) return 0;
  const double exact = ratio * static_cast<double>(n);
  // 0.07 is stored as 0.07000000000000000666, so 0.07 * 100 is 7.000000000000001: round up only
  // what is above an integer by more than representation error.
  const double k = std::ceil(exact - 1e-9 * exact);
  return std::clamp(static_cast<int64_t>(k), int64_t{1}, n);
}

int64_t WireBytes(const Compression& compression, int64_t n) {
  switch (compression.kind) {
    case Compression::kNone:
      return 4 * n;
    case Compression::kFp16:
    case Compression::kBf16:
      return 2 * n;
    case Compression::kTopK:
      return 8 * TopKCount(compression.topk_ratio, n);
  }
  return 4 * n;
}

}  // namespace pstrain
