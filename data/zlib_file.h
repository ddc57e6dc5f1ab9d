// Opening a data file through zlib, so that gzip and plain files read alike: a gzip stream is
// inflated, anything else passed through as it is (zlib's "transparent" mode). The format is thus
// told by the magic bytes, never by the name. Shared by the IDX reader and the text readers.
//
// Thread safety: a free function with no shared state; it blocks on opening the file.
#ifndef PSTRAIN_DATA_ZLIB_FILE_H_
#define PSTRAIN_DATA_ZLIB_FILE_H_

#include <string>

#include "absl/status/statusor.h"

struct gzFile_s;

namespace pstrain {
namespace data {

// Opens `path` for reading with a read buffer of `buffer_bytes`. The caller owns the result and
// closes it with gzclose. Errors name the path: the errno's code when it cannot be opened
// ("<path>: cannot open: <strerror>"), RESOURCE_EXHAUSTED when zlib cannot allocate its stream.
absl::StatusOr<gzFile_s*> OpenThroughZlib(const std::string& path, unsigned buffer_bytes);

}  // namespace data
}  // namespace pstrain

#endif  // PSTRAIN_DATA_ZLIB_FILE_H_
