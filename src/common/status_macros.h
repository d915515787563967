#pragma once

// Early-return helpers for absl::Status / absl::StatusOr (Debian's abseil predates
// ABSL_RETURN_IF_ERROR).

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define SY_CONCAT_INNER_(a, b) a##b
#define SY_CONCAT_(a, b) SY_CONCAT_INNER_(a, b)

// Returns from the enclosing function if `expr` is not OK.
#define SY_RETURN_IF_ERROR(expr)             \
  do {                                       \
    ::absl::Status sy_status_ = (expr);      \
    if (!sy_status_.ok()) return sy_status_; \
  } while (0)

// `SY_ASSIGN_OR_RETURN(auto x, F());` declares x from F()'s value or returns its error.
#define SY_ASSIGN_OR_RETURN(lhs, expr) \
  SY_ASSIGN_OR_RETURN_IMPL_(SY_CONCAT_(sy_statusor_, __LINE__), lhs, expr)
#define SY_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()
