#pragma once

// Who may open a session on this proxy (--tokens_file): tenants and the SHA-256 of their
// tokens. Only hashes are kept, in the file and in memory, so the file does not hand out
// tokens to whoever reads it. Pure logic: no I/O but `Load`.

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace switchyard::proxy {

// The session initialization data key (GrpcIfrtSessionMetadata.initialization_data) a
// client puts its token under; `switchyard.initialize(token=...)` and $SWITCHYARD_TOKEN
// set it.
inline constexpr char kTokenAttribute[] = "switchyard_token";

class TenantTokens {
 public:
  // No tenants: every session is let in, as "anonymous".
  TenantTokens() = default;

  // One tenant a line, `<tenant> sha256:<64 hex digits>`; blank lines and `#` comments are
  // skipped. INVALID_ARGUMENT naming the line for anything else, a tenant named twice, or
  // a hash given to two tenants (a token must name one tenant).
  static absl::StatusOr<TenantTokens> Parse(absl::string_view text);
  // `Parse` of the file at `path`; NOT_FOUND or PERMISSION_DENIED when it cannot be read.
  static absl::StatusOr<TenantTokens> Load(const std::string& path);

  // "sha256:<hex>" of `token`, the form the file holds.
  static std::string Hash(absl::string_view token);

  bool required() const { return !tenant_by_hash_.empty(); }
  size_t tenants() const { return tenant_by_hash_.size(); }

  // The tenant `token` belongs to. With no tenants configured, "anonymous" for any token
  // or none. UNAUTHENTICATED when a token is required and `token` is empty or unknown
  // (the message says which, never the token).
  absl::StatusOr<std::string> Authenticate(absl::string_view token) const;

 private:
  std::map<std::string, std::string> tenant_by_hash_;
};

}  // namespace switchyard::proxy
