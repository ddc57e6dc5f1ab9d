#include "worker/stream_reader.h"

#include <utility>

namespace pstrain::worker {

StreamReader::StreamReader(std::string dir, data::CtrSource::Options options)
    : dir_(std::move(dir)), source_(options) {}

absl::Status StreamReader::Read(const StreamView& stream, int64_t first, int64_t count, data::CtrBatch* out) {
  if (!catalog_.has_value() || catalog_->files().size() != static_cast<size_t>(stream.files_size()) ||
      catalog_->ended() != stream.ended()) {
    std::vector<data::StreamFile> files;
    files.reserve(stream.files_size());
    for (const StreamFileView& f : stream.files()) files.push_back(data::StreamFile{f.name(), f.first(), f.records()});
    catalog_.emplace(dir_, std::move(files), stream.ended());
  }
  return source_.ReadBatch(*catalog_, first, count, out);
}

std::vector<std::pair<int64_t, int64_t>> StreamReader::last_files() const {
  std::vector<std::pair<int64_t, int64_t>> files;
  for (const data::StreamSource::FileSamples& f : source_.last_files()) {
    if (f.samples > 0) files.emplace_back(static_cast<int64_t>(f.file), f.samples);
  }
  return files;
}

}  // namespace pstrain::worker
