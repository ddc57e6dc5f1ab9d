// pstrain-gen-ctr: writes a synthetic Criteo-format CTR data set from a planted model
// (data/planted_ctr_model.h, data/ctr_generator.h).
//
//   pstrain-gen-ctr --out_dir=DIR [--train_samples=N] [--test_samples=N] [--unique_keys=N]
//                   [--zipf=S] [--missing_rate=P] [--seed=N] [--gzip]
//                   [--days=D --new_key_rate=F]
//   pstrain-gen-ctr --stream_dir=DIR [--hours=H] [--records_per_hour=N] [--rate=RECORDS/S]
//                   [--new_key_rate=F] [--resume_stream] [--unique_keys=N] ...
//
// Writes DIR/train.tsv and DIR/test.tsv (.tsv.gz with --gzip): 26 categorical fields, as the
// format fixes. With --days and --new_key_rate the keys drift: train.tsv holds D days in order,
// each drawing a fraction F of its values from ids of its own, never seen before and never seen
// again (data/planted_ctr_model.h); test.tsv is drawn from the last day. Prints a summary, then as its LAST stdout line
// the planted model's exact AUC on the test set written, the best a trained model can expect:
//   {"planted_test_auc": 0.7912345678}
// With --stream_dir it writes a stream instead (data/ctr_stream_writer.h): one file per hour, the
// keys drifting hour by hour as they do day by day above, each marked ready (NAME.ready) once
// whole, at most --rate records a second, then _END; after each hour one stdout line
//   {"hour": 3, "file": "DIR/part-00003.tsv", "records": 100000, "planted_auc": 0.79}
// Exit status: 0 written; 1 the files could not be written; 2 bad flags.
#include <chrono>
#include <cstdio>
#include <iostream>

#include <gflags/gflags.h>
#include <glog/logging.h>

#include "common/binary_init.h"
#include "data/ctr_generator.h"
#include "data/ctr_stream_writer.h"

DEFINE_string(out_dir, "", "Folder for train.tsv and test.tsv (required; created if missing)");
DEFINE_int64(train_samples, 2000000, "Training samples");
DEFINE_int64(test_samples, 200000, "Test samples (>= 2)");
DEFINE_uint64(unique_keys, 1000000, "Distinct categorical values over all 26 fields (spread evenly over the fields)");
DEFINE_double(zipf, 1.1, "Zipf exponent of each field's value frequencies (> 0)");
DEFINE_double(missing_rate, 0.05, "Probability that a feature is empty, in [0, 1)");
DEFINE_uint64(seed, 1, "Seed of the planted model and of the samples");
DEFINE_bool(gzip, false, "Write train.tsv.gz and test.tsv.gz (gzip level 1)");
DEFINE_int32(days, 1,
             "Days the training samples are split into, in order (>= 1); the test set is the last "
             "day's. With --new_key_rate > 0 each day brings ids of its own");
DEFINE_double(new_key_rate, 0,
              "Drifting keys: the probability, in [0, 1], that a categorical value is drawn from "
              "its day's own ids (never seen on another day) instead of the field's lasting ones");

DEFINE_string(stream_dir, "", "Write a stream into this folder instead of --out_dir's two files");
DEFINE_int32(hours, 24, "Stream: files to write, one per hour of drifting keys (>= 1)");
DEFINE_int64(records_per_hour, 100000, "Stream: records a file (>= 2)");
DEFINE_double(rate, 0, "Stream: at most this many records a second marked ready (0: as fast as it writes)");
DEFINE_bool(resume_stream, false, "Stream: go on after the hours already in --stream_dir");

namespace {

// The planted model of the flags, with `days` days (a stream's hours), checked: false (printed)
// for a bad flag.
bool PlantedOptions(int days, pstrain::data::PlantedCtrOptions* out) {
  out->unique_keys = FLAGS_unique_keys;
  out->zipf = FLAGS_zipf;
  out->missing_rate = FLAGS_missing_rate;
  out->seed = FLAGS_seed;
  out->days = days;
  out->new_key_rate = FLAGS_new_key_rate;
  if (const auto model = pstrain::data::PlantedCtrModel::Create(*out); !model.ok()) {
    std::cerr << "pstrain-gen-ctr: --" << model.status().message() << "\n";
    return false;
  }
  return true;
}

int WriteStream() {
  pstrain::data::CtrStreamOptions options;
  if (!PlantedOptions(FLAGS_hours, &options.model)) return 2;
  options.records_per_hour = FLAGS_records_per_hour;
  options.records_per_second = FLAGS_rate;
  options.gzip = FLAGS_gzip;
  options.resume = FLAGS_resume_stream;
  if (FLAGS_records_per_hour < 2 || !(FLAGS_rate >= 0)) {
    std::cerr << "pstrain-gen-ctr: --records_per_hour >= 2 and --rate >= 0 expected, got " << FLAGS_records_per_hour
              << " and " << FLAGS_rate << "\n";
    return 2;
  }
  const absl::Status status =
      pstrain::data::WriteCtrStream(FLAGS_stream_dir, options, [](const pstrain::data::CtrStreamHour& h) {
        std::printf(
            "{\"hour\": %d, \"file\": \"%s\", \"records\": %lld, \"positives\": %lld, \"planted_auc\": %.10g}\n",
            h.hour, h.path.c_str(), static_cast<long long>(h.records), static_cast<long long>(h.positives),
            h.planted_auc);
        std::fflush(stdout);
      });
  if (!status.ok()) {
    LOG(ERROR) << "pstrain-gen-ctr failed: " << status;
    return absl::IsInvalidArgument(status) ? 2 : 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  pstrain::InitBinary("pstrain-gen-ctr --out_dir=DIR [--train_samples=N] [--gzip] ...", &argc, &argv);
  if (!FLAGS_stream_dir.empty()) {
    if (!FLAGS_out_dir.empty()) {
      std::cerr << "pstrain-gen-ctr: give --out_dir (two files) or --stream_dir (a stream), not both\n";
      return 2;
    }
    return WriteStream();
  }
  if (FLAGS_out_dir.empty()) {
    std::cerr << "pstrain-gen-ctr: --out_dir=DIR (or --stream_dir=DIR) is required\n";
    return 2;
  }
  pstrain::data::CtrGeneratorOptions options;
  // Check the options before touching the disk, so a bad flag exits 2.
  if (!PlantedOptions(FLAGS_days, &options.model)) return 2;
  options.train_samples = FLAGS_train_samples;
  options.test_samples = FLAGS_test_samples;
  options.gzip = FLAGS_gzip;
  if (FLAGS_train_samples < 0 || FLAGS_test_samples < 2) {
    std::cerr << "pstrain-gen-ctr: --train_samples >= 0 and --test_samples >= 2 expected, got " << FLAGS_train_samples
              << " and " << FLAGS_test_samples << "\n";
    return 2;
  }

  const auto start = std::chrono::steady_clock::now();
  const absl::StatusOr<pstrain::data::CtrGeneratorResult> result =
      pstrain::data::GenerateCtrData(FLAGS_out_dir, options);
  if (!result.ok()) {
    LOG(ERROR) << "pstrain-gen-ctr failed: " << result.status();
    return 1;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf(
      "wrote %s (%lld samples, %.2f%% positive) and %s (%lld samples, %.2f%% positive) "
      "in %.1f s\n",
      result->train_path.c_str(), static_cast<long long>(FLAGS_train_samples),
      FLAGS_train_samples > 0 ? 100.0 * result->train_positives / FLAGS_train_samples : 0.0, result->test_path.c_str(),
      static_cast<long long>(FLAGS_test_samples), 100.0 * result->test_positives / FLAGS_test_samples, seconds);
  std::printf("{\"planted_test_auc\": %.10g}\n", result->planted_test_auc);
  return 0;
}
