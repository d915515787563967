#pragma once

// SHA-256 (OpenSSL's), for cache keys and entry checksums. Private to this component.

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace switchyard::compile_cache {

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  Sha256& Update(absl::string_view data);
  // A length first, so that consecutive parts cannot run into each other.
  Sha256& UpdatePart(absl::string_view data);
  std::string Raw();  // 32 bytes; once
  std::string Hex();  // 64 characters; once

 private:
  struct Context;
  Context* context_;
};

std::string Sha256Hex(absl::string_view data);
// UNAVAILABLE if the file cannot be read.
absl::StatusOr<std::string> Sha256FileHex(const std::string& path);

}  // namespace switchyard::compile_cache
