#include "common/host_id.h"

#include <sys/stat.h>

#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace pstrain {

std::string HostId() {
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  std::string boot_id;
  if (!std::getline(boot, boot_id)) return "";
  struct stat mnt;
  struct stat net;
  if (stat("/proc/self/ns/mnt", &mnt) != 0 || stat("/proc/self/ns/net", &net) != 0) return "";
  return absl::StrCat(absl::StripAsciiWhitespace(boot_id), "/mnt:", mnt.st_ino, "/net:", net.st_ino);
}

}  // namespace pstrain
