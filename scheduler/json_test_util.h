// Tests: JSON text parsed by a real parser (protobuf's, into google.protobuf.Value), so a test
// checks both that the text is valid JSON and what it holds.
#ifndef PSTRAIN_SCHEDULER_JSON_TEST_UTIL_H_
#define PSTRAIN_SCHEDULER_JSON_TEST_UTIL_H_

#include <string>

#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"

namespace pstrain {
namespace scheduler {

// Parses `text`; false (with the parser's message in *error) when it is not valid JSON.
inline bool ParseJson(const std::string& text, google::protobuf::Value* out, std::string* error) {
  const auto status = google::protobuf::util::JsonStringToMessage(text, out);
  if (!status.ok()) *error = status.ToString();
  return status.ok();
}

// The member `name` of an object value (a null value when absent).
inline const google::protobuf::Value& Member(const google::protobuf::Value& object, const std::string& name) {
  static const google::protobuf::Value* const missing = new google::protobuf::Value();
  const auto& fields = object.struct_value().fields();
  auto it = fields.find(name);
  return it == fields.end() ? *missing : it->second;
}

}  // namespace scheduler
}  // namespace pstrain

#endif  // PSTRAIN_SCHEDULER_JSON_TEST_UTIL_H_
