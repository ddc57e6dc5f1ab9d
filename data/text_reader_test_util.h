// Helpers shared by the text readers' tests (criteo_reader_test, libsvm_reader_test): write a
// file, plain or gzip, and read every sample of it back. Test-only.
#ifndef PSTRAIN_DATA_TEXT_READER_TEST_UTIL_H_
#define PSTRAIN_DATA_TEXT_READER_TEST_UTIL_H_

#include <zlib.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace pstrain {
namespace data {

// Writes `contents` to a file `name` in the test's temporary folder (gzip-compressed with
// `gzip`); its path.
inline std::string WriteFile(const std::string& name, const std::string& contents, bool gzip = false) {
  const std::string path = testing::TempDir() + "/" + name;
  if (gzip) {
    gzFile f = gzopen(path.c_str(), "wb");
    gzwrite(f, contents.data(), static_cast<unsigned>(contents.size()));
    gzclose(f);
  } else {
    std::ofstream(path, std::ios::binary) << contents;
  }
  return path;
}

// Every sample `Reader` (CriteoReader, LibsvmReader) reads from `path`, failing the test on an
// error; the skipped count in *skipped when not null.
template <typename Reader, typename Sample>
std::vector<Sample> ReadAllSamples(const std::string& path, typename Reader::Options options, int64_t* skipped) {
  auto reader = Reader::Open(path, options);
  EXPECT_TRUE(reader.ok()) << reader.status();
  std::vector<Sample> samples;
  if (!reader.ok()) return samples;
  Sample sample;
  while (true) {
    absl::StatusOr<bool> more = (*reader)->Next(&sample);
    EXPECT_TRUE(more.ok()) << more.status();
    if (!more.ok() || !*more) break;
    samples.push_back(sample);
  }
  if (skipped != nullptr) *skipped = (*reader)->skipped();
  return samples;
}

}  // namespace data
}  // namespace pstrain

#endif  // PSTRAIN_DATA_TEXT_READER_TEST_UTIL_H_
