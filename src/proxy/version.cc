#include "proxy/version.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace switchyard::proxy {

absl::StatusOr<Version> ChooseVersion(Version client_min, Version client_max) {
  Version chosen{std::min(kProtocolMax, client_max.protocol),
                 std::min(kSerDesMax, client_max.serdes)};
  const bool protocol_ok =
      chosen.protocol >= kProtocolMin && chosen.protocol >= client_min.protocol;
  const bool serdes_ok = chosen.serdes >= kSerDesMin && chosen.serdes >= client_min.serdes;
  if (protocol_ok && serdes_ok) return chosen;
  return absl::InvalidArgumentError(
      absl::StrCat("Switchyard cannot serve this client: it speaks IFRT proxy protocol ",
                   client_min.protocol, "..", client_max.protocol, " and SerDes ",
                   client_min.serdes, "..", client_max.serdes, "; Switchyard speaks protocol ",
                   kProtocolMin, "..", kProtocolMax, " and SerDes ", kSerDesMin, "..", kSerDesMax));
}

}  // namespace switchyard::proxy
