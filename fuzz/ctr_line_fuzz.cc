// The CTR text formats (data/criteo_reader.h, data/libsvm_reader.h): one record parsed by each
// line parser, and the whole input read as a file by both readers, which skip bad lines, so the
// line splitting (data/line_reader.h) and the bad-record policy run too.
#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/strings/string_view.h"
#include "data/criteo_reader.h"
#include "data/libsvm_reader.h"
#include "fuzz/fuzz_util.h"

namespace data = pstrain::data;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* bytes, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(bytes), size);
  const absl::string_view line = text.substr(0, text.find('\n'));
  data::CtrSample ctr;
  (void)data::ParseCriteoLine(line, /*has_label=*/true, &ctr);
  (void)data::ParseCriteoLine(line, /*has_label=*/false, &ctr);
  data::LibsvmSample svm;
  (void)data::ParseLibsvmLine(line, &svm);

  const std::string path = pstrain::fuzz::WriteScratch("records.txt", text);
  data::CriteoReader::Options criteo_options;
  criteo_options.bad_records = data::BadRecords::kSkip;
  if (auto reader = data::CriteoReader::Open(path, criteo_options); reader.ok()) {
    while (true) {
      absl::StatusOr<bool> more = (*reader)->Next(&ctr);
      if (!more.ok() || !*more) break;
    }
  }
  data::LibsvmReader::Options svm_options;
  svm_options.bad_records = data::BadRecords::kSkip;
  if (auto reader = data::LibsvmReader::Open(path, svm_options); reader.ok()) {
    while (true) {
      absl::StatusOr<bool> more = (*reader)->Next(&svm);
      if (!more.ok() || !*more) break;
    }
  }
  return 0;
}
