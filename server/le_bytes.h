// Plain values to and from the byte strings of a table's checkpoint sections
// (server/embedding_table_io.cc, server/row_eviction.h, server/update_clock.h): the value's bytes
// as this machine holds them, which on the machines pstrain builds for (x86-64, arm64) is
// little-endian, as the checkpoint format says.
#ifndef PSTRAIN_SERVER_LE_BYTES_H_
#define PSTRAIN_SERVER_LE_BYTES_H_

#include <cstring>
#include <string>
#include <type_traits>

namespace pstrain::server {

// Appends `value`'s bytes to *out.
template <typename T>
void PutBytes(T value, std::string* out) {
  static_assert(std::is_trivially_copyable_v<T>);
  out->append(reinterpret_cast<const char*>(&value), sizeof(T));
}

// The T whose bytes start at `p` (any alignment).
template <typename T>
T GetBytes(const char* p) {
  static_assert(std::is_trivially_copyable_v<T>);
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}

}  // namespace pstrain::server

#endif  // PSTRAIN_SERVER_LE_BYTES_H_
