#include "common/compression.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <iterator>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

// Random floats whose exponents are spread evenly over [2^lo, 2^hi), both signs, so that every
// binade (including fp16's subnormal range) gets tested, not just the values near 1.
std::vector<float> SpreadFloats(size_t n, int lo, int hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> exponent(lo, hi - 1);
  std::uniform_int_distribution<uint32_t> mantissa(0, (1u << 23) - 1);
  std::vector<float> out(n);
  for (float& x : out) {
    const uint32_t bits = (static_cast<uint32_t>(exponent(rng) + 127) << 23) | mantissa(rng);
    x = FromBits(bits | (rng() & 1u ? 0x80000000u : 0u));
  }
  return out;
}

std::vector<float> Gaussian(size_t n, float stddev, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> out(n);
  for (float& x : out) x = dist(rng);
  return out;
}

// ---------------------------------------------------------------------------------------------
// fp16

TEST(Fp16Test, EncodesKnownValues) {
  EXPECT_EQ(FloatToFp16(1.0f), 0x3c00);
  EXPECT_EQ(FloatToFp16(-2.5f), 0xc100);
  EXPECT_EQ(FloatToFp16(65504.0f), 0x7bff);
  EXPECT_EQ(FloatToFp16(1.0f / 3.0f), 0x3555);
  EXPECT_EQ(FloatToFp16(0.1f), 0x2e66);
  EXPECT_EQ(FloatToFp16(std::ldexp(1.0f, -14)), 0x0400);     // smallest normal
  EXPECT_EQ(FloatToFp16(std::ldexp(1023.0f, -24)), 0x03ff);  // largest subnormal
  EXPECT_EQ(FloatToFp16(std::ldexp(1.0f, -24)), 0x0001);     // smallest subnormal
  EXPECT_EQ(FloatToFp16(-std::ldexp(1.0f, -24)), 0x8001);
  EXPECT_EQ(FloatToFp16(0.0f), 0x0000);
  EXPECT_EQ(FloatToFp16(-0.0f), 0x8000);
}

TEST(Fp16Test, RoundsToNearestTiesToEven) {
  const float ulp = std::ldexp(1.0f, -10);                                   // fp16's unit in the last place at 1.0
  EXPECT_EQ(FloatToFp16(1.0f + ulp / 2), 0x3c00);                            // tie, 0x3c00 is even
  EXPECT_EQ(FloatToFp16(1.0f + 3 * ulp / 2), 0x3c02);                        // tie, 0x3c02 is even
  EXPECT_EQ(FloatToFp16(std::nextafter(1.0f + ulp / 2, 2.0f)), 0x3c01);      // just above the tie
  EXPECT_EQ(FloatToFp16(std::nextafter(1.0f + 3 * ulp / 2, 0.0f)), 0x3c01);  // just below
  // In the subnormal range the unit is 2^-24.
  EXPECT_EQ(FloatToFp16(std::ldexp(1.0f, -25)), 0x0000);  // tie between 0 and 1
  EXPECT_EQ(FloatToFp16(std::ldexp(3.0f, -25)), 0x0002);  // tie between 1 and 2
  EXPECT_EQ(FloatToFp16(std::ldexp(1.5f, -25)), 0x0001);
  // Rounding up out of the subnormals gives the smallest normal.
  EXPECT_EQ(FloatToFp16(std::ldexp(2047.0f, -25)), 0x0400);
  // Just below the overflow threshold rounds down to the largest finite value.
  EXPECT_EQ(FloatToFp16(std::nextafter(65520.0f, 0.0f)), 0x7bff);
}

TEST(Fp16Test, FlushesTinyValuesToSignedZero) {
  EXPECT_EQ(FloatToFp16(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(FloatToFp16(-std::numeric_limits<float>::min()), 0x8000);
  EXPECT_EQ(FloatToFp16(-1e-10f), 0x8000);
}

TEST(Fp16Test, InfStaysInfAndNanStaysNan) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(FloatToFp16(inf), 0x7c00);
  EXPECT_EQ(FloatToFp16(-inf), 0xfc00);
  EXPECT_EQ(FloatToFp16(65520.0f), 0x7c00);  // the scalar form rounds overflow to Inf
  EXPECT_EQ(FloatToFp16(std::numeric_limits<float>::quiet_NaN()), 0x7e00);
  EXPECT_EQ(FloatToFp16(FromBits(0xff800001u)), 0xfe00);  // signalling NaN, negative
  EXPECT_EQ(FloatToFp16(FromBits(0x7fffe000u)), 0x7fff);  // the top of the payload is kept
}

TEST(Fp16Test, DecodesKnownValues) {
  EXPECT_EQ(Fp16ToFloat(0x3c00), 1.0f);
  EXPECT_EQ(Fp16ToFloat(0xc100), -2.5f);
  EXPECT_EQ(Fp16ToFloat(0x7bff), 65504.0f);
  EXPECT_EQ(Fp16ToFloat(0x3555), 0.333251953125f);
  EXPECT_EQ(Fp16ToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(Fp16ToFloat(0x03ff), std::ldexp(1023.0f, -24));
  EXPECT_EQ(Fp16ToFloat(0x0400), std::ldexp(1.0f, -14));
  EXPECT_EQ(Bits(Fp16ToFloat(0x8000)), 0x80000000u);  // -0
  EXPECT_EQ(Fp16ToFloat(0x7c00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(Fp16ToFloat(0xfc00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(Fp16ToFloat(0x7e00)));
  EXPECT_TRUE(std::isnan(Fp16ToFloat(0x7c01)));
}

TEST(Fp16Test, EveryEncodingRoundTrips) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const bool nan = (h & 0x7c00) == 0x7c00 && (h & 0x03ff) != 0;
    const float f = Fp16ToFloat(static_cast<uint16_t>(h));
    if (nan) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << h;
    } else {
      ASSERT_EQ(FloatToFp16(f), h) << std::hex << h;
    }
  }
}

// The encoder against the definition: no other fp16 value is nearer, and of two equally near
// the even one wins.
TEST(Fp16Test, EncodesToTheNearestValueOnRandomData) {
  const std::vector<float> xs = SpreadFloats(1 << 20, -27, 16, 1);
  for (float x : xs) {
    const uint16_t h = FloatToFp16(x);
    const uint16_t sign = h & 0x8000;
    const uint16_t mag = h & 0x7fff;
    if (std::fabs(x) >= 65520.0f) {  // beyond the last tie: Inf
      ASSERT_EQ(mag, 0x7c00) << x;
      continue;
    }
    ASSERT_LE(mag, 0x7bff) << x;
    const double error = std::fabs(static_cast<double>(x) - Fp16ToFloat(h));
    for (int step : {-1, 1}) {
      const int neighbor = mag + step;
      if (neighbor < 0 || neighbor > 0x7bff) continue;
      const double nearby = Fp16ToFloat(static_cast<uint16_t>(sign | neighbor));
      const double other = std::fabs(static_cast<double>(x) - nearby);
      ASSERT_LE(error, other) << x;
      if (error == other) {
        ASSERT_EQ(mag & 1, 0) << "tie not to even for " << x;
      }
    }
  }
}

TEST(Fp16Test, RoundTripErrorIsAtMostHalfAnUlp) {
  std::vector<float> xs = SpreadFloats(1 << 16, -30, 16, 2);
  for (float& x : xs) x = std::copysign(std::min(std::fabs(x), 65504.0f), x);  // no overflow
  std::vector<uint16_t> encoded(xs.size());
  std::vector<float> decoded(xs.size());
  ASSERT_TRUE(EncodeFp16(xs, absl::MakeSpan(encoded)).ok());
  ASSERT_TRUE(DecodeFp16(encoded, absl::MakeSpan(decoded)).ok());
  for (size_t i = 0; i < xs.size(); ++i) {
    const double x = xs[i];
    const double error = std::fabs(x - decoded[i]);
    // Relative 2^-11 for normal results, absolute 2^-25 (half the subnormal spacing) below.
    const double bound = std::max(std::fabs(x) * std::ldexp(1.0, -11), std::ldexp(1.0, -25));
    ASSERT_LE(error, bound) << "x = " << x;
  }
}

TEST(Fp16Test, SpanEncoderMatchesScalar) {
  // An odd length, so the vector loop's remainder runs too; Inf and NaNs with various payloads pass
  // through (x86's F16C, where the CPU has it, must agree with the bit tricks on those too).
  std::vector<float> xs = SpreadFloats(100003, -30, 16, 3);
  for (float& x : xs) x = std::copysign(std::min(std::fabs(x), 65504.0f), x);  // no overflow
  const uint32_t specials[] = {0x7fc00000u, 0x7f800001u, 0xffbfffffu, 0x7fffe000u,
                               0x7f802000u, 0xff800000u, 0x7f800000u, 0xffc00001u};
  for (size_t i = 0; i < std::size(specials); ++i) xs[5 + 7 * i] = FromBits(specials[i]);
  std::vector<uint16_t> encoded(xs.size());
  ASSERT_TRUE(EncodeFp16(xs, absl::MakeSpan(encoded)).ok());
  std::vector<float> decoded(xs.size());
  ASSERT_TRUE(DecodeFp16(encoded, absl::MakeSpan(decoded)).ok());
  for (size_t i = 0; i < xs.size(); ++i) {
    ASSERT_EQ(encoded[i], FloatToFp16(xs[i])) << i;
    ASSERT_EQ(Bits(decoded[i]), Bits(Fp16ToFloat(encoded[i]))) << i;
  }
}

TEST(Fp16Test, EncoderRejectsFiniteOverflowNamingTheElement) {
  std::vector<float> xs(40, 0.5f);
  xs[17] = 1e6f;
  xs[30] = 2e6f;  // only the first is named
  std::vector<uint16_t> out(xs.size());
  const absl::Status s = EncodeFp16(xs, absl::MakeSpan(out));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "element 17 is 1e+06, beyond fp16's largest finite 65504");

  // The exact threshold: 65520 rounds to Inf, the float below it to 65504; negatives too.
  std::vector<float> edge = {std::nextafter(65520.0f, 0.0f), -65504.0f};
  ASSERT_TRUE(EncodeFp16(edge, absl::MakeSpan(out).subspan(0, 2)).ok());
  EXPECT_THAT(absl::MakeSpan(out).subspan(0, 2), ElementsAre(0x7bff, 0xfbff));
  edge = {1.0f, -65520.0f};
  EXPECT_EQ(EncodeFp16(edge, absl::MakeSpan(out).subspan(0, 2)).message(),
            "element 1 is -65520, beyond fp16's largest finite 65504");
}

TEST(Fp16Test, SizeMismatchIsAnErrorAndLeavesDestinationAlone) {
  std::vector<float> xs(4, 1.0f);
  std::vector<uint16_t> short_out(3, 0);
  EXPECT_THAT(EncodeFp16(xs, absl::MakeSpan(short_out)).message(), HasSubstr("got 4 values, expected 3"));
  std::vector<uint16_t> h(4, 0x3c00);
  std::vector<float> dst(5, 7.0f);
  EXPECT_EQ(DecodeFp16(h, absl::MakeSpan(dst)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(AccumulateFp16(h, 1.0f, absl::MakeSpan(dst)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(dst, ElementsAre(7.0f, 7.0f, 7.0f, 7.0f, 7.0f));
}

TEST(Fp16Test, AccumulateAddsWeightedDecodedValues) {
  const std::vector<uint16_t> h = {FloatToFp16(0.5f), FloatToFp16(-1.0f), FloatToFp16(2.0f), 0x0001};
  std::vector<float> dst = {1.0f, 2.0f, 3.0f, 0.0f};
  ASSERT_TRUE(AccumulateFp16(h, 0.5f, absl::MakeSpan(dst)).ok());
  EXPECT_THAT(dst, ElementsAre(1.25f, 1.5f, 4.0f, std::ldexp(1.0f, -25)));
}

// ---------------------------------------------------------------------------------------------
// bf16

TEST(Bf16Test, EncodesKnownValues) {
  EXPECT_EQ(FloatToBf16(1.0f), 0x3f80);
  EXPECT_EQ(FloatToBf16(-2.5f), 0xc020);
  EXPECT_EQ(FloatToBf16(1.0f / 3.0f), 0x3eab);            // 0x3eaaaaab rounds up
  EXPECT_EQ(FloatToBf16(0.1f), 0x3dcd);                   // 0x3dcccccd rounds up
  EXPECT_EQ(FloatToBf16(FromBits(0x7f7f0000u)), 0x7f7f);  // largest finite
  EXPECT_EQ(FloatToBf16(-0.0f), 0x8000);
  EXPECT_EQ(FloatToBf16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(FloatToBf16(-std::numeric_limits<float>::infinity()), 0xff80);
}

TEST(Bf16Test, RoundsToNearestTiesToEvenIncludingSubnormals) {
  EXPECT_EQ(FloatToBf16(FromBits(0x3f808000u)), 0x3f80);  // tie, even
  EXPECT_EQ(FloatToBf16(FromBits(0x3f818000u)), 0x3f82);  // tie, even
  EXPECT_EQ(FloatToBf16(FromBits(0x3f808001u)), 0x3f81);  // above the tie
  EXPECT_EQ(FloatToBf16(FromBits(0x3f807fffu)), 0x3f80);  // below the tie
  // fp32 subnormals become bf16 subnormals.
  EXPECT_EQ(FloatToBf16(FromBits(0x00000001u)), 0x0000);
  EXPECT_EQ(FloatToBf16(FromBits(0x00008000u)), 0x0000);  // tie, even
  EXPECT_EQ(FloatToBf16(FromBits(0x00018000u)), 0x0002);  // tie, even
  EXPECT_EQ(FloatToBf16(FromBits(0x80010000u)), 0x8001);
  EXPECT_EQ(FloatToBf16(FromBits(0x007fffffu)), 0x0080);  // up into the normals
}

TEST(Bf16Test, NanStaysNanEvenWhereRoundingWouldMakeInf) {
  // A NaN whose payload is all in the low 16 bits: rounding alone would carry it to 0x7f80, Inf.
  const uint16_t b = FloatToBf16(FromBits(0x7f800001u));
  EXPECT_EQ(b & 0x7f80, 0x7f80);
  EXPECT_NE(b & 0x007f, 0);
  EXPECT_TRUE(std::isnan(Bf16ToFloat(b)));
  EXPECT_EQ(FloatToBf16(FromBits(0xffc00000u)), 0xffc0);
}

TEST(Bf16Test, EveryEncodingRoundTrips) {
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    const float f = Bf16ToFloat(static_cast<uint16_t>(b));
    ASSERT_EQ(Bits(f), b << 16);
    const bool nan = (b & 0x7f80) == 0x7f80 && (b & 0x007f) != 0;
    if (nan) {
      ASSERT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(f)))) << std::hex << b;
    } else {
      ASSERT_EQ(FloatToBf16(f), b) << std::hex << b;
    }
  }
}

TEST(Bf16Test, RoundTripErrorIsAtMostHalfAnUlp) {
  const std::vector<float> xs = SpreadFloats(100001, -126, 127, 4);
  std::vector<uint16_t> encoded(xs.size());
  std::vector<float> decoded(xs.size());
  ASSERT_TRUE(EncodeBf16(xs, absl::MakeSpan(encoded)).ok());
  ASSERT_TRUE(DecodeBf16(encoded, absl::MakeSpan(decoded)).ok());
  for (size_t i = 0; i < xs.size(); ++i) {
    ASSERT_EQ(encoded[i], FloatToBf16(xs[i])) << i;
    const double x = xs[i];
    ASSERT_LE(std::fabs(x - decoded[i]), std::fabs(x) * std::ldexp(1.0, -8)) << "x = " << x;
    // And no other bf16 value is nearer.
    const uint16_t sign = encoded[i] & 0x8000;
    for (int step : {-1, 1}) {
      const int neighbor = (encoded[i] & 0x7fff) + step;
      if (neighbor < 0 || neighbor > 0x7f7f) continue;
      const double other = Bf16ToFloat(static_cast<uint16_t>(sign | neighbor));
      ASSERT_LE(std::fabs(x - decoded[i]), std::fabs(x - other)) << "x = " << x;
    }
  }
}

TEST(Bf16Test, EncoderRejectsFiniteOverflowNamingTheElement) {
  std::vector<float> xs = {1.0f, 2.0f, -3.0f, std::numeric_limits<float>::max(), 5.0f};
  std::vector<uint16_t> out(xs.size());
  const absl::Status s = EncodeBf16(xs, absl::MakeSpan(out));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "element 3 is 3.40282e+38, beyond bf16's largest finite 3.38953e+38");
  // The threshold: halfway above 0x7f7f (odd) rounds up; just below it does not.
  xs = {FromBits(0x7f7f7fffu), -FromBits(0x7f7f7fffu)};
  ASSERT_TRUE(EncodeBf16(xs, absl::MakeSpan(out).subspan(0, 2)).ok());
  EXPECT_THAT(absl::MakeSpan(out).subspan(0, 2), ElementsAre(0x7f7f, 0xff7f));
  xs = {-FromBits(0x7f7f8000u), 0.0f};
  EXPECT_THAT(EncodeBf16(xs, absl::MakeSpan(out).subspan(0, 2)).message(), HasSubstr("element 0 is -3.39618e+38"));
  // Inf and NaN are not overflow: they pass through for the server to reject.
  xs = {-std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()};
  ASSERT_TRUE(EncodeBf16(xs, absl::MakeSpan(out).subspan(0, 2)).ok());
  EXPECT_THAT(absl::MakeSpan(out).subspan(0, 2), ElementsAre(0xff80, 0x7fc0));
}

TEST(Bf16Test, AccumulateAddsWeightedDecodedValues) {
  const std::vector<uint16_t> b = {FloatToBf16(0.5f), FloatToBf16(-1.0f), FloatToBf16(2.0f)};
  std::vector<float> dst = {1.0f, 2.0f, 3.0f};
  ASSERT_TRUE(AccumulateBf16(b, -2.0f, absl::MakeSpan(dst)).ok());
  EXPECT_THAT(dst, ElementsAre(0.0f, 4.0f, -1.0f));
  std::vector<float> longer(4, 9.0f);
  EXPECT_EQ(AccumulateBf16(b, 1.0f, absl::MakeSpan(longer)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(longer, ElementsAre(9.0f, 9.0f, 9.0f, 9.0f));
}

TEST(HalfPrecisionTest, FindNonFiniteNamesTheFirstInfOrNan) {
  std::vector<uint16_t> fp16 = {0x3c00, 0x7bff, 0xfbff, 0x0001, 0x8000};  // all finite
  EXPECT_EQ(FindNonFiniteFp16(fp16), -1);
  fp16[3] = 0xfc00;  // -Inf
  fp16[4] = 0x7e00;  // NaN
  EXPECT_EQ(FindNonFiniteFp16(fp16), 3);
  EXPECT_EQ(FindNonFiniteFp16({}), -1);

  std::vector<uint16_t> bf16 = {0x3f80, 0x7f7f, 0xff7f, 0x0001};
  EXPECT_EQ(FindNonFiniteBf16(bf16), -1);
  bf16[2] = 0x7fc0;  // NaN
  EXPECT_EQ(FindNonFiniteBf16(bf16), 2);
  // The same codes read as the other format: 0x7f7f is an fp16 NaN.
  EXPECT_EQ(FindNonFiniteFp16(std::vector<uint16_t>{0x3f80, 0x7f7f}), 1);
}

// ---------------------------------------------------------------------------------------------
// Compression descriptions

TEST(CompressionTest, ParsesEveryKind) {
  EXPECT_EQ(ParseCompression("none")->kind, Compression::kNone);
  EXPECT_EQ(ParseCompression("fp16")->kind, Compression::kFp16);
  EXPECT_EQ(ParseCompression("bf16")->kind, Compression::kBf16);
  absl::StatusOr<Compression> topk = ParseCompression("topk:0.01");
  ASSERT_TRUE(topk.ok()) << topk.status();
  EXPECT_EQ(topk->kind, Compression::kTopK);
  EXPECT_EQ(topk->topk_ratio, 0.01);
  EXPECT_EQ(ParseCompression("topk:1")->topk_ratio, 1.0);
  EXPECT_EQ(ParseCompression("topk:1e-3")->topk_ratio, 0.001);
}

TEST(CompressionTest, RejectsBadNamesAndRatiosPrecisely) {
  EXPECT_EQ(ParseCompression("topk:2").status().message(), "--compression: got 'topk:2', expected a ratio in (0, 1]");
  for (const char* bad : {"topk:0", "topk:-0.5", "topk:nan", "topk:inf", "topk:", "topk:0.1x"}) {
    const absl::Status s = ParseCompression(bad).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(s.message(), HasSubstr("expected a ratio in (0, 1]")) << bad;
  }
  EXPECT_EQ(ParseCompression("gzip").status().message(),
            "--compression: got 'gzip', expected none, fp16, bf16 or topk:RATIO with RATIO in (0, 1]");
  for (const char* bad : {"", "FP16", "topk", " fp16", "fp16 "}) {
    EXPECT_EQ(ParseCompression(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(CompressionTest, NameIsTheInverseOfParse) {
  EXPECT_EQ(CompressionName(Compression{}), "none");
  EXPECT_EQ(CompressionName(*ParseCompression("fp16")), "fp16");
  EXPECT_EQ(CompressionName(*ParseCompression("bf16")), "bf16");
  EXPECT_EQ(CompressionName(*ParseCompression("topk:0.01")), "topk:0.01");
  EXPECT_EQ(CompressionName(*ParseCompression("topk:1")), "topk:1");
  const Compression third{Compression::kTopK, 1.0 / 3.0};
  const std::string name = CompressionName(third);
  EXPECT_EQ(name, "topk:0.3333333333333333");
  EXPECT_EQ(ParseCompression(name)->topk_ratio, third.topk_ratio);
}

TEST(CompressionTest, TopKCountRoundsUpAndKeepsAtLeastOne) {
  EXPECT_EQ(TopKCount(0.01, 1000), 10);
  EXPECT_EQ(TopKCount(0.01, 1001), 11);
  EXPECT_EQ(TopKCount(0.07, 100), 7);  // 0.07 * 100 == 7.000000000000001 in doubles
  EXPECT_EQ(TopKCount(0.001, 10), 1);
  EXPECT_EQ(TopKCount(1e-9, 1 << 20), 1);
  EXPECT_EQ(TopKCount(1.0, 5), 5);
  EXPECT_EQ(TopKCount(0.5, 0), 0);
  EXPECT_EQ(TopKCount(0.01, 1 << 20), 10486);
}

TEST(CompressionTest, WireBytesPerKind) {
  const int64_t n = 1 << 20;
  EXPECT_EQ(WireBytes(*ParseCompression("none"), n), 4 * n);
  EXPECT_EQ(WireBytes(*ParseCompression("fp16"), n), 2 * n);
  EXPECT_EQ(WireBytes(*ParseCompression("bf16"), n), 2 * n);
  EXPECT_EQ(WireBytes(*ParseCompression("topk:0.01"), n), 8 * 10486);
  EXPECT_EQ(WireBytes(*ParseCompression("topk:1"), 3), 24);
}

// ---------------------------------------------------------------------------------------------
// Top-k

std::unique_ptr<TopKCompressor> NewCompressor(int64_t n) {
  absl::StatusOr<std::unique_ptr<TopKCompressor>> c = TopKCompressor::Create(n);
  EXPECT_TRUE(c.ok()) << c.status();
  return std::move(c).value();
}

// The contract spelled out the slow way: sort everything by (magnitude desc, index asc), take k,
// sort by index.
std::vector<uint32_t> ReferenceTopK(const std::vector<float>& acc, int64_t k) {
  std::vector<uint32_t> order(acc.size());
  for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](uint32_t a, uint32_t b) { return std::fabs(acc[a]) > std::fabs(acc[b]); });
  order.resize(static_cast<size_t>(std::min<int64_t>(k, order.size())));
  std::sort(order.begin(), order.end());
  return order;
}

TEST(TopKTest, CreateRejectsSizesIndicesCannotAddress) {
  EXPECT_EQ(TopKCompressor::Create(-1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(TopKCompressor::Create((int64_t{1} << 32) + 1).status().message(), HasSubstr("uint32"));
  EXPECT_TRUE(TopKCompressor::Create(0).ok());
}

TEST(TopKTest, SelectsLargestMagnitudesSortedByIndex) {
  auto c = NewCompressor(6);
  const std::vector<float> grad = {0.1f, -5.0f, 0.3f, 4.0f, -0.2f, 6.0f};
  SparseGradient out;
  ASSERT_TRUE(c->Compress(grad, 3, &out).ok());
  EXPECT_THAT(out.indices, ElementsAre(1, 3, 5));
  EXPECT_THAT(out.values, ElementsAre(-5.0f, 4.0f, 6.0f));
  EXPECT_THAT(c->residual(), ElementsAre(0.1f, 0.0f, 0.3f, 0.0f, -0.2f, 0.0f));
}

TEST(TopKTest, EqualMagnitudesGoInIndexOrder) {
  auto c = NewCompressor(6);
  SparseGradient out;
  ASSERT_TRUE(c->Compress(std::vector<float>{1.0f, -1.0f, 0.5f, 1.0f, -1.0f, 1.0f}, 2, &out).ok());
  EXPECT_THAT(out.indices, ElementsAre(0, 1));
  EXPECT_THAT(out.values, ElementsAre(1.0f, -1.0f));
  // Next step, with a zero gradient, the remaining ties go in index order too.
  ASSERT_TRUE(c->Compress(std::vector<float>(6, 0.0f), 2, &out).ok());
  EXPECT_THAT(out.indices, ElementsAre(3, 4));
  ASSERT_TRUE(c->Compress(std::vector<float>(6, 0.0f), 3, &out).ok());
  EXPECT_THAT(out.indices, ElementsAre(0, 2, 5));  // 1.0 at 5, 0.5 at 2, then the lowest zero
}

TEST(TopKTest, AddsTheResidualBeforeSelecting) {
  auto c = NewCompressor(3);
  SparseGradient out;
  ASSERT_TRUE(c->Compress(std::vector<float>{1.0f, 0.625f, 0.5f}, 1, &out).ok());
  EXPECT_THAT(out.indices, ElementsAre(0));
  EXPECT_THAT(c->residual(), ElementsAre(0.0f, 0.625f, 0.5f));
  // The new gradient alone would pick index 2; with the residual, index 1 wins.
  ASSERT_TRUE(c->Compress(std::vector<float>{0.0f, 0.0f, 0.0625f}, 1, &out).ok());
  EXPECT_THAT(out.indices, ElementsAre(1));
  EXPECT_THAT(out.values, ElementsAre(0.625f));
  EXPECT_THAT(c->residual(), ElementsAre(0.0f, 0.0f, 0.5625f));
}

TEST(TopKTest, KAtLeastNSendsEverythingAndKeepsNothing) {
  for (int64_t k : {4, 5, 100}) {
    auto c = NewCompressor(4);
    SparseGradient out;
    ASSERT_TRUE(c->Compress(std::vector<float>{0.0f, -1.0f, 2.0f, 0.5f}, 1, &out).ok());
    ASSERT_TRUE(c->Compress(std::vector<float>{1.0f, 1.0f, 1.0f, 1.0f}, k, &out).ok());
    EXPECT_THAT(out.indices, ElementsAre(0, 1, 2, 3)) << k;
    EXPECT_THAT(out.values, ElementsAre(1.0f, 0.0f, 1.0f, 1.5f)) << k;
    EXPECT_THAT(c->residual(), ElementsAre(0.0f, 0.0f, 0.0f, 0.0f)) << k;
  }
}

TEST(TopKTest, RejectsBadArgumentsWithoutChangingTheResidual) {
  auto c = NewCompressor(3);
  SparseGradient out;
  ASSERT_TRUE(c->Compress(std::vector<float>{1.0f, 2.0f, 3.0f}, 1, &out).ok());
  EXPECT_EQ(c->Compress(std::vector<float>{1.0f, 2.0f}, 1, &out).message(), "top-k compress: got 2 floats, expected 3");
  EXPECT_EQ(c->Compress(std::vector<float>{1.0f, 2.0f, 3.0f}, 0, &out).message(),
            "top-k compress: k is 0, expected >= 1");
  EXPECT_THAT(c->residual(), ElementsAre(1.0f, 2.0f, 0.0f));
}

TEST(TopKTest, NonFiniteSumIsAnErrorAndDropsTheResidual) {
  auto c = NewCompressor(4);
  SparseGradient out;
  ASSERT_TRUE(c->Compress(std::vector<float>{1.0f, 2.0f, 3.0f, 4.0f}, 1, &out).ok());
  const absl::Status s =
      c->Compress(std::vector<float>{0.0f, 0.0f, std::numeric_limits<float>::quiet_NaN(), 0.0f}, 1, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("element 2 of gradient + residual is nan"));
  EXPECT_THAT(c->residual(), ElementsAre(0.0f, 0.0f, 0.0f, 0.0f));
  // A finite gradient whose sum with the residual overflows.
  const float big = std::numeric_limits<float>::max();
  ASSERT_TRUE(c->Compress(std::vector<float>{big, 0.0f, 1.0f, big}, 1, &out).ok());
  EXPECT_THAT(c->Compress(std::vector<float>{0.0f, 0.0f, 0.0f, big}, 1, &out).message(),
              HasSubstr("element 3 of gradient + residual is inf"));
}

TEST(TopKTest, ResetDropsTheResidual) {
  auto c = NewCompressor(3);
  SparseGradient out;
  ASSERT_TRUE(c->Compress(std::vector<float>{3.0f, 2.0f, 1.0f}, 1, &out).ok());
  c->Reset();
  EXPECT_THAT(c->residual(), ElementsAre(0.0f, 0.0f, 0.0f));
  ASSERT_TRUE(c->Compress(std::vector<float>{0.0f, 0.0f, 0.5f}, 1, &out).ok());
  EXPECT_THAT(out.indices, ElementsAre(2));  // without the reset, index 1 (2.0) would win
}

// Tensors past the sampling cutoff, over several steps so the residual matters, against the
// reference selection: Gaussian data, data with many equal magnitudes, and mostly-zero data.
TEST(TopKTest, LargeTensorsMatchTheReferenceSelection) {
  const int64_t n = 200003;
  std::vector<std::vector<float>> grads;
  grads.push_back(Gaussian(n, 1.0f, 10));
  std::vector<float> quantized = Gaussian(n, 4.0f, 11);
  for (float& x : quantized) x = std::round(x);  // a handful of magnitudes, all tied
  grads.push_back(quantized);
  std::vector<float> sparse(n, 0.0f);
  for (int64_t i = 0; i < n; i += 997) sparse[i] = static_cast<float>(i % 7) - 3.0f;
  grads.push_back(sparse);

  for (size_t g = 0; g < grads.size(); ++g) {
    for (int64_t k : {int64_t{1}, n / 100, n / 10, n - 1}) {
      auto c = NewCompressor(n);
      std::vector<float> acc(n, 0.0f);
      SparseGradient out;
      for (int step = 0; step < 3; ++step) {
        for (int64_t i = 0; i < n; ++i) acc[i] += grads[g][i];
        const std::vector<uint32_t> expected = ReferenceTopK(acc, k);
        ASSERT_TRUE(c->Compress(grads[g], k, &out).ok());
        ASSERT_EQ(out.indices, expected) << "data " << g << ", k " << k << ", step " << step;
        for (size_t j = 0; j < expected.size(); ++j) {
          ASSERT_EQ(out.values[j], acc[expected[j]]);
          acc[expected[j]] = 0.0f;
        }
        ASSERT_TRUE(std::equal(acc.begin(), acc.end(), c->residual().begin()));
      }
    }
  }
}

// Many steps of a mid-sized tensor at 10%, checking each step's selection against what stays
// behind: no entry kept has a larger magnitude than one sent. About one step in a thousand, the
// sampled threshold lets fewer than k entries through and Compress falls back to taking every
// entry as a candidate; with these seeds that happens a few times.
TEST(TopKTest, EveryStepSendsTheLargestMagnitudes) {
  const int64_t n = 20000;
  const int64_t k = n / 10;
  std::vector<std::vector<float>> grads;
  for (uint32_t seed = 0; seed < 16; ++seed) grads.push_back(Gaussian(n, 1.0f, 1000 + seed));
  auto c = NewCompressor(n);
  SparseGradient out;
  for (int step = 0; step < 4000; ++step) {
    ASSERT_TRUE(c->Compress(grads[step % grads.size()], k, &out).ok());
    ASSERT_EQ(static_cast<int64_t>(out.indices.size()), k);
    ASSERT_TRUE(CheckTopKIndices(out.indices, n).ok()) << "step " << step;
    float smallest_sent = std::numeric_limits<float>::infinity();
    for (float v : out.values) smallest_sent = std::min(smallest_sent, std::fabs(v));
    float largest_kept = 0.0f;
    for (float r : c->residual()) largest_kept = std::max(largest_kept, std::fabs(r));
    ASSERT_GE(smallest_sent, largest_kept) << "step " << step;
  }
}

TEST(TopKTest, ErrorFeedbackConservesTheSumOfGradients) {
  const int64_t n = 50000;
  const int steps = 60;
  auto c = NewCompressor(n);
  std::vector<double> sent(n, 0.0), pushed(n, 0.0);
  std::vector<float> decoded(n, 0.0f);
  SparseGradient out;
  for (int step = 0; step < steps; ++step) {
    const std::vector<float> grad = Gaussian(n, 1.0f, 100 + step);
    for (int64_t i = 0; i < n; ++i) pushed[i] += grad[i];
    ASSERT_TRUE(c->Compress(grad, TopKCount(0.01, n), &out).ok());
    ASSERT_EQ(out.indices.size(), 500u);
    std::fill(decoded.begin(), decoded.end(), 0.0f);
    ASSERT_TRUE(AccumulateTopK(out.indices, out.values, 1.0f, absl::MakeSpan(decoded)).ok());
    for (int64_t i = 0; i < n; ++i) sent[i] += decoded[i];
  }
  double worst = 0.0, residual_norm = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    worst = std::max(worst, std::fabs(sent[i] + c->residual()[i] - pushed[i]));
    residual_norm += std::fabs(c->residual()[i]);
  }
  // Each step rounds residual + gradient once, to a few units in the last place of values ~10.
  EXPECT_LT(worst, 1e-4);
  EXPECT_GT(residual_norm, 1.0);  // most of the mass is still waiting: the test has teeth
}

TEST(TopKTest, CheckIndicesAcceptsStrictlyAscendingInRange) {
  EXPECT_TRUE(CheckTopKIndices({}, 0).ok());
  EXPECT_TRUE(CheckTopKIndices(std::vector<uint32_t>{0, 1, 7, 9}, 10).ok());
  EXPECT_TRUE(CheckTopKIndices(std::vector<uint32_t>{0xffffffffu}, int64_t{1} << 32).ok());
}

TEST(TopKTest, CheckIndicesRejectsBadStreamsPrecisely) {
  EXPECT_EQ(CheckTopKIndices(std::vector<uint32_t>{0, 3, 5, 5, 9}, 10).message(),
            "top-k index 3 is 5, not above the previous index 5");
  EXPECT_EQ(CheckTopKIndices(std::vector<uint32_t>{4, 2}, 10).message(),
            "top-k index 1 is 2, not above the previous index 4");
  EXPECT_EQ(CheckTopKIndices(std::vector<uint32_t>{1, 2, 10}, 10).message(),
            "top-k index 2 is 10, beyond the tensor's 10 floats");
  EXPECT_EQ(CheckTopKIndices(std::vector<uint32_t>{0}, 0).message(),
            "top-k index 0 is 0, beyond the tensor's 0 floats");
  // The first problem is reported, wherever it is in a long stream.
  std::vector<uint32_t> long_stream(1000);
  for (uint32_t j = 0; j < long_stream.size(); ++j) long_stream[j] = 2 * j;
  long_stream[777] = long_stream[776];
  EXPECT_EQ(CheckTopKIndices(long_stream, 4000).message(),
            "top-k index 777 is 1552, not above the previous index 1552");
}

TEST(TopKTest, AccumulateScattersWithWeightOrLeavesDestinationAlone) {
  std::vector<float> dst = {1.0f, 1.0f, 1.0f, 1.0f};
  ASSERT_TRUE(
      AccumulateTopK(std::vector<uint32_t>{1, 3}, std::vector<float>{2.0f, -4.0f}, 0.5f, absl::MakeSpan(dst)).ok());
  EXPECT_THAT(dst, ElementsAre(1.0f, 2.0f, 1.0f, -1.0f));
  // A bad last index: nothing is added, not even the valid pairs before it.
  EXPECT_EQ(
      AccumulateTopK(std::vector<uint32_t>{0, 4}, std::vector<float>{1.0f, 1.0f}, 1.0f, absl::MakeSpan(dst)).code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(AccumulateTopK(std::vector<uint32_t>{0, 1}, std::vector<float>{1.0f}, 1.0f, absl::MakeSpan(dst)).message(),
            "top-k push: 2 indices but 1 values");
  EXPECT_THAT(dst, ElementsAre(1.0f, 2.0f, 1.0f, -1.0f));
}

}  // namespace
}  // namespace pstrain
