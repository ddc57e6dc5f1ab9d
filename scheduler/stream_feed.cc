#include "scheduler/stream_feed.h"

#include <utility>
#include <vector>

#include <glog/logging.h>

namespace pstrain {
namespace scheduler {
namespace {

std::vector<data::StreamFile> FilesOf(const StreamState& saved) {
  std::vector<data::StreamFile> files;
  files.reserve(saved.files_size());
  for (const StreamFileState& f : saved.files()) {
    files.push_back(data::StreamFile{f.name(), f.first(), f.records(), f.size(), f.modified_ns()});
  }
  return files;
}

}  // namespace

int64_t StreamTrainableSteps(int64_t records, int64_t global_batch, bool ended) {
  CHECK_GE(records, 0);
  CHECK_GE(global_batch, 1);
  return records / global_batch + (ended && records % global_batch != 0 ? 1 : 0);
}

StreamFeed::StreamFeed(std::string dir, int64_t global_batch, const StreamState& saved)
    : global_batch_(global_batch), catalog_(std::move(dir), FilesOf(saved), saved.ended()) {
  CHECK_GE(global_batch_, 1);
}

void StreamFeed::Install(data::StreamCatalog refreshed) {
  CHECK_GE(refreshed.records(), catalog_.records());
  CHECK_GE(refreshed.files().size(), catalog_.files().size());
  catalog_ = std::move(refreshed);
}

StreamView StreamFeed::View() const {
  StreamView view;
  for (const data::StreamFile& f : catalog_.files()) {
    StreamFileView* out = view.add_files();
    out->set_name(f.name);
    out->set_first(f.first);
    out->set_records(f.records);
  }
  view.set_ended(catalog_.ended());
  return view;
}

StreamState StreamFeed::Save() const { return CatalogState(catalog_); }

StreamState CatalogState(const data::StreamCatalog& catalog) {
  StreamState state;
  for (const data::StreamFile& f : catalog.files()) {
    StreamFileState* out = state.add_files();
    out->set_name(f.name);
    out->set_first(f.first);
    out->set_records(f.records);
    out->set_size(f.size);
    out->set_modified_ns(f.modified_ns);
  }
  state.set_ended(catalog.ended());
  return state;
}

}  // namespace scheduler
}  // namespace pstrain
