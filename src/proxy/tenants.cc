#include "proxy/tenants.h"

#include <openssl/sha.h>

#include <set>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/files.h"
#include "common/tenant_name.h"

namespace switchyard::proxy {
namespace {

constexpr absl::string_view kHashPrefix = "sha256:";

bool IsHash(absl::string_view text) {
  if (!absl::ConsumePrefix(&text, kHashPrefix) || text.size() != 2 * SHA256_DIGEST_LENGTH) {
    return false;
  }
  for (char c : text) {
    if (!absl::ascii_isxdigit(c) || absl::ascii_isupper(c)) return false;
  }
  return true;
}

}  // namespace

std::string TenantTokens::Hash(absl::string_view token) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(token.data()), token.size(), digest);
  return absl::StrCat(kHashPrefix, absl::BytesToHexString(absl::string_view(
                                       reinterpret_cast<const char*>(digest), sizeof(digest))));
}

absl::StatusOr<TenantTokens> TenantTokens::Parse(absl::string_view text) {
  TenantTokens tokens;
  std::set<std::string, std::less<>> tenants;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line.substr(0, line.find('#')));
    if (line.empty()) continue;
    std::vector<absl::string_view> fields =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    auto refuse = [&](absl::string_view why) {
      return absl::InvalidArgumentError(absl::StrCat("tokens file line ", line_number, ": ", why));
    };
    if (fields.size() != 2) return refuse("expected `<tenant> sha256:<64 hex digits>`");
    if (!IsTenantName(fields[0])) {
      return refuse("a tenant name is 1 to 64 letters, digits, '-', '_' or '.'");
    }
    if (!IsHash(fields[1])) {
      return refuse(
          "the token must be given as its hash, sha256:<64 lowercase hex digits> (`printf %s "
          "\"$TOKEN\" | sha256sum`)");
    }
    if (!tenants.insert(std::string(fields[0])).second) {
      return refuse(absl::StrCat("tenant '", fields[0], "' is named twice"));
    }
    if (!tokens.tenant_by_hash_.emplace(std::string(fields[1]), std::string(fields[0])).second) {
      return refuse("this token already belongs to another tenant");
    }
  }
  return tokens;
}

absl::StatusOr<TenantTokens> TenantTokens::Load(const std::string& path) {
  absl::StatusOr<std::string> text = ReadWholeFile(path);
  if (!text.ok()) return text.status();
  absl::StatusOr<TenantTokens> tokens = Parse(*text);
  if (!tokens.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", tokens.status().message()));
  }
  return tokens;
}

absl::StatusOr<std::string> TenantTokens::Authenticate(absl::string_view token) const {
  if (!required()) return std::string("anonymous");
  if (token.empty()) {
    return absl::UnauthenticatedError(
        "this Switchyard proxy requires a tenant token: pass switchyard.initialize(token=...) "
        "or set SWITCHYARD_TOKEN");
  }
  auto it = tenant_by_hash_.find(Hash(token));
  if (it == tenant_by_hash_.end()) {
    return absl::UnauthenticatedError("the tenant token is not one this proxy accepts");
  }
  return it->second;
}

}  // namespace switchyard::proxy
