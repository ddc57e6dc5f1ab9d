#include "data/idx_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"
#include "data/zlib_file.h"

namespace pstrain {
namespace data {
namespace {

// zlib is fed and drained in blocks this large: per-call overhead vanishes, memory stays small.
constexpr size_t kBlockBytes = size_t{1} << 20;

// Real files are 28x28. A larger side means a corrupt header; the bound also keeps
// count * rows * cols (count < 2^32) far below int64 overflow.
constexpr uint32_t kMaxSide = 1 << 14;

// The most floats reserved up front from a header's promise. Covers the real training set
// (47M) in one allocation, yet a corrupt header promising billions of images cannot make us
// allocate more than the data that actually arrives (the vector grows as blocks are read).
constexpr int64_t kMaxReserveFloats = int64_t{1} << 26;

constexpr int kNumClasses = 10;

// zlib prefixes its messages with the name it was opened under, "<fd:3>: " after gzdopen;
// our messages name the file themselves.
absl::string_view StripZlibPrefix(absl::string_view message) {
  if (absl::StartsWith(message, "<fd:")) {
    const size_t colon = message.find(">: ");
    if (colon != absl::string_view::npos) message.remove_prefix(colon + 3);
  }
  return message;
}

struct GzCloser {
  void operator()(gzFile_s* f) const { gzclose(f); }
};

// A file read through zlib. gzip streams are inflated; anything else is passed through as is
// (zlib's "transparent" mode), so the format is detected from the magic bytes, never the name.
class InputFile {
 public:
  static absl::StatusOr<InputFile> Open(const std::string& path) {
    ASSIGN_OR_RETURN(gzFile file, OpenThroughZlib(path, kBlockBytes));
    return InputFile(path, file);
  }

  const std::string& path() const { return path_; }

  // Reads up to `len` bytes into `buf` and returns how many were read: fewer than `len` only at
  // the end of the data. A gzip stream that ends early also counts as the end (the caller then
  // reports truncation with counts); a corrupt stream is DATA_LOSS with zlib's message.
  absl::StatusOr<size_t> Read(void* buf, size_t len) {
    char* out = static_cast<char*>(buf);
    size_t total = 0;
    while (total < len) {
      const unsigned chunk = static_cast<unsigned>(std::min(len - total, kBlockBytes));
      const int n = gzread(file_.get(), out + total, chunk);
      if (n <= 0) {
        int errnum = Z_OK;
        const char* message = gzerror(file_.get(), &errnum);
        // Z_BUF_ERROR is zlib's "unexpected end of file" for a cut-off gzip stream.
        if (errnum == Z_OK || errnum == Z_BUF_ERROR) break;
        if (errnum == Z_ERRNO) {
          const int err = errno;
          return absl::DataLossError(absl::StrCat(path_, ": read error: ", std::strerror(err)));
        }
        return absl::DataLossError(absl::StrCat(path_, ": corrupt gzip stream: ", StripZlibPrefix(message)));
      }
      total += static_cast<size_t>(n);
    }
    return total;
  }

 private:
  InputFile(std::string path, gzFile file) : path_(std::move(path)), file_(file) {}

  std::string path_;
  std::unique_ptr<gzFile_s, GzCloser> file_;
};

uint32_t BigEndian32(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

// Reads a header of `N` big-endian words whose first word must be `magic`.
// `kind` is "image" or "label", for messages.
template <size_t N>
absl::StatusOr<std::array<uint32_t, N>> ReadHeader(InputFile& file, uint32_t magic, const char* kind) {
  unsigned char bytes[4 * N];
  ASSIGN_OR_RETURN(const size_t got, file.Read(bytes, sizeof(bytes)));
  // The magic is judged first: a short file of some other format is "not IDX", not "truncated".
  if (got >= 4 && BigEndian32(bytes) != magic) {
    return absl::DataLossError(absl::StrFormat("%s: not an IDX %s file: magic 0x%08x, expected 0x%08x", file.path(),
                                               kind, BigEndian32(bytes), magic));
  }
  if (got < sizeof(bytes)) {
    return absl::DataLossError(absl::StrFormat("%s: truncated: expected a %d-byte IDX %s header, found %d bytes",
                                               file.path(), sizeof(bytes), kind, got));
  }
  std::array<uint32_t, N> words;
  for (size_t i = 0; i < N; ++i) words[i] = BigEndian32(bytes + 4 * i);
  return words;
}

struct ImageHeader {
  int64_t count = 0;
  int rows = 0, cols = 0;
};

absl::StatusOr<ImageHeader> ReadImageHeader(InputFile& file) {
  ASSIGN_OR_RETURN(const auto words, ReadHeader<4>(file, kIdxImageMagic, "image"));
  if (words[2] < 1 || words[2] > kMaxSide || words[3] < 1 || words[3] > kMaxSide) {
    return absl::DataLossError(absl::StrFormat("%s: implausible image size %dx%d, expected rows and cols in [1, %d]",
                                               file.path(), words[2], words[3], kMaxSide));
  }
  ImageHeader header;
  header.count = words[1];
  header.rows = static_cast<int>(words[2]);
  header.cols = static_cast<int>(words[3]);
  return header;
}

absl::StatusOr<int64_t> ReadLabelHeader(InputFile& file) {
  ASSIGN_OR_RETURN(const auto words, ReadHeader<2>(file, kIdxLabelMagic, "label"));
  return int64_t{words[1]};
}

// Reads the pixels of the first `keep` images (header already consumed) and normalizes them.
absl::StatusOr<std::vector<float>> ReadPixels(InputFile& file, const ImageHeader& header, int64_t keep) {
  std::array<float, 256> normalized;
  for (int p = 0; p < 256; ++p) {
    normalized[p] = static_cast<float>((p / 255.0 - kPixelMean) / kPixelStd);
  }
  const int64_t features = int64_t{header.rows} * header.cols;
  const int64_t want = keep * features;

  std::vector<float> pixels;
  pixels.reserve(static_cast<size_t>(std::min(want, kMaxReserveFloats)));
  std::vector<unsigned char> block(kBlockBytes);
  while (static_cast<int64_t>(pixels.size()) < want) {
    const size_t ask = static_cast<size_t>(std::min<int64_t>(want - pixels.size(), block.size()));
    ASSIGN_OR_RETURN(const size_t got, file.Read(block.data(), ask));
    const size_t old_size = pixels.size();
    pixels.resize(old_size + got);
    std::transform(block.begin(), block.begin() + got, pixels.begin() + old_size,
                   [&normalized](unsigned char p) { return normalized[p]; });
    if (got < ask) {
      return absl::DataLossError(
          absl::StrFormat("%s: truncated: header promises %d images of %dx%d (%d bytes of pixels), found %d",
                          file.path(), header.count, header.rows, header.cols, header.count * features, pixels.size()));
    }
  }
  return pixels;
}

// Reads the first `keep` labels (header already consumed) and checks each is a valid class.
// Read block by block, like the pixels, so a corrupt count cannot force a huge allocation.
absl::StatusOr<std::vector<int32_t>> ReadLabels(InputFile& file, int64_t count, int64_t keep) {
  std::vector<int32_t> labels;
  labels.reserve(static_cast<size_t>(std::min(keep, kMaxReserveFloats)));
  std::vector<unsigned char> block(kBlockBytes);
  while (static_cast<int64_t>(labels.size()) < keep) {
    const size_t ask = static_cast<size_t>(std::min<int64_t>(keep - labels.size(), block.size()));
    ASSIGN_OR_RETURN(const size_t got, file.Read(block.data(), ask));
    for (size_t i = 0; i < got; ++i) {
      if (block[i] >= kNumClasses) {
        return absl::DataLossError(absl::StrFormat("%s: label %d at index %d, expected [0, %d)", file.path(), block[i],
                                                   labels.size(), kNumClasses));
      }
      labels.push_back(block[i]);
    }
    if (got < ask) {
      return absl::DataLossError(absl::StrFormat("%s: truncated: header promises %d labels (%d bytes), found %d",
                                                 file.path(), count, count, labels.size()));
    }
  }
  return labels;
}

absl::Status CheckCountsMatch(const InputFile& images, int64_t image_count, const InputFile& labels,
                              int64_t label_count) {
  if (image_count == label_count) return absl::OkStatus();
  return absl::DataLossError(absl::StrFormat("image/label count mismatch: %s holds %d images but %s holds %d labels",
                                             images.path(), image_count, labels.path(), label_count));
}

int64_t Kept(int64_t count, int64_t limit) { return limit > 0 ? std::min(count, limit) : count; }

std::string JoinPath(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  if (dir.back() == '/') return dir + name;
  return absl::StrCat(dir, "/", name);
}

// "<dir>/<name>.gz" if it exists, else "<dir>/<name>" if that exists, else NOT_FOUND naming both.
absl::StatusOr<std::string> ResolveIdxPath(const std::string& dir, const std::string& name) {
  const std::string plain = JoinPath(dir, name);
  const std::string gz = plain + ".gz";
  struct stat st;
  if (::stat(gz.c_str(), &st) == 0) return gz;
  if (errno != ENOENT) return gz;  // Let the open report why (e.g. permission denied).
  if (::stat(plain.c_str(), &st) == 0 || errno != ENOENT) return plain;
  return absl::NotFoundError(absl::StrCat(gz, ": cannot open: ", std::strerror(ENOENT), " (also tried ", plain,
                                          "); point --data_dir at the folder of the IDX files (Debian's "
                                          "dataset-fashion-mnist installs them in /usr/share/datasets/fashion-mnist)"));
}

// An image file and a label file, opened, with both headers read and checked against each other.
struct IdxPair {
  InputFile images;
  ImageHeader header;
  InputFile labels;
  int64_t label_count = 0;
};

absl::StatusOr<IdxPair> OpenIdxPair(const std::string& images_path, const std::string& labels_path) {
  // Both headers come first so that a bad labels file is reported before 47 MB are inflated.
  ASSIGN_OR_RETURN(InputFile images, InputFile::Open(images_path));
  ASSIGN_OR_RETURN(const ImageHeader header, ReadImageHeader(images));
  ASSIGN_OR_RETURN(InputFile labels, InputFile::Open(labels_path));
  ASSIGN_OR_RETURN(const int64_t label_count, ReadLabelHeader(labels));
  RETURN_IF_ERROR(CheckCountsMatch(images, header.count, labels, label_count));
  return IdxPair{std::move(images), header, std::move(labels), label_count};
}

}  // namespace

absl::StatusOr<Dataset> ReadIdxPair(const std::string& images_path, const std::string& labels_path, int64_t limit) {
  ASSIGN_OR_RETURN(IdxPair pair, OpenIdxPair(images_path, labels_path));
  Dataset data;
  data.num_samples = Kept(pair.header.count, limit);
  data.rows = pair.header.rows;
  data.cols = pair.header.cols;
  data.num_classes = kNumClasses;
  ASSIGN_OR_RETURN(data.images, ReadPixels(pair.images, pair.header, data.num_samples));
  ASSIGN_OR_RETURN(data.labels, ReadLabels(pair.labels, pair.label_count, data.num_samples));
  return data;
}

std::string IdxImagesName(Split split) {
  return split == Split::kTrain ? "train-images-idx3-ubyte" : "t10k-images-idx3-ubyte";
}

std::string IdxLabelsName(Split split) {
  return split == Split::kTrain ? "train-labels-idx1-ubyte" : "t10k-labels-idx1-ubyte";
}

absl::StatusOr<Dataset> LoadFashionMnist(const std::string& data_dir, Split split, int64_t limit) {
  ASSIGN_OR_RETURN(const std::string images_path, ResolveIdxPath(data_dir, IdxImagesName(split)));
  ASSIGN_OR_RETURN(const std::string labels_path, ResolveIdxPath(data_dir, IdxLabelsName(split)));
  return ReadIdxPair(images_path, labels_path, limit);
}

absl::StatusOr<DatasetInfo> ReadDatasetInfo(const std::string& data_dir, Split split, int64_t limit) {
  ASSIGN_OR_RETURN(const std::string images_path, ResolveIdxPath(data_dir, IdxImagesName(split)));
  ASSIGN_OR_RETURN(const std::string labels_path, ResolveIdxPath(data_dir, IdxLabelsName(split)));
  ASSIGN_OR_RETURN(const IdxPair pair, OpenIdxPair(images_path, labels_path));
  DatasetInfo info;
  info.num_samples = Kept(pair.header.count, limit);
  info.rows = pair.header.rows;
  info.cols = pair.header.cols;
  info.num_classes = kNumClasses;
  return info;
}

}  // namespace data
}  // namespace pstrain
