// Early-return helpers for absl::Status and absl::StatusOr.
//
//   RETURN_IF_ERROR(DoThing());
//   ASSIGN_OR_RETURN(auto value, MakeValue());
#ifndef PSTRAIN_COMMON_STATUS_MACROS_H_
#define PSTRAIN_COMMON_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define PSTRAIN_CONCAT_INNER_(a, b) a##b
#define PSTRAIN_CONCAT_(a, b) PSTRAIN_CONCAT_INNER_(a, b)

#define RETURN_IF_ERROR(expr)                          \
  do {                                                 \
    ::absl::Status pstrain_status_ = (expr);           \
    if (!pstrain_status_.ok()) return pstrain_status_; \
  } while (0)

// `tmp` and `lhs` name and declare (`auto x`): they cannot take the parentheses that
// bugprone-macro-parentheses asks for.
// NOLINTBEGIN(bugprone-macro-parentheses)
#define PSTRAIN_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                   \
  if (!tmp.ok()) return tmp.status();                  \
  lhs = std::move(tmp).value()
// NOLINTEND(bugprone-macro-parentheses)

#define ASSIGN_OR_RETURN(lhs, expr) \
  PSTRAIN_ASSIGN_OR_RETURN_IMPL_(PSTRAIN_CONCAT_(pstrain_statusor_, __LINE__), lhs, expr)

#endif  // PSTRAIN_COMMON_STATUS_MACROS_H_
