#include "data/stream_catalog.h"

#include <algorithm>
#include <filesystem>
#include <system_error>
#include <utility>

#include <glog/logging.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "data/ctr_files.h"

namespace pstrain {
namespace data {
namespace {

namespace fs = std::filesystem;

struct Seen {
  int64_t size = 0;
  int64_t modified_ns = 0;
};

// The size and modification time of `path`; NOT_FOUND when it is gone.
absl::StatusOr<Seen> Look(const fs::path& path) {
  std::error_code ec;
  const uintmax_t size = fs::file_size(path, ec);
  if (ec) return absl::NotFoundError(absl::StrCat("'", path.string(), "': ", ec.message()));
  const fs::file_time_type modified = fs::last_write_time(path, ec);
  if (ec) return absl::NotFoundError(absl::StrCat("'", path.string(), "': ", ec.message()));
  return Seen{
      static_cast<int64_t>(size),
      static_cast<int64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(modified.time_since_epoch()).count())};
}

}  // namespace

StreamCatalog::StreamCatalog(std::string dir, std::vector<StreamFile> files, bool ended)
    : dir_(std::move(dir)), files_(std::move(files)), ended_(ended) {}

absl::StatusOr<int> StreamCatalog::Refresh(int64_t trained) {
  std::error_code ec;
  if (!fs::is_directory(dir_, ec)) {
    return absl::NotFoundError(absl::StrCat("data stream '", dir_, "': no such folder"));
  }
  // The files taken still hold what was counted, while any of their records is to be trained.
  for (const StreamFile& f : files_) {
    if (f.first + f.records <= trained) continue;
    absl::StatusOr<Seen> now = Look(fs::path(dir_) / f.name);
    if (!now.ok()) {
      return absl::DataLossError(absl::StrCat("data stream '", dir_, "': file '", f.name, "' (records ", f.first,
                                              " to ", f.first + f.records, ") disappeared before they were trained"));
    }
    if (now->size != f.size || now->modified_ns != f.modified_ns) {
      return absl::DataLossError(absl::StrCat("data stream '", dir_, "': file '", f.name,
                                              "' changed after it was ready (", f.size, " bytes when counted, ",
                                              now->size, " now): a ready file must not be written again"));
    }
  }
  // The ready markers, and the end.
  std::vector<std::string> ready;
  bool end = false;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir_, ec)) {
    const std::string name = entry.path().filename().string();
    if (name == kStreamEndMarker) {
      end = true;
    } else if (absl::EndsWith(name, kStreamReadyMarker) && name.size() > sizeof(kStreamReadyMarker) - 1) {
      ready.push_back(name.substr(0, name.size() - (sizeof(kStreamReadyMarker) - 1)));
    }
  }
  if (ec) return absl::NotFoundError(absl::StrCat("data stream '", dir_, "': listing it: ", ec.message()));
  std::sort(ready.begin(), ready.end());
  const std::string last = files_.empty() ? std::string() : files_.back().name;
  std::vector<StreamFile> added;
  int64_t first = records();
  RecordCounter counter;
  for (const std::string& name : ready) {
    if (!last.empty() && name <= last) {
      const bool taken = std::any_of(files_.begin(), files_.end(), [&](const StreamFile& f) { return f.name == name; });
      if (taken) continue;
      return absl::FailedPreconditionError(absl::StrCat(
          "data stream '", dir_, "': file '", name, "' was made ready after '", last,
          "', but sorts before it; names must grow (the positions of records already taken would change)"));
    }
    const fs::path path = fs::path(dir_) / name;
    absl::StatusOr<Seen> seen = Look(path);
    if (!seen.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("data stream '", dir_, "': '", name, kStreamReadyMarker, "' marks a file that is not there"));
    }
    ASSIGN_OR_RETURN(const int64_t records, counter.Count(path.string()));
    added.push_back(StreamFile{name, first, records, seen->size, seen->modified_ns});
    first += records;
  }
  if (ended_ && !added.empty()) {
    return absl::FailedPreconditionError(absl::StrCat("data stream '", dir_, "': file '", added.front().name,
                                                      "' was made ready after the stream ended (", kStreamEndMarker,
                                                      ")"));
  }
  for (StreamFile& f : added) {
    LOG(INFO) << "data stream: '" << f.name << "' is ready: records " << f.first << " to " << f.first + f.records;
    files_.push_back(std::move(f));
  }
  if (end && !ended_)
    LOG(INFO) << "data stream: ended after " << records() << " records in " << files_.size() << " files";
  ended_ = ended_ || end;
  return static_cast<int>(added.size());
}

std::vector<StreamPiece> StreamCatalog::Locate(int64_t begin, int64_t end) const {
  std::vector<StreamPiece> pieces;
  auto it =
      std::upper_bound(files_.begin(), files_.end(), begin, [](int64_t p, const StreamFile& f) { return p < f.first; });
  size_t i = it == files_.begin() ? 0 : static_cast<size_t>(it - files_.begin()) - 1;
  for (int64_t at = begin; at < end && i < files_.size(); ++i) {
    const StreamFile& f = files_[i];
    const int64_t stop = std::min(end, f.first + f.records);
    if (stop > at) pieces.push_back(StreamPiece{i, at - f.first, stop - f.first});
    at = std::max(at, stop);
  }
  return pieces;
}

}  // namespace data
}  // namespace pstrain
