#pragma once

// The gRPC metadata of worker calls (worker.proto says what each means). Shared by
// the proxy, which sends it, and the worker, which checks it.

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace switchyard {

inline constexpr char kOwnerMetadata[] = "switchyard-owner";
inline constexpr char kBootMetadata[] = "switchyard-boot";
inline constexpr char kStreamMetadata[] = "switchyard-stream";

// Whether `value` may be sent as a metadata value: gRPC aborts the process when a call's
// metadata holds anything but printable ASCII, so values that came off the wire (a boot
// id in a registration or a transfer) are checked before they are sent on.
inline bool IsMetadataValue(absl::string_view value) {
  for (char c : value) {
    if (c < 0x20 || c > 0x7e) return false;
  }
  return true;
}

}  // namespace switchyard
