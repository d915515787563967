#pragma once

// Compiles programs for this worker's devices and launches them. Thread-safe.

#include <atomic>
#include <cstdint>
#include <functional>
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
#include "worker/gang_order.h"
#include "worker/host_callbacks.h"
#include "worker/launch_gate.h"

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
        // The host's devices (CPU): the gate holds back what the CPU client would run
        // side by side or deadlock on. GPUs serve a device's launches in order.
        gate_(std::make_shared<Gate>(
            LaunchGate::Options{.host_devices = client->platform_name() == "cpu"})) {}

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

  // Of the resource manager's gang numbers `first`..`last` of `sequencer`, those that
  // will never come (Rm's GangVoids; all of them for a sequencer it does not give).
  using GangVoids = std::function<absl::StatusOr<std::vector<uint64_t>>(
      uint64_t sequencer, uint64_t first, uint64_t last)>;
  // A launch waiting for an RM number before its own asks `ask` every kGangGapAskMs.
  // Call before the first launch. Unset: it waits (up to kGangTurnMs).
  void AskGangVoids(GangVoids ask) { gang_voids_ = std::move(ask); }
  // The RM numbering of the latest numbered launch, and the number up to which all of
  // its numbers passed here (0, 0: none), for the RM to forget them.
  std::pair<uint64_t, uint64_t> GangPassed() const ABSL_LOCKS_EXCLUDED(gate_->mutex);
  // The RM (re)registered this worker: of its numbering `sequencer`, this host's launches
  // start at `first` (those before were its previous process's, or void).
  void StartGangs(uint64_t sequencer, uint64_t first) ABSL_LOCKS_EXCLUDED(gate_->mutex);

  // INVALID_ARGUMENT for bad options or devices that are not ours, and for
  // programs the plugin rejects; ALREADY_EXISTS for an executable id in use.
  // What `owner` makes here is freed by `DeleteOwned(owner)` (0: nobody in particular).
  absl::StatusOr<CompileResponse> Compile(const CompileRequest& request, uint64_t owner = 0)
      ABSL_LOCKS_EXCLUDED(mutex_);
  // Registers the outputs under the requested ids as soon as the launch is
  // enqueued; a failed launch shows up when they are read (or here, with `wait`).
  // A request that fails stores its error under the output ids. A program with host
  // callbacks sends its calls up `stream` (null: such a launch fails). A multi-host
  // launch numbered in its owner's order (ExecuteRequest.gang, GangOrder) first waits
  // for its turn, until `cancelled()` says so (checked every 100 ms; null: never).
  absl::Status Execute(const ExecuteRequest& request, uint64_t owner = 0,
                       std::shared_ptr<HostCallbacks::Stream> stream = nullptr,
                       const std::function<bool()>& cancelled = nullptr)
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
  // Compiles and cache loads finished, failed ones too: each let go of its working heap.
  int64_t compilations() const { return compilations_.load(); }
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
  struct FinishOnce;
  // A launch's inputs per device, in the layouts its program reads: held (with any
  // relaid-out copies) until the launch call returns.
  struct LaunchArguments {
    std::vector<std::shared_ptr<const StoredBuffer>> held;
    std::vector<std::unique_ptr<pjrt::Buffer>> relaid;
    std::vector<std::vector<const pjrt::Buffer*>> per_device;
  };
  // Checks the request against `executable` (argument and output lists, output ids not
  // in use) and gathers its inputs.
  absl::StatusOr<LaunchArguments> GatherArguments(
      const ExecuteRequest& request, const pjrt::Executable& executable,
      const std::vector<std::vector<int64_t>>& parameter_layouts) const;
  // Claims the memory of the launch's outputs under the worker's bound.
  absl::StatusOr<BufferStore::Reservation> ReserveOutputs(const ExecuteRequest& request,
                                                          const pjrt::Executable& executable) const;
  // Waits at the gate until the launch may be handed over; returns its ticket, started.
  uint64_t AwaitLaunchTurn(const ExecuteRequest& request, uint64_t owner,
                           const pjrt::Executable& executable, bool in_order)
      ABSL_LOCKS_EXCLUDED(gate_->mutex);
  // Has `finish` note when the last of the launch's inputs is computed.
  static void WatchInputs(const std::shared_ptr<FinishOnce>& finish,
                          const LaunchArguments& arguments);
  // Stores what the launch made under the request's output ids; the first error.
  absl::Status StoreOutputs(const ExecuteRequest& request, const pjrt::Executable& executable,
                            uint64_t owner, pjrt::Launch& launch);
  // Waits until the request's multi-host launch may go in its numbering (GangOrder):
  // FAILED_PRECONDITION if its number's turn went by (void), DEADLINE_EXCEEDED past
  // kGangTurnMs, CANCELLED once `cancelled()`.
  absl::Status AwaitGangTurn(uint64_t numbering, const ExecuteRequest& request,
                             const std::function<bool()>& cancelled);
  // Passes the numbers before `gang` that the RM says will never come.
  void PassGangVoids(uint64_t sequencer, uint64_t gang) ABSL_LOCKS_EXCLUDED(gate_->mutex);
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
  // Launches waiting for the devices and those handed to the plugin (see LaunchGate).
  // Shared with the completion callbacks, which run on plugin threads and may come
  // after the executor is gone. Launches past the gate's window wait in their operation
  // streams, where a cancelled session's launches can still be dropped (the plugin's
  // queue cannot be undone) and others' launches can go first.
  struct Gate {
    explicit Gate(LaunchGate::Options options) : launches(options) {}
    absl::Mutex mutex;
    LaunchGate launches ABSL_GUARDED_BY(mutex);
    GangOrder gangs ABSL_GUARDED_BY(mutex);
    uint64_t latest_sequencer ABSL_GUARDED_BY(mutex) = 0;    // the RM's, of the latest launch
    std::deque<RecentLaunch> recent ABSL_GUARDED_BY(mutex);  // newest first
  };
  // A launch handed to the plugin is done (all its devices) once this is destroyed,
  // if armed: its place is freed, its flow charged and the launch listed as recent.
  struct FinishOnce {
    ~FinishOnce();
    std::shared_ptr<Gate> gate;
    uint64_t ticket = 0;
    std::shared_ptr<const pjrt::Executable> executable;  // for its name
    std::string tenant;
    int64_t lane = 0;  // the trace row of its first device
    uint64_t session = 0;
    absl::Time handed_over = absl::InfinitePast();
    std::atomic<bool> armed{false};
    // When its last input was computed (Unix ns; 0: not asked, or ready at handover).
    std::atomic<int64_t> inputs_ready_ns{0};
  };

  absl::flat_hash_map<uint64_t, Loaded> executables_ ABSL_GUARDED_BY(mutex_);
  std::atomic<int64_t> executions_{0};
  std::atomic<int64_t> compilations_{0};
  std::string missing_kernels_hint_;
  GangVoids gang_voids_;
  const std::shared_ptr<Gate> gate_;
  using OwnedSession = std::pair<uint64_t, uint64_t>;  // owner, session
  std::deque<OwnedSession> cancelled_order_ ABSL_GUARDED_BY(mutex_);
  absl::flat_hash_set<OwnedSession> cancelled_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace switchyard::worker
