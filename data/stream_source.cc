#include "data/stream_source.h"

#include <filesystem>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace pstrain {
namespace data {

StreamSource::StreamSource(CtrSource::Options options) : options_(options) {}

absl::Status StreamSource::ReadBatch(const StreamCatalog& catalog, int64_t first, int64_t count, CtrBatch* out) {
  ClearCtrBatch(options_.format, out);
  const int64_t records = catalog.records();
  // Written so that first + count cannot overflow.
  if (first < 0 || count < 0 || first > records || count > records - first) {
    return absl::InvalidArgumentError(absl::StrCat("stream positions [", first, ", +", count, ") of ", catalog.dir(),
                                                   ": expected first >= 0, count >= 0 and first + count <= ", records,
                                                   " (the records catalogued)"));
  }
  const std::vector<StreamPiece> pieces = catalog.Locate(first, first + count);
  last_files_.clear();
  absl::Status status;
  for (size_t i = 0; i < pieces.size() && status.ok(); ++i) {
    // The first piece (often the only one) is read straight into the caller's batch.
    status = ReadPiece(catalog, pieces[i], first, count, i == 0 ? out : &piece_);
    if (!status.ok()) break;
    if (i > 0) AppendCtrBatch(piece_, out);
    last_files_.push_back(FileSamples{pieces[i].file, i == 0 ? out->size : piece_.size});
  }
  if (!status.ok()) {
    Close();
    ClearCtrBatch(options_.format, out);
    last_files_.clear();
  }
  return status;
}

absl::Status StreamSource::ReadPiece(const StreamCatalog& catalog, const StreamPiece& piece, int64_t first,
                                     int64_t count, CtrBatch* out) {
  const StreamFile& file = catalog.files()[piece.file];
  const std::string path = (std::filesystem::path(catalog.dir()) / file.name).string();
  if (source_ == nullptr || source_->path() != path) {
    Close();
    ++opened_;
    ASSIGN_OR_RETURN(source_, CtrSource::Open(path, options_));
  }
  RETURN_IF_ERROR(source_->ReadBatch(piece.begin, piece.end - piece.begin, out));
  // The reader stops at the piece's end, or at the file's end if that comes first. The batch's
  // size cannot tell (lines without a sample belong to the range too); the position can.
  if (source_->position() < piece.end) {
    return absl::DataLossError(absl::StrCat(path, ": ends after ", source_->position(),
                                            " lines, but the stream's catalog counted ", file.records,
                                            " records in it (reading its lines [", piece.begin, ", ", piece.end,
                                            ") for stream positions [", first, ", ", first + count, "))"));
  }
  return absl::OkStatus();
}

void StreamSource::Close() {
  if (source_ == nullptr) return;
  closed_skipped_ += source_->skipped();
  closed_reopens_ += source_->reopens();
  source_.reset();
}

int64_t StreamSource::skipped() const { return closed_skipped_ + (source_ == nullptr ? 0 : source_->skipped()); }

int64_t StreamSource::opens() const {
  return opened_ + closed_reopens_ + (source_ == nullptr ? 0 : source_->reopens());
}

}  // namespace data
}  // namespace pstrain
