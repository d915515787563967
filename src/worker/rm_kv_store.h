#pragma once

// The resource manager's key-value store as seen by this worker's PJRT plugin:
// what a multi-host client (the hosts of one slice) uses to find its peers.
// Keys are namespaced per slice and epoch (one start of the slice) so that slices, and
// runs of one slice, never see each other's.

#include <memory>
#include <string>

#include "pjrt/pjrt.h"
#include "switchyard/rm.grpc.pb.h"

namespace switchyard::worker {

class RmKeyValueStore final : public pjrt::KeyValueStore {
 public:
  RmKeyValueStore(const std::string& rm_address, int slice_index, const std::string& epoch);

  absl::StatusOr<std::string> Get(std::string_view key, absl::Duration timeout) override;
  absl::StatusOr<std::string> TryGet(std::string_view key) override;
  // Overwrites: a host that restarts puts its values again.
  absl::Status Put(std::string_view key, std::string_view value) override;

 private:
  absl::StatusOr<std::string> GetWithTimeout(std::string_view key, absl::Duration timeout);

  const std::string prefix_;
  std::unique_ptr<ResourceManager::Stub> stub_;
};

}  // namespace switchyard::worker
