#pragma once

// What a tenant may be called: 1 to kTenantNameMax letters, digits, '-', '_' or '.'.
// The tokens file's names (proxy) and the names launches carry (worker) both hold to
// it, so a name is safe in metric labels, logs and the dashboard.

#include "absl/strings/ascii.h"
#include "absl/strings/string_view.h"
#include "common/limits.h"

namespace switchyard {

inline bool IsTenantName(absl::string_view name) {
  if (name.empty() || name.size() > static_cast<size_t>(limits::kTenantNameMax)) return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') {
      return false;
    }
  }
  return true;
}

}  // namespace switchyard
