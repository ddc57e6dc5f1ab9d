#include "data/score_histogram.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace pstrain {
namespace data {
namespace {

constexpr double kBinWidth = 2 * ScoreHistogram::kMaxLogit / ScoreHistogram::kNumBins;

// Lower edges of bins 1 .. kNumBins - 1 (bin 0 has none): edges[b - 1] = sigmoid(-kMaxLogit + b w).
// Computed once and never changed: a constant table, not state.
const std::vector<double>& LowerEdges() {
  static const std::vector<double>* const edges = [] {
    auto* e = new std::vector<double>(ScoreHistogram::kNumBins - 1);
    for (int b = 1; b < ScoreHistogram::kNumBins; ++b) {
      const double logit = -ScoreHistogram::kMaxLogit + b * kBinWidth;
      (*e)[b - 1] = 1 / (1 + std::exp(-logit));
      // Neighbouring edges differ by about p (1 - p) w >= 2e-9, far above a double's spacing.
      if (b > 1) CHECK_LT((*e)[b - 2], (*e)[b - 1]) << "bin edges must increase, at bin " << b;
    }
    return e;
  }();
  return *edges;
}

}  // namespace

ScoreHistogram::ScoreHistogram() : positive_bins_(kNumBins, 0), negative_bins_(kNumBins, 0) {}

int ScoreHistogram::BinOf(double probability) {
  const std::vector<double>& edges = LowerEdges();
  // The number of lower edges at or below the probability.
  return static_cast<int>(std::upper_bound(edges.begin(), edges.end(), probability) - edges.begin());
}

double ScoreHistogram::LowerEdge(int bin) {
  CHECK(bin >= 0 && bin < kNumBins) << "bin " << bin;
  return bin == 0 ? 0 : LowerEdges()[bin - 1];
}

absl::Status ScoreHistogram::Add(double probability, bool positive) {
  if (std::isnan(probability)) {
    return absl::InvalidArgumentError("score histogram: predicted probability NaN, expected a number");
  }
  const int bin = BinOf(probability);
  if (positive) {
    ++positive_bins_[bin];
    ++positives_;
  } else {
    ++negative_bins_[bin];
    ++negatives_;
  }
  return absl::OkStatus();
}

void ScoreHistogram::Merge(const ScoreHistogram& other) {
  for (int b = 0; b < kNumBins; ++b) {
    positive_bins_[b] += other.positive_bins_[b];
    negative_bins_[b] += other.negative_bins_[b];
  }
  positives_ += other.positives_;
  negatives_ += other.negatives_;
}

absl::StatusOr<double> ScoreHistogram::Auc() const {
  if (positives_ == 0 || negatives_ == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("AUC: ", positives_, " positives and ", negatives_, " negatives, expected at least one of each"));
  }
  // Pairs won by the positive, ties counting 1/2, summed in double: every term is an integer or a
  // half-integer below 2^63, so the relative rounding error stays near 1e-16 per bin.
  double won = 0;
  double negatives_below = 0;
  for (int b = 0; b < kNumBins; ++b) {
    const double pos = static_cast<double>(positive_bins_[b]);
    const double neg = static_cast<double>(negative_bins_[b]);
    won += pos * (negatives_below + 0.5 * neg);
    negatives_below += neg;
  }
  return won / (static_cast<double>(positives_) * static_cast<double>(negatives_));
}

absl::StatusOr<double> ScoreHistogram::ErrorBound() const {
  if (positives_ == 0 || negatives_ == 0) {
    return absl::InvalidArgumentError(absl::StrCat("AUC error bound: ", positives_, " positives and ", negatives_,
                                                   " negatives, expected at least one of each"));
  }
  double tied_pairs = 0;
  for (int b = 0; b < kNumBins; ++b) {
    tied_pairs += static_cast<double>(positive_bins_[b]) * static_cast<double>(negative_bins_[b]);
  }
  return 0.5 * tied_pairs / (static_cast<double>(positives_) * static_cast<double>(negatives_));
}

void ScoreHistogram::ForEachNonEmpty(
    absl::FunctionRef<void(uint32_t bin, int64_t positives, int64_t negatives)> fn) const {
  for (int b = 0; b < kNumBins; ++b) {
    if (positive_bins_[b] != 0 || negative_bins_[b] != 0) {
      fn(static_cast<uint32_t>(b), positive_bins_[b], negative_bins_[b]);
    }
  }
}

absl::StatusOr<int64_t> ScoreHistogram::CheckBins(absl::Span<const uint32_t> bins, absl::Span<const uint64_t> positives,
                                                  absl::Span<const uint64_t> negatives) {
  if (positives.size() != bins.size() || negatives.size() != bins.size()) {
    return absl::InvalidArgumentError(absl::StrCat("score histogram: ", bins.size(), " bins, ", positives.size(),
                                                   " positive counts and ", negatives.size(),
                                                   " negative counts, expected as many of each"));
  }
  constexpr uint64_t kMax = std::numeric_limits<int64_t>::max();
  uint64_t total = 0;
  for (size_t i = 0; i < bins.size(); ++i) {
    if (bins[i] >= static_cast<uint32_t>(kNumBins)) {
      return absl::InvalidArgumentError(
          absl::StrCat("score histogram: entry ", i, " is bin ", bins[i], ", expected a bin below ", kNumBins));
    }
    // Checked one count at a time so that the running total itself never wraps.
    for (uint64_t n : {positives[i], negatives[i]}) {
      if (n > kMax - total) {
        return absl::InvalidArgumentError(absl::StrCat("score histogram: entry ", i, " (bin ", bins[i],
                                                       ") takes the count past ", kMax,
                                                       ", expected a total that fits an int64"));
      }
      total += n;
    }
  }
  return static_cast<int64_t>(total);
}

absl::Status ScoreHistogram::AddBins(absl::Span<const uint32_t> bins, absl::Span<const uint64_t> positives,
                                     absl::Span<const uint64_t> negatives) {
  if (absl::StatusOr<int64_t> checked = CheckBins(bins, positives, negatives); !checked.ok()) {
    return checked.status();
  }
  for (size_t i = 0; i < bins.size(); ++i) {
    positive_bins_[bins[i]] += static_cast<int64_t>(positives[i]);
    negative_bins_[bins[i]] += static_cast<int64_t>(negatives[i]);
    positives_ += static_cast<int64_t>(positives[i]);
    negatives_ += static_cast<int64_t>(negatives[i]);
  }
  return absl::OkStatus();
}

double LogLoss(float p, bool click) {
  const double q = std::clamp(static_cast<double>(p), 1e-12, 1.0 - 1e-12);
  return click ? -std::log(q) : -std::log1p(-q);
}

absl::Status ScorePredictions(absl::Span<const float> probabilities, absl::Span<const float> labels,
                              ScoreHistogram* scores, PredictionTotals* totals) {
  if (probabilities.size() != labels.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("scoring predictions: ", probabilities.size(), " probabilities for ", labels.size(), " labels"));
  }
  for (size_t i = 0; i < probabilities.size(); ++i) {
    const bool click = labels[i] > 0.5f;
    if (absl::Status s = scores->Add(probabilities[i], click); !s.ok()) return s;
    totals->log_loss_sum += LogLoss(probabilities[i], click);
    totals->correct += (probabilities[i] > 0.5f) == click ? 1 : 0;
  }
  return absl::OkStatus();
}

}  // namespace data
}  // namespace pstrain
