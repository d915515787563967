#pragma once

// Compiles programs for this worker's devices and launches them. Thread-safe.

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include <deque>
#include <map>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "compile_cache/compile_cache.h"
#include "pjrt/client.h"
#include "pjrt/executable.h"
#include "switchyard/worker.pb.h"
#include "worker/buffer_store.h"
#include "worker/device_map.h"
#include "worker/fair_share.h"
#include "worker/host_callbacks.h"

namespace switchyard::worker {

class Executor {
 public:
  // `callbacks` (may be null: programs with host callbacks are refused) must outlive
  // the executor.
  Executor(const pjrt::Client* client, const DeviceMap* devices, BufferStore* buffers,
           HostCallbacks* callbacks = nullptr)
      : client_(client),
        devices_(devices),
        buffers_(buffers),
        callbacks_(callbacks),
        host_devices_(client->platform_name() == "cpu") {}

  // Compiles through `cache` (which must outlive the executor) from now on: a program
  // compiled before, by this plugin build for the same devices, is loaded instead.
  // Call before the first compile.
  void UseCompileCache(compile_cache::CompileCache* cache, compile_cache::PluginIdentity plugin) {
    cache_ = cache;
    plugin_ = std::move(plugin);
  }

  // A compile that fails for want of a custom-call handler (jaxlib's kernels) ends its
  // message with `hint`: how to give this worker the kernels. Call before the first compile.
  void ExplainMissingKernels(std::string hint) { missing_kernels_hint_ = std::move(hint); }

  // INVALID_ARGUMENT for bad options or devices that are not ours, and for
  // programs the plugin rejects; ALREADY_EXISTS for an executable id in use.
  // What `owner` makes here is freed by `DeleteOwned(owner)` (0: nobody in particular).
  absl::StatusOr<CompileResponse> Compile(const CompileRequest& request, uint64_t owner = 0)
      ABSL_LOCKS_EXCLUDED(mutex_);
  // Registers the outputs under the requested ids as soon as the launch is
  // enqueued; a failed launch shows up when they are read (or here, with `wait`).
  // A request that fails stores its error under the output ids. A program with host
  // callbacks sends its calls up `stream` (null: such a launch fails).
  absl::Status Execute(const ExecuteRequest& request, uint64_t owner = 0,
                       std::shared_ptr<HostCallbacks::Stream> stream = nullptr)
      ABSL_LOCKS_EXCLUDED(mutex_);
  std::vector<uint64_t> Delete(const std::vector<uint64_t>& ids) ABSL_LOCKS_EXCLUDED(mutex_);
  // Worker.DescribeProgram.
  absl::StatusOr<DescribeProgramResponse> Describe(uint64_t executable_id) const
      ABSL_LOCKS_EXCLUDED(mutex_);
  // Launches of `owner`'s `session` that have not started are dropped from now on: their
  // outputs get CANCELLED. Only the owner's: a session id alone cancels nothing.
  void CancelSession(uint64_t owner, uint64_t session) ABSL_LOCKS_EXCLUDED(mutex_);
  // Deletes the executables `owner` compiled; returns how many.
  int64_t DeleteOwned(uint64_t owner) ABSL_LOCKS_EXCLUDED(mutex_);

  int64_t size() const ABSL_LOCKS_EXCLUDED(mutex_);
  int64_t executions() const { return executions_.load(); }
  // Adds what the finished launches took to `stats`: device seconds by tenant, busy
  // seconds by device, and the latest launches.
  void AddStats(WorkerStats* stats) const;

 private:
  // `buffer` in the device layout of dimension order `minor_to_major` (empty: the
  // default), on its device; blocks until `buffer` is computed.
  absl::StatusOr<std::unique_ptr<pjrt::Buffer>> Relayout(
      const pjrt::Buffer& buffer, absl::Span<const int64_t> minor_to_major) const;
  absl::Status Launch(const ExecuteRequest& request, uint64_t owner,
                      std::shared_ptr<HostCallbacks::Stream> stream);
  // Rewrites the device assignment from global ids to the plugin's ids, and takes out
  // the client's host-callback key (empty: none).
  absl::StatusOr<std::string> LocalCompileOptions(const CompileRequest& request,
                                                  std::string* callback_key) const;
  // The plugin's executable for `program`: from the compilation cache when it has one,
  // else compiled (and then stored there).
  absl::StatusOr<std::unique_ptr<pjrt::Executable>> CompileOrLoad(const std::string& program,
                                                                  const std::string& format,
                                                                  const std::string& options);

  const pjrt::Client* client_;
  const DeviceMap* devices_;
  BufferStore* buffers_;
  HostCallbacks* const callbacks_;
  compile_cache::CompileCache* cache_ = nullptr;
  compile_cache::PluginIdentity plugin_;
  mutable absl::Mutex mutex_;
  struct Loaded {
    std::shared_ptr<const pjrt::Executable> executable;
    uint64_t owner = 0;
    std::string callback_key;  // the client serves its host callbacks under this key
    // Per parameter, the device layout's dimension order the program reads (empty: the
    // plugin did not say; as for every array it makes, major-to-minor).
    std::vector<std::vector<int64_t>> parameter_layouts;
  };
  // Launches waiting for the devices, in their fair order (see FairShare), and those
  // handed to the plugin. Shared with the completion callbacks, which run on plugin
  // threads and may come after the executor is gone.
  struct Gate {
    absl::Mutex mutex;
    FairShare fair ABSL_GUARDED_BY(mutex);
    // Handed to the plugin and not finished. At most kLaunchWindow, and while flows
    // compete, past two about kLaunchQueueMs of estimated device time
    // (FairShare::queued): the rest wait
    // in their operation streams, where a cancelled session's launches can still be
    // dropped (the plugin's queue cannot be undone) and others' launches can go first.
    int64_t in_flight ABSL_GUARDED_BY(mutex) = 0;
    // Of those, the launches that may be held back while flows compete (see Launch).
    int64_t plain_in_flight ABSL_GUARDED_BY(mutex) = 0;
    // The window filled: nothing more goes until half of it is done, so a queue of
    // dependent launches costs a waiting thread one wakeup per half window.
    bool full ABSL_GUARDED_BY(mutex) = false;
    bool starting ABSL_GUARDED_BY(mutex) = false;  // one launch is handed over at a time
    bool multi_device_running ABSL_GUARDED_BY(mutex) = false;
    std::deque<RecentLaunch> recent ABSL_GUARDED_BY(mutex);  // newest first
  };
  // A launch handed to the plugin is done (all its devices) once this is destroyed,
  // if armed: its place is freed, its flow charged and the launch listed as recent.
  struct FinishOnce {
    ~FinishOnce();
    std::shared_ptr<Gate> gate;
    uint64_t ticket = 0;
    bool plain = false;
    bool multi_device = false;
    std::shared_ptr<const pjrt::Executable> executable;  // for its name
    std::string tenant;
    int64_t lane = 0;  // the trace row of its first device
    uint64_t session = 0;
    absl::Time handed_over = absl::InfinitePast();
    std::atomic<bool> armed{false};
  };

  absl::flat_hash_map<uint64_t, Loaded> executables_ ABSL_GUARDED_BY(mutex_);
  std::atomic<int64_t> executions_{0};
  // The XLA CPU client runs a multi-device launch's device parts on a small shared
  // thread pool; with several such launches in flight, parts of different launches can
  // hold every thread while waiting in a collective for a part that has no thread left
  // (a rendezvous deadlock). So on CPU a multi-device launch starts once the previous
  // one is done. GPUs run collectives on device streams and need no such wait.
  // The CPU client also runs independent launches side by side on the host's cores,
  // so while flows compete, few at a time (kHostLaunchesCompeting) keeps the order of
  // admission close to the order of service (GPUs serve a device's launches in order
  // anyway).
  const bool host_devices_;
  std::string missing_kernels_hint_;
  const std::shared_ptr<Gate> gate_ = std::make_shared<Gate>();
  using OwnedSession = std::pair<uint64_t, uint64_t>;  // owner, session
  std::deque<OwnedSession> cancelled_order_ ABSL_GUARDED_BY(mutex_);
  absl::flat_hash_set<OwnedSession> cancelled_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace switchyard::worker
