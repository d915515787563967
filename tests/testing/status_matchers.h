#pragma once

// Test helpers for absl::Status (Debian's GoogleTest predates absl's matchers).

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gtest/gtest.h"

#define SY_EXPECT_OK(expr)               \
  do {                                   \
    const ::absl::Status sy_s_ = (expr); \
    EXPECT_TRUE(sy_s_.ok()) << sy_s_;    \
  } while (0)

#define SY_ASSERT_OK(expr)               \
  do {                                   \
    const ::absl::Status sy_s_ = (expr); \
    ASSERT_TRUE(sy_s_.ok()) << sy_s_;    \
  } while (0)

#define SY_TEST_CONCAT_INNER_(a, b) a##b
#define SY_TEST_CONCAT_(a, b) SY_TEST_CONCAT_INNER_(a, b)
#define SY_ASSERT_OK_AND_ASSIGN(lhs, expr) \
  SY_ASSERT_OK_AND_ASSIGN_IMPL_(SY_TEST_CONCAT_(sy_or_, __LINE__), lhs, expr)
#define SY_ASSERT_OK_AND_ASSIGN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  ASSERT_TRUE(tmp.ok()) << tmp.status();              \
  lhs = std::move(tmp).value()
