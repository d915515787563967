#pragma once

// What compiles on stand-ins answered (for down slices and simulated hosts), so that a
// fleet of hosts asking for the same program is answered by one real compile.
// Thread-safe; bounded.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "absl/hash/hash.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "switchyard/worker.pb.h"

namespace switchyard::proxy {

class MetadataCache {
 public:
  std::optional<CompileResponse> Find(absl::string_view request) const {
    absl::MutexLock lock(&mutex_);
    auto it = entries_.find(KeyOf(request));
    if (it == entries_.end()) return std::nullopt;
    return it->second;
  }
  void Add(absl::string_view request, CompileResponse response) {
    absl::MutexLock lock(&mutex_);
    // A session compiles a few programs many times; one that compiles more starts over.
    if (entries_.size() >= kMaxEntries) entries_.clear();
    entries_[KeyOf(request)] = std::move(response);
  }

 private:
  static constexpr size_t kMaxEntries = 256;
  // Requests hold whole programs: keep their hash and length, not their bytes.
  using Key = std::pair<size_t, size_t>;
  static Key KeyOf(absl::string_view request) { return {absl::HashOf(request), request.size()}; }

  mutable absl::Mutex mutex_;
  std::map<Key, CompileResponse> entries_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace switchyard::proxy
