#include "common/binary_init.h"

#include <gflags/gflags.h>
#include <glog/logging.h>

#include <cstdlib>
#include <iostream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/malloc_tuning.h"

extern char** environ;

namespace pstrain {
namespace {

// What a flag of gflags type `type` accepts, for error messages.
std::string Expected(absl::string_view type) {
  if (type == "bool") return "true or false";
  if (type == "int32") return "an integer (32-bit)";
  if (type == "int64") return "an integer (64-bit)";
  if (type == "uint32" || type == "uint64") return "a non-negative integer";
  if (type == "double") return "a number";
  return absl::StrCat("a value of type ", type);
}

}  // namespace

absl::Status SetFlagsFromEnvironment(std::vector<std::string>* unknown) {
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    const absl::string_view variable(*entry);
    if (!absl::StartsWith(variable, kFlagEnvPrefix)) continue;
    const size_t eq = variable.find('=');
    if (eq == absl::string_view::npos) continue;
    const absl::string_view var_name = variable.substr(0, eq);
    const std::string value(variable.substr(eq + 1));
    const std::string flag = absl::AsciiStrToLower(var_name.substr(sizeof(kFlagEnvPrefix) - 1));
    gflags::CommandLineFlagInfo info;
    if (flag.empty() || !gflags::GetCommandLineFlagInfo(flag.c_str(), &info)) {
      if (unknown != nullptr) unknown->emplace_back(var_name);
      continue;
    }
    // gflags says nothing about why a value was refused; the flag's type says what it wanted.
    if (gflags::SetCommandLineOption(flag.c_str(), value.c_str()).empty()) {
      return absl::InvalidArgumentError(absl::StrCat("environment variable ", var_name, "='", value,
                                                     "': not a valid value for --", flag, ", expected ",
                                                     Expected(info.type)));
    }
  }
  return absl::OkStatus();
}

void InitBinary(const char* usage, int* argc, char*** argv) {
  KeepFreedMemoryForReuse();
  gflags::SetUsageMessage(usage);
  std::vector<std::string> unknown;
  // Before the command line, so that a flag given there wins over the environment.
  if (absl::Status s = SetFlagsFromEnvironment(&unknown); !s.ok()) {
    std::cerr << (*argv)[0] << ": " << s.message() << std::endl;
    std::exit(2);
  }
  gflags::ParseCommandLineFlags(argc, argv, /*remove_flags=*/true);
  FLAGS_logtostderr = true;
  google::InitGoogleLogging((*argv)[0]);
  // Not an error: several binaries may share one environment. Logged so that a typo is findable.
  for (const std::string& name : unknown) {
    LOG(INFO) << "ignoring the environment variable " << name << ": this binary has no flag --"
              << absl::AsciiStrToLower(absl::string_view(name).substr(sizeof(kFlagEnvPrefix) - 1));
  }
}

}  // namespace pstrain
