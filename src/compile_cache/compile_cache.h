#pragma once

// The persistent compilation cache: serialized executables on shared storage (a local
// disk, NFS, a bucket mounted with gcsfuse), so that a restart, a resize or another
// client does not compile a program again. Workers consult it; `switchyard cache`
// lists, sums and prunes it. This is the component's only public header.
//
// Contracts:
// - A key covers the program, the compile options (device assignment apart), the
//   device assignment in the plugin's own ids (so a program hits on whichever worker
//   of the same shape it lands) and the plugin build (its file's SHA-256 and what it
//   says of itself): an executable is never loaded by another plugin build.
// - An entry is written under a temporary name and renamed into place: concurrent
//   writers of one key leave one whole entry. A corrupt or truncated entry is logged,
//   removed and reported as a miss, never returned.
// - Entries beyond the size cap are removed least recently used first (a hit touches
//   its entry's modification time).
// - Thread-safe.

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace switchyard::compile_cache {

// The directory a --gcs_scratch_location names on this machine: a path, a file:// URI,
// or a gs:// or s3:// URI under `mount_root` (where the bucket is mounted, as by the
// gcsfuse CSI driver: gs://bucket/dir is <mount_root>/bucket/dir). FAILED_PRECONDITION,
// saying how to mount it, when that directory does not exist; INVALID_ARGUMENT for a
// location it cannot map.
absl::StatusOr<std::string> ResolveLocation(const std::string& location,
                                            const std::string& mount_root);

// The cache's own directory under a resolved location.
std::string CacheDirectory(const std::string& resolved_location);

// What a worker's plugin build is, for keys: the SHA-256 of its file and what it says
// of itself. Reads the whole file once (a few hundred MB: ~0.2 s).
struct PluginIdentity {
  std::string digest;       // hex
  std::string description;  // e.g. "cpu 0.115 (PJRT 0.115, StableHLO 1.16.2)"
};
absl::StatusOr<PluginIdentity> IdentifyPlugin(const std::string& path,
                                              const std::string& description);

struct Key {
  std::string id;  // hex: names the entry
  std::string program_digest, options_digest, devices_digest, plugin_digest;
  std::string program_name;  // for listings
  std::string plugin_description, devices_description;
};

// `compile_options`: a serialized xla CompileOptionsProto whose device assignment is in
// the plugin's own device ids, as handed to the plugin. INVALID_ARGUMENT if it does not
// parse.
absl::StatusOr<Key> MakeKey(absl::string_view format, absl::string_view program,
                            absl::string_view compile_options, const PluginIdentity& plugin,
                            absl::string_view program_name);

struct Hit {
  std::string executable;      // as the plugin serialized it
  double compile_seconds = 0;  // what compiling it took when it was stored
};

struct Counters {
  int64_t hits = 0, misses = 0, stores = 0, store_failures = 0, corrupt = 0, evictions = 0;
  int64_t bytes_read = 0, bytes_written = 0;
  double load_seconds = 0;           // reading and loading hits
  double compile_seconds_saved = 0;  // the stored compile times of hits, less loading
};

// One entry, as `switchyard cache ls` shows it.
struct EntryInfo {
  std::string path;
  std::string key, program_name, plugin_description, devices_description;
  int64_t bytes = 0;  // the whole file
  double compile_seconds = 0;
  absl::Time created, last_used;
};

class CompileCache {
 public:
  // Creates `directory` if needed. UNAVAILABLE if it cannot be created or read.
  // `max_bytes` caps the entries' total size (0: no cap). A directory it cannot write
  // still serves hits (`writable()` is false; stores are skipped).
  static absl::StatusOr<std::unique_ptr<CompileCache>> Open(const std::string& directory,
                                                            int64_t max_bytes);

  // The entry for `key`, or nullopt on a miss. A miss for a program with entries under
  // other keys is logged with the parts that differed.
  std::optional<Hit> Lookup(const Key& key);
  // Stores `executable` for `key` (then evicts beyond the cap); failures are logged and
  // counted, not returned: a cache that cannot store is only slower.
  void Store(const Key& key, absl::string_view executable, double compile_seconds);
  // A hit that the plugin then refused to load: counted, and the entry removed.
  void Reject(const Key& key, absl::string_view why);
  // Time spent loading a hit (reading it is counted by Lookup).
  void AddLoadSeconds(double seconds, double compile_seconds);

  bool writable() const { return writable_; }
  const std::string& directory() const { return directory_; }
  Counters counters() const;

 private:
  CompileCache(std::string directory, int64_t max_bytes, bool writable)
      : directory_(std::move(directory)), max_bytes_(max_bytes), writable_(writable) {}
  std::string PathOf(const Key& key) const;
  void ExplainMiss(const Key& key) const;

  const std::string directory_;
  const int64_t max_bytes_;
  const bool writable_;
  std::atomic<int64_t> hits_{0}, misses_{0}, stores_{0}, store_failures_{0}, corrupt_{0},
      evictions_{0}, bytes_read_{0}, bytes_written_{0};
  std::atomic<int64_t> load_micros_{0}, saved_micros_{0};
};

// Every entry in `directory`, oldest use first. Unreadable entries are listed with what
// could be read of them.
absl::StatusOr<std::vector<EntryInfo>> ListEntries(const std::string& directory);

// Removes entries, least recently used first, until the rest take at most `max_bytes`;
// also temporaries left by killed writers that are older than an hour. Returns the
// entries removed.
absl::StatusOr<std::vector<EntryInfo>> Prune(const std::string& directory, int64_t max_bytes);

}  // namespace switchyard::compile_cache
