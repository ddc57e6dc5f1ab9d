#include "data/ctr_stream_writer.h"

#include <sys/stat.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/file_io.h"
#include "common/status_macros.h"
#include "data/auc.h"
#include "data/ctr_generator.h"

namespace pstrain {
namespace data {
namespace {

bool Exists(const std::string& path) {
  std::error_code ec;
  return std::filesystem::exists(path, ec);
}

}  // namespace

std::string CtrStreamFileName(int hour, bool gzip) {
  return absl::StrFormat("part-%05d%s", hour, gzip ? ".tsv.gz" : ".tsv");
}

absl::Status WriteCtrStream(const std::string& dir, const CtrStreamOptions& options,
                            const std::function<void(const CtrStreamHour&)>& on_hour) {
  ASSIGN_OR_RETURN(const PlantedCtrModel model, PlantedCtrModel::Create(options.model));
  if (options.records_per_hour < 2) {
    return absl::InvalidArgumentError(absl::StrCat("records_per_hour ", options.records_per_hour,
                                                   ", expected >= 2 (an hour's AUC needs both labels)"));
  }
  if (!(options.records_per_second >= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("records_per_second ", options.records_per_second, ", expected >= 0"));
  }
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return ErrnoStatus(errno, absl::StrCat(dir, ": cannot create the stream folder"));
  }
  if (Exists(dir + "/" + kStreamEndMarker)) {
    return absl::FailedPreconditionError(absl::StrCat(dir, ": the stream has ended (", kStreamEndMarker, " is there)"));
  }
  const int hours = options.model.days;
  int first = 0;
  while (first < hours && Exists(dir + "/" + CtrStreamFileName(first, options.gzip) + kStreamReadyMarker)) ++first;
  if (first > 0 && !options.resume) {
    return absl::FailedPreconditionError(
        absl::StrCat(dir, ": holds ", first, " hours of a stream already; resume it, or use another folder"));
  }
  const auto start = std::chrono::steady_clock::now();
  int64_t written = 0;  // records of this call's hours
  for (int hour = first; hour < hours; ++hour) {
    CtrStreamHour out;
    out.hour = hour;
    out.path = dir + "/" + CtrStreamFileName(hour, options.gzip);
    out.records = options.records_per_hour;
    std::vector<double> scores;
    std::vector<uint8_t> labels;
    scores.reserve(static_cast<size_t>(out.records));
    labels.reserve(static_cast<size_t>(out.records));
    // Each hour its own stream of draws, so a restarted writer writes the same hours.
    const uint64_t seed = Mix64(options.model.seed) ^ (uint64_t{0x5157} << 32) ^ static_cast<uint64_t>(hour);
    RETURN_IF_ERROR(WriteCtrSamples(
        out.path, model, SplitMix64(seed), out.records, options.gzip, [hour](int64_t) { return hour; },
        [&](int label, double p) {
          scores.push_back(p);
          labels.push_back(static_cast<uint8_t>(label));
          out.positives += label;
        }));
    absl::StatusOr<double> auc = ExactAuc(scores, labels);
    out.planted_auc = auc.ok() ? *auc : 0.0;
    // At the chosen rate: an hour is marked ready no earlier than its last record is due.
    written += out.records;
    if (options.records_per_second > 0) {
      const auto due = start + std::chrono::duration<double>(static_cast<double>(written) / options.records_per_second);
      std::this_thread::sleep_until(due);
    }
    RETURN_IF_ERROR(WriteFileAtomically(out.path + kStreamReadyMarker, "stream ready marker", std::string()));
    on_hour(out);
  }
  return WriteFileAtomically(dir + "/" + kStreamEndMarker, "stream end marker", std::string());
}

}  // namespace data
}  // namespace pstrain
