#include "data/ctr_files.h"

#include <system_error>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "data/line_reader.h"

namespace pstrain {
namespace data {
namespace {

// The table of ctr_files.h, without the ".gz" variants.
std::vector<absl::string_view> Extensions(DataFormat format) {
  switch (format) {
    case DataFormat::kCriteo:
      return {".tsv", ".txt"};
    case DataFormat::kLibsvm:
      return {".libsvm", ".svm", ".txt"};
  }
  return {};
}

}  // namespace

absl::StatusOr<DataFormat> ParseDataFormat(absl::string_view text) {
  if (text == "criteo") return DataFormat::kCriteo;
  if (text == "libsvm") return DataFormat::kLibsvm;
  return absl::InvalidArgumentError(
      absl::StrCat("data format '", absl::CHexEscape(text), "', expected criteo or libsvm"));
}

absl::string_view DataFormatName(DataFormat format) {
  switch (format) {
    case DataFormat::kCriteo:
      return "criteo";
    case DataFormat::kLibsvm:
      return "libsvm";
  }
  return "unknown";
}

absl::StatusOr<std::string> FindCtrFile(const std::string& dir, DataFormat format, absl::string_view split) {
  std::vector<std::string> tried;
  for (const absl::string_view extension : Extensions(format)) {
    for (const absl::string_view compression : {"", ".gz"}) {
      std::string path = absl::StrCat(dir, "/", split, extension, compression);
      std::error_code error;
      // A path that cannot even be looked at (no permission on DIR) counts as missing; opening it
      // would fail anyway, and the message lists it.
      if (std::filesystem::is_regular_file(path, error)) return path;
      tried.push_back(std::move(path));
    }
  }
  return absl::NotFoundError(
      absl::StrCat("no ", DataFormatName(format), " ", split, " file: expected one of ", absl::StrJoin(tried, ", ")));
}

absl::StatusOr<CtrFiles> FindCtrFiles(const std::string& dir, DataFormat format) {
  CtrFiles files;
  ASSIGN_OR_RETURN(files.train, FindCtrFile(dir, format, "train"));
  ASSIGN_OR_RETURN(files.test, FindCtrFile(dir, format, "test"));
  return files;
}

absl::StatusOr<int64_t> RecordCounter::Count(const std::string& path) {
  // The version is read before counting: a file that changes during the count is then remembered
  // under its old version, and the next call counts it again.
  Version version;
  std::error_code error;
  version.size = std::filesystem::file_size(path, error);
  if (!error) version.modified = std::filesystem::last_write_time(path, error);
  if (error) {
    // Let CountLines say why (it maps errno to a code the same way as every reader).
    return CountLines(path);
  }
  {
    absl::MutexLock lock(&mu_);
    const auto it = counted_.find(path);
    if (it != counted_.end() && it->second.version == version) return it->second.records;
  }
  ASSIGN_OR_RETURN(const int64_t records, CountLines(path));
  absl::MutexLock lock(&mu_);
  counted_[path] = Counted{version, records};
  return records;
}

}  // namespace data
}  // namespace pstrain
