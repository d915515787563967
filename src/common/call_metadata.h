#pragma once

// The gRPC metadata of worker calls (worker.proto says what each means). Shared by
// the proxy, which sends it, and the worker, which checks it.

#include <cstdint>
#include <string>

namespace switchyard {

inline constexpr char kOwnerMetadata[] = "switchyard-owner";
inline constexpr char kBootMetadata[] = "switchyard-boot";
inline constexpr char kStreamMetadata[] = "switchyard-stream";

}  // namespace switchyard
