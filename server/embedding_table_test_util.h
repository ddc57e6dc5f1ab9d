// Helpers shared by the EmbeddingTable tests: a table made from options (the test fails if they are
// refused), its rows as a server reads them, and its checkpoint bytes.
#ifndef PSTRAIN_SERVER_EMBEDDING_TABLE_TEST_UTIL_H_
#define PSTRAIN_SERVER_EMBEDDING_TABLE_TEST_UTIL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "server/embedding_table.h"

namespace pstrain::server::table_test {

inline std::unique_ptr<EmbeddingTable> MakeTable(const TableOptions& options) {
  auto table = EmbeddingTable::Create(options);
  EXPECT_TRUE(table.ok()) << table.status();
  return std::move(table).value();
}

// EmbeddingTable::Read of `keys` (sorted, unique), row after row.
inline std::vector<float> ReadRows(const EmbeddingTable& table, const std::vector<uint64_t>& keys) {
  std::vector<float> out(keys.size() * table.dim());
  const absl::Status status = table.Read(keys, absl::MakeSpan(out));
  EXPECT_TRUE(status.ok()) << status;
  return out;
}

// EmbeddingTable::Serialize.
inline std::string Bytes(const EmbeddingTable& table) {
  std::string out;
  table.Serialize(&out);
  return out;
}

}  // namespace pstrain::server::table_test

#endif  // PSTRAIN_SERVER_EMBEDDING_TABLE_TEST_UTIL_H_
