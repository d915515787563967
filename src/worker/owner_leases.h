#pragma once

// Which owners (proxies, one per connection epoch) are alive, as one worker sees
// them: an owner is alive while it holds a Dispatch stream open here, and for `grace`
// after its last one closed. Once its lease runs out it is gone (the proxy died, or
// reconnected under a new owner id) and the worker frees what it made. Pure logic:
// time comes in as arguments. Not thread-safe.

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"

namespace switchyard::worker {

class OwnerLeases {
 public:
  explicit OwnerLeases(absl::Duration grace) : grace_(grace) {}

  void Opened(uint64_t owner, absl::Time now);
  void Closed(uint64_t owner, absl::Time now);
  // A call without a stream made something for `owner`: a lease that holds no stream
  // runs from now.
  void Touched(uint64_t owner, absl::Time now);
  // Owners whose lease ran out, forgotten from here on (a later call starts anew).
  std::vector<uint64_t> Expire(absl::Time now);
  size_t size() const { return leases_.size(); }

 private:
  struct Lease {
    int streams = 0;
    absl::Time idle_since;  // when `streams` last became 0
  };
  const absl::Duration grace_;
  absl::flat_hash_map<uint64_t, Lease> leases_;
};

}  // namespace switchyard::worker
