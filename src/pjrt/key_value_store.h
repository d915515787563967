#pragma once

// The store a multi-host PJRT client shares with its peers through the plugin's
// kv_get / kv_put / kv_try_get callbacks (e.g. the GPU client exchanges its local
// topology and NCCL clique ids this way). Implementations must be thread-safe; the
// plugin calls them from its own threads while `Client::Create` runs and later.

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace switchyard::pjrt {

class KeyValueStore {
 public:
  virtual ~KeyValueStore() = default;
  // Waits up to `timeout` for the key; DEADLINE_EXCEEDED if it does not appear.
  virtual absl::StatusOr<std::string> Get(std::string_view key, absl::Duration timeout) = 0;
  // NOT_FOUND at once for a key that is not set.
  virtual absl::StatusOr<std::string> TryGet(std::string_view key) = 0;
  virtual absl::Status Put(std::string_view key, std::string_view value) = 0;
};

}  // namespace switchyard::pjrt
