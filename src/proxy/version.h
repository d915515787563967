#pragma once

// Version negotiation for the IFRT proxy protocol: which protocol and IFRT SerDes
// versions Switchyard serves, and the choice for a client's range. Pure.

#include "absl/status/statusor.h"

namespace switchyard::proxy {

// Protocol 16..25 is what jaxlib 0.9.0 through 0.11.2 speak (xla/python/ifrt_proxy/common/
// versions.h: kExecutableDevices = 16 .. kLoadedExecutableDeleteOptions = 25).
inline constexpr int kProtocolMin = 16;
inline constexpr int kProtocolMax = 25;
// IFRT SerDes 0..6: payload version numbers are all 0 up to 6 except
// XlaCompileOptionsProto (4 from SerDes 4), which we read leniently. jaxlib 0.11.2
// offers 0..6 and needs at least its week-4-old version for HLO programs, so the
// newest common version is chosen.
inline constexpr int kSerDesMin = 0;
inline constexpr int kSerDesMax = 6;

struct Version {
  int protocol = 0;
  int serdes = 0;
};

// The highest versions both sides speak. INVALID_ARGUMENT naming both ranges if
// there is none; never a value outside the client's range (the client aborts).
absl::StatusOr<Version> ChooseVersion(Version client_min, Version client_max);

}  // namespace switchyard::proxy
