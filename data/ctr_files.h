// The files of a click-through-rate data set: their format, where they lie in a data folder, and
// how many records (lines) each holds, for a scheduler to split into record ranges.
//
// File names looked for in a data folder DIR, in this order; the first that exists wins. Each
// name is tried plain, then with ".gz" (the readers detect gzip from the content, not the name):
//   criteo   DIR/train.tsv  DIR/train.txt         (pstrain-gen-ctr writes .tsv; Kaggle ships
//            DIR/test.tsv   DIR/test.txt           train.txt)
//   libsvm   DIR/train.libsvm  DIR/train.svm  DIR/train.txt
//            DIR/test.libsvm   DIR/test.svm   DIR/test.txt
// Every file must carry labels. Kaggle's Criteo test.txt does not (39 fields): hold out part of
// its train.txt as test.tsv instead.
#ifndef PSTRAIN_DATA_CTR_FILES_H_
#define PSTRAIN_DATA_CTR_FILES_H_

#include <cstdint>
#include <filesystem>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace pstrain {
namespace data {

// The text format of a CTR file.
enum class DataFormat {
  kCriteo,  // criteo_reader.h
  kLibsvm,  // libsvm_reader.h
};

// "criteo" or "libsvm" (the spelling of --data_format). INVALID_ARGUMENT otherwise, listing them.
absl::StatusOr<DataFormat> ParseDataFormat(absl::string_view text);

// The spelling ParseDataFormat accepts: "criteo" or "libsvm".
absl::string_view DataFormatName(DataFormat format);

// The path of the `split` file ("train" or "test", or any other stem) of `format` in `dir`: the
// first name of the table above that exists. NOT_FOUND listing every path tried when none does.
absl::StatusOr<std::string> FindCtrFile(const std::string& dir, DataFormat format, absl::string_view split);

struct CtrFiles {
  std::string train;
  std::string test;
};

// Both files of `dir`. NOT_FOUND (as FindCtrFile) when either is missing.
absl::StatusOr<CtrFiles> FindCtrFiles(const std::string& dir, DataFormat format);

// Counts the records of files (CountLines: one streaming pass each) and remembers each count for
// as long as the file keeps its size and modification time, so that a scheduler asked for the
// same file by every job or every epoch reads it once. A file rewritten in place (or replaced,
// as pstrain-gen-ctr does) is counted again.
//
// Thread-safe. Count blocks on file I/O when the count is not remembered; the counting happens
// outside the lock, so one large file does not hold up the others (two threads asking for the
// same new file may both count it).
class RecordCounter {
 public:
  // The number of records (lines) of `path`. Errors of CountLines (NOT_FOUND for a missing file,
  // DATA_LOSS for a corrupt one); errors are not remembered.
  absl::StatusOr<int64_t> Count(const std::string& path);

 private:
  // What identifies the version of a file that was counted.
  struct Version {
    uintmax_t size = 0;
    std::filesystem::file_time_type modified;
    bool operator==(const Version& other) const { return size == other.size && modified == other.modified; }
  };
  struct Counted {
    Version version;
    int64_t records = 0;
  };

  absl::Mutex mu_;
  absl::flat_hash_map<std::string, Counted> counted_ ABSL_GUARDED_BY(mu_);
};

}  // namespace data
}  // namespace pstrain

#endif  // PSTRAIN_DATA_CTR_FILES_H_
