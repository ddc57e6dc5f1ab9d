// The server checkpoint file (server/checkpoint.h): read and verified, then restored into a store
// of a small job, which must refuse a checkpoint that does not fit it (another layout, wrong
// sizes, a table that does not parse) with an error and change nothing.
//
// Input: byte 0 bit 0 set: fix up the trailing CRC (fuzz_util.h MaybeFixCrc); the rest is the file.
#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "fuzz/fuzz_util.h"
#include "fuzz/small_store.h"
#include "server/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string bytes =
      pstrain::fuzz::MaybeFixCrc(absl::string_view(reinterpret_cast<const char*>(data + 1), size - 1), data[0] & 1);
  const std::string path = pstrain::fuzz::WriteScratch("server-0-step-0000000001.ckpt", bytes);
  absl::StatusOr<pstrain::server::ShardCheckpoint> ckpt = pstrain::server::ReadCheckpoint(path);
  if (!ckpt.ok()) return 0;
  auto store = pstrain::fuzz::SmallStore(ckpt->mode == pstrain::ASYNC ? pstrain::ASYNC : pstrain::SYNC);
  (void)store->Restore(*ckpt);
  return 0;
}
