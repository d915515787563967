#pragma once

// The proxy's connection to one host of the fleet, (slice, host): where its worker
// is, whether it is up, and the ordered operation stream (`Worker.Dispatch`) to it.
//
// Epochs. Everything the proxy makes on a worker belongs to the connection's epoch at
// the time. When the worker is lost (its stream breaks, a call cannot reach it, the
// RM reports it dead or restarted) the epoch ends: what waits on it fails with
// DATA_LOSS naming the slice and host, and everything made in it is lost for good,
// also if the same process turns out to be alive. The connection comes up again, in a
// new epoch, when the RM lists a worker for the host (a new boot at once; the same
// boot once a probe has reached it). Each epoch has its own owner id on the worker,
// so the worker frees an ended epoch's objects by itself (their lease runs out).
//
// Launches, transfers and deletions are written to the stream in the order they are
// issued and run on the worker in that order, without a round trip each.
// Thread-safe.

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/ordered_writer.h"
#include "switchyard/worker.grpc.pb.h"

namespace switchyard::proxy {

// What the resource manager says about a host.
struct HostView {
  std::string address;
  std::string boot_id;
  bool healthy = false;
  bool rejoining = false;         // the RM restarted and has not heard from it yet: no news
  uint32_t protocol_version = 0;  // a WorkerProtocol: what it may be sent
};

class WorkerConnection {
 public:
  using Done = std::function<void(absl::Status)>;
  // Where an operation went: what it makes exists on the worker once stream `stream`
  // has carried out `seq`, and is lost once epoch `epoch` has ended.
  struct Ticket {
    uint64_t epoch = 0;
    uint64_t stream = 0;
    uint64_t seq = 0;
  };
  // A unary call's stub, with the call's metadata set, and the epoch it belongs to.
  struct Call {
    std::shared_ptr<Worker::Stub> stub;
    uint64_t epoch = 0;
  };

  // Receives the worker's host callback calls, on the stream's reader thread (so it
  // must not block).
  using HostCallbackSink = std::function<void(const HostCallbackCall&, WorkerConnection*)>;

  WorkerConnection(int slice_index, int host_index, HostCallbackSink host_callbacks = nullptr);
  ~WorkerConnection();  // Close()
  WorkerConnection(const WorkerConnection&) = delete;
  WorkerConnection& operator=(const WorkerConnection&) = delete;

  int slice_index() const { return slice_index_; }
  int host_index() const { return host_index_; }
  std::string address() const ABSL_LOCKS_EXCLUDED(mutex_);
  std::string boot_id() const ABSL_LOCKS_EXCLUDED(mutex_);
  bool up() const ABSL_LOCKS_EXCLUDED(mutex_);
  // OK if the worker is up in `epoch`; otherwise the DATA_LOSS to report for what was
  // made in it (epoch 0: in no epoch).
  absl::Status CheckEpoch(uint64_t epoch) const ABSL_LOCKS_EXCLUDED(mutex_);

  // The RM's view of the host: brings the connection up or ends its epoch.
  void Update(const HostView& view) ABSL_LOCKS_EXCLUDED(write_mutex_, mutex_);
  // When down while the RM lists the host healthy under the boot that was lost, asks the
  // worker (GetInfo, short deadline) and comes up if it answers with that boot: the
  // stream broke but the process lives. Blocks for the probe; called by the fleet.
  void ProbeIfDown() ABSL_LOCKS_EXCLUDED(write_mutex_, mutex_);
  // Whether this worker's buffers may come on its data plane (common/bulk_server.h):
  // yes until a read found the plane out of reach from here (another host's Unix
  // socket, a firewall), for as long as the worker keeps its address.
  bool BulkReachable() const ABSL_LOCKS_EXCLUDED(mutex_);
  // The plane was out of reach; true the first time for this address (to log once).
  bool MarkBulkUnreachable() ABSL_LOCKS_EXCLUDED(mutex_);
  // Whether puts may offer their bytes for this worker to pull from the proxy's data
  // plane: it says it can (WORKER_PROTOCOL_PULLS_PUTS), and has not found that plane out
  // of its reach while it keeps its address.
  bool PullsPuts() const ABSL_LOCKS_EXCLUDED(mutex_);
  // The worker could not reach the proxy's plane; true the first time (to log once).
  bool MarkPutsUnreachable() ABSL_LOCKS_EXCLUDED(mutex_);
  // Ends the epoch now (a caller saw the worker fail). No-op if `epoch` already ended.
  // Runs no callbacks (callers may hold locks): the epoch's reader thread fails what
  // waits on it, once its stream is cancelled.
  void MarkDown(uint64_t epoch, absl::string_view reason) ABSL_LOCKS_EXCLUDED(mutex_);
  // Stops: cancels the stream and joins its readers, which fail what still waits with
  // UNAVAILABLE. The connection stays valid (and down) until destroyed.
  void Close() ABSL_LOCKS_EXCLUDED(write_mutex_, mutex_);

  // Sends `op`; `done`, if given, runs (on a reader thread or here) once the worker has
  // carried it out, with its status, or with DATA_LOSS if the worker is lost first.
  // DATA_LOSS at once (and `done` not called) while the connection is down, or when it
  // is no longer in `expected_epoch` (0: any), the epoch of the buffers `op` names.
  // `write_here`: the caller's thread may block writing (a session's own request
  // thread, never one shared between sessions): when the stream is idle it writes the
  // operation itself, one thread handoff fewer.
  absl::StatusOr<Ticket> Send(DispatchRequest op, Done done = nullptr, uint64_t expected_epoch = 0,
                              bool write_here = false) ABSL_LOCKS_EXCLUDED(write_mutex_, mutex_);
  // Sends one operation to each of several workers as one step: no other operation to
  // any of them goes in between (a launch spanning hosts must reach every host in the
  // same order relative to everything else). DATA_LOSS, sending nothing, if one is down
  // or out of its expected epoch.
  struct Part {
    WorkerConnection* worker;
    DispatchRequest op;
    uint64_t expected_epoch = 0;
    Done done = nullptr;  // as Send's
  };
  static absl::StatusOr<std::vector<Ticket>> SendTogether(std::vector<Part> parts,
                                                          bool write_here = false);
  // Deletes a buffer made in `epoch`, after every operation sent before this call.
  // Never blocks (destructors call it, also on reader threads): it goes out with the
  // next operation. Buffers of an ended epoch are the worker's to free (their owner's
  // lease runs out), so nothing is sent for them.
  void DeleteLater(uint64_t buffer_id, uint64_t epoch) ABSL_LOCKS_EXCLUDED(mutex_);
  // Sends the deletions waiting for the next operation, if any.
  void SendDeletes() ABSL_LOCKS_EXCLUDED(write_mutex_, mutex_);
  // A write blocked for `limit` (the worker stopped reading its stream while it still
  // heartbeats: hung) ends the epoch, which unblocks it. Called by the fleet.
  void CheckStall(absl::Duration limit) ABSL_LOCKS_EXCLUDED(mutex_);
  // `done` runs once the buffers are computed (their error, if any), ordered after
  // everything sent before; DATA_LOSS if the worker is lost first.
  void AwaitThen(const std::vector<uint64_t>& buffer_ids, Done done);
  // Waits until everything sent so far has been carried out, or the worker is lost,
  // or `timeout` passes.
  absl::Status Flush(absl::Duration timeout);

  // For a unary call: the stub, and the call's metadata (owner, boot) on `context`.
  // Opens the operation stream if none is open, so that what the call makes is held by
  // the owner's lease. DATA_LOSS while down.
  absl::StatusOr<Call> PrepareCall(grpc::ClientContext* context)
      ABSL_LOCKS_EXCLUDED(write_mutex_, mutex_);
  // A unary call of `epoch` failed with `status`. If that means the worker is lost
  // (UNAVAILABLE: it cannot be reached), ends the epoch. Returns what to report: the
  // epoch's DATA_LOSS once it has ended, `status` otherwise.
  absl::Status CallFailed(uint64_t epoch, const absl::Status& status) ABSL_LOCKS_EXCLUDED(mutex_);

 private:
  struct Waiter {
    uint64_t epoch;
    Done done;
  };
  struct Reader {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> finished;
  };
  using Stream = grpc::ClientReaderWriter<DispatchRequest, DispatchResponse>;
  using Writer = OrderedWriter<DispatchRequest>;
  // Writers whose writing a sender claimed, to write on once it has let go of the locks.
  using Claims = std::vector<std::shared_ptr<Writer>>;
  static void WriteClaimed(const Claims& claims);

  // `claims` null: the writer's thread writes.
  absl::StatusOr<Ticket> SendLocked(DispatchRequest op, Done done, uint64_t expected_epoch,
                                    Claims* claims) ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mutex_)
      ABSL_LOCKS_EXCLUDED(mutex_);
  // Opens the stream of the current epoch if it is not open. DATA_LOSS while down.
  absl::StatusOr<uint64_t> EnsureStreamLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mutex_)
      ABSL_LOCKS_EXCLUDED(mutex_);
  // The deletions waiting for the next operation go with `next` (null: on their own).
  void WriteDeletesLocked(DispatchRequest* next) ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mutex_)
      ABSL_LOCKS_EXCLUDED(mutex_);
  // Queues `op` for the stream's writer (never blocks), or for the caller to write
  // (`claims`); false once the stream failed.
  bool WriteLocked(DispatchRequest op, Claims* claims = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mutex_);
  void BringUpLocked(const HostView& view) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void ReadLoop(std::shared_ptr<grpc::ClientContext> context, std::shared_ptr<Stream> stream,
                uint64_t epoch);
  std::string Describe() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  absl::Status CheckEpochLocked(uint64_t epoch) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  const int slice_index_;
  const int host_index_;
  const HostCallbackSink host_callbacks_;

  // Held while an operation gets its sequence number and joins the stream's queue, so
  // operations go out in that order. Never held across a write (the stream's writer
  // thread writes, or a sender that claimed the writing, after letting go of it), never
  // taken by readers nor to end an epoch.
  absl::Mutex write_mutex_ ABSL_ACQUIRED_BEFORE(mutex_);
  uint64_t next_seq_ ABSL_GUARDED_BY(write_mutex_) = 1;
  uint64_t stream_epoch_ ABSL_GUARDED_BY(write_mutex_) = 0;  // the epoch `stream_` serves
  uint64_t stream_id_ ABSL_GUARDED_BY(write_mutex_) = 0;
  std::shared_ptr<grpc::ClientContext> context_ ABSL_GUARDED_BY(write_mutex_);
  std::shared_ptr<Stream> stream_ ABSL_GUARDED_BY(write_mutex_);
  std::vector<Reader> readers_ ABSL_GUARDED_BY(write_mutex_);
  // Writes `stream_`'s operations in order; its write is the one CheckStall watches.
  std::shared_ptr<Writer> writer_ ABSL_GUARDED_BY(write_mutex_);
  std::atomic<int64_t> write_started_ns_{0};  // 0: not in a write
  std::atomic<uint64_t> write_epoch_{0};

  mutable absl::Mutex mutex_;
  HostView view_ ABSL_GUARDED_BY(mutex_);  // the RM's latest
  std::string address_ ABSL_GUARDED_BY(mutex_);
  std::string boot_id_ ABSL_GUARDED_BY(mutex_);
  std::string bulk_unreachable_at_ ABSL_GUARDED_BY(mutex_);  // an address; empty: none
  std::string puts_unreachable_at_ ABSL_GUARDED_BY(mutex_);  // likewise
  std::shared_ptr<Worker::Stub> stub_ ABSL_GUARDED_BY(mutex_);
  bool up_ ABSL_GUARDED_BY(mutex_) = false;
  uint64_t epoch_ ABSL_GUARDED_BY(mutex_) = 1;
  uint64_t owner_ ABSL_GUARDED_BY(mutex_) = 0;     // this epoch's owner id on the worker
  std::string lost_boot_ ABSL_GUARDED_BY(mutex_);  // the boot whose epoch ended last
  absl::Status down_ ABSL_GUARDED_BY(mutex_);      // why the connection is down
  // The stream of the current epoch, to cancel without the write lock.
  std::shared_ptr<grpc::ClientContext> live_context_ ABSL_GUARDED_BY(mutex_);
  std::map<uint64_t, Waiter> waiting_ ABSL_GUARDED_BY(mutex_);
  bool closing_ ABSL_GUARDED_BY(mutex_) = false;  // the proxy is stopping: no news
  std::vector<uint64_t> pending_deletes_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace switchyard::proxy
