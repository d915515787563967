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
// Lanes. Operations go on lanes: each lane is a `Worker.Dispatch` stream of its own
// (a session's operations go on the lane keyed by its id), so one session's queue of
// launches waiting for the devices never holds up another session's operations, and
// the worker divides its devices between them by their shares. On a lane, launches,
// transfers and deletions are written in the order they are issued and run on the
// worker in that order, without a round trip each. Multi-host launches are numbered
// across lanes (ExecuteRequest.gang), so every host starts them in one order: by the
// resource manager, across proxies, where every host takes its numbers; else here. A
// worker that does not take lanes (WORKER_PROTOCOL_LANES) gets every lane's operations
// on one stream, as before.
// Thread-safe.

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/completion_pool.h"
#include "proxy/lane_stream.h"
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
  // A read's answer: the buffer's bytes, or why not.
  using ReadDone = std::function<void(absl::StatusOr<std::string>)>;
  // Where an operation went: what it makes exists on the worker once stream `stream`
  // has carried out `seq`, and is lost once epoch `epoch` has ended. What it makes is
  // used and deleted on lane `lane` (a put's ticket names only the epoch and the lane).
  struct Ticket {
    uint64_t epoch = 0;
    uint64_t stream = 0;
    uint64_t seq = 0;
    uint64_t lane = 0;
  };
  // A unary call's stub, with the call's metadata set, and the epoch it belongs to.
  struct Call {
    std::shared_ptr<Worker::Stub> stub;
    uint64_t epoch = 0;
  };

  // Receives the worker's host callback calls, on a lane pool thread (so it must
  // not block).
  using HostCallbackSink = std::function<void(const HostCallbackCall&, WorkerConnection*)>;

  // `lane_pool` drives the lanes' streams (shared by a fleet's connections); null: one
  // of the connection's own, with one thread.
  WorkerConnection(int slice_index, int host_index, HostCallbackSink host_callbacks = nullptr,
                   std::shared_ptr<CompletionPool> lane_pool = nullptr);
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
  // Whether the worker orders multi-host launches by the RM's numbers
  // (WORKER_PROTOCOL_RM_GANGS): if every host of a launch does, the RM numbers it.
  bool TakesRmGangs() const ABSL_LOCKS_EXCLUDED(mutex_);
  // Whether the worker takes several transfers in one operation
  // (WORKER_PROTOCOL_ASSEMBLE_BATCHES: DispatchRequest.assemble_buffers).
  bool TakesAssembleBatches() const ABSL_LOCKS_EXCLUDED(mutex_);
  // Whether the worker reads small buffers over a lane (WORKER_PROTOCOL_STREAM_READS:
  // DispatchRequest.read_buffer).
  bool TakesStreamReads() const ABSL_LOCKS_EXCLUDED(mutex_);
  // Ends the epoch now (a caller saw the worker fail). No-op if `epoch` already ended.
  // Runs no callbacks (callers may hold locks): the epoch's streams fail what waits on
  // it as they end, once cancelled.
  void MarkDown(uint64_t epoch, absl::string_view reason) ABSL_LOCKS_EXCLUDED(mutex_);
  // Stops: cancels the streams and waits for their ends, which fail what still waits
  // with UNAVAILABLE. The connection stays valid (and down) until destroyed.
  void Close() ABSL_LOCKS_EXCLUDED(write_mutex_, mutex_);

  // Sends `op` on `lane` (opened if it is not); never blocks on the worker. `done`, if
  // given, runs (on a lane pool thread, or here) once the worker has carried it out,
  // with its status, or with DATA_LOSS if the worker is lost first.
  // DATA_LOSS at once (and `done` not called) while the connection is down, or when it
  // is no longer in `expected_epoch` (0: any), the epoch of the buffers `op` names.
  absl::StatusOr<Ticket> Send(uint64_t lane, DispatchRequest op, Done done = nullptr,
                              uint64_t expected_epoch = 0)
      ABSL_LOCKS_EXCLUDED(write_mutex_, mutex_);
  // Sends `op`, which needs no answer, after everything sent on `lane`: on it while it is
  // open, else on any open lane (a closed lane has carried everything out), so that a
  // deletion coming after a session ended opens no lane for it.
  void SendAfter(uint64_t lane, DispatchRequest op) ABSL_LOCKS_EXCLUDED(write_mutex_, mutex_);
  // Sends one operation to each of several workers, on `lane` of each, as one step: a
  // launch's parts (ExecuteRequest) get their numbers in each worker's order of
  // multi-host launches here, so every host starts them in the same order relative to
  // the others, whatever lane carries them. DATA_LOSS, sending nothing, if one is down
  // or out of its expected epoch.
  struct Part {
    WorkerConnection* worker;
    DispatchRequest op;
    uint64_t expected_epoch = 0;
    Done done = nullptr;  // as Send's
  };
  static absl::StatusOr<std::vector<Ticket>> SendTogether(uint64_t lane, std::vector<Part> parts);
  // Deletes a buffer made by `made`, after every operation sent on its lane before this
  // call (any lane once its own is closed). Never blocks (destructors call it, also on
  // lane pool threads): it goes out with the lane's next operation. Buffers of an ended
  // epoch are the worker's to free (their owner's lease runs out): nothing is sent.
  void DeleteLater(uint64_t buffer_id, const Ticket& made) ABSL_LOCKS_EXCLUDED(mutex_);
  // Sends the deletions waiting for the next operation, if any.
  void SendDeletes() ABSL_LOCKS_EXCLUDED(write_mutex_, mutex_);
  // A write blocked for `limit` (the worker stopped reading its stream while it still
  // heartbeats: hung) ends the epoch, which unblocks it. Called by the fleet.
  void CheckStall(absl::Duration limit) ABSL_LOCKS_EXCLUDED(mutex_);
  // `done` runs once the buffers are computed (their error, if any), ordered after
  // everything sent on `lane` before; DATA_LOSS if the worker is lost first.
  void AwaitThen(uint64_t lane, const std::vector<uint64_t>& buffer_ids, Done done);
  // Reads buffer `buffer_id` (at most limits::kStreamReadMaxBytes) on the lane that made
  // it, after the operation `made`: `done` gets its bytes once it is computed, on a
  // lane pool thread, or its error; DATA_LOSS if the worker is lost first. FAILED_PRECONDITION
  // (and `done` not called) when that lane is no longer the one open: read it another way.
  absl::Status ReadOnLane(const Ticket& made, uint64_t buffer_id, ReadDone done)
      ABSL_LOCKS_EXCLUDED(write_mutex_, mutex_);
  // Waits until everything sent on `lane` so far has been carried out (and the
  // deletions waiting for it sent), or the worker is lost, or `timeout` passes. A lane
  // not open has nothing to carry out: the deletions go on another.
  absl::Status Flush(uint64_t lane, absl::Duration timeout);
  // Closes `lane` once what was sent on it has gone out (at most `grace`; then it is
  // cancelled). Deletions of buffers it made go on another lane from then on. Blocks
  // for the writes (a session's own thread, as it ends).
  void CloseLane(uint64_t lane, absl::Duration grace) ABSL_LOCKS_EXCLUDED(write_mutex_, mutex_);

  // For a unary call: the stub, and the call's metadata (owner, boot) on `context`.
  // Opens a lane if none is open, so that what the call makes is held by the owner's
  // lease. DATA_LOSS while down.
  absl::StatusOr<Call> PrepareCall(grpc::ClientContext* context)
      ABSL_LOCKS_EXCLUDED(write_mutex_, mutex_);
  // A unary call of `epoch` failed with `status`. If that means the worker is lost
  // (UNAVAILABLE: it cannot be reached), ends the epoch. Returns what to report: the
  // epoch's DATA_LOSS once it has ended, `status` otherwise.
  absl::Status CallFailed(uint64_t epoch, const absl::Status& status) ABSL_LOCKS_EXCLUDED(mutex_);

 private:
  struct Waiter {
    uint64_t epoch;
    uint64_t stream;  // the lane's stream that carries it
    Done done;
    ReadDone read;  // instead of `done`, for a read
    // Whichever is set, as a Done (for an answer that carries no bytes).
    Done TakeDone() &&;
  };
  // What the connection keeps of a lane's stream to watch or end it without the write
  // lock.
  struct LaneState {
    uint64_t epoch = 0;
    std::shared_ptr<LaneStream> stream;
    std::shared_ptr<std::atomic<bool>> closed;  // closed here: its end is no loss
  };
  // A lane's stream in one epoch.
  struct Lane {
    uint64_t key = 0;
    uint64_t epoch = 0;
    uint64_t stream_id = 0;
    bool numbers_gangs = false;  // the worker orders multi-host launches by their number
    std::shared_ptr<LaneState> state;
    std::shared_ptr<LaneStream> stream;
  };

  // Streams whose write a sender claimed, to start once it has let go of the locks.
  using Claims = std::vector<std::shared_ptr<LaneStream>>;
  static void StartClaimed(const Claims& claims);

  // `read`: a read's answer, instead of `done`.
  absl::StatusOr<Ticket> SendLocked(uint64_t lane, DispatchRequest op, Done done,
                                    uint64_t expected_epoch, Claims* claims,
                                    ReadDone read = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mutex_) ABSL_LOCKS_EXCLUDED(mutex_);
  // The lane's stream in the current epoch, opened if it is not (a worker that does not
  // take lanes: the one stream, lane 0). DATA_LOSS while down.
  absl::StatusOr<Lane*> EnsureLaneLocked(uint64_t lane) ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mutex_)
      ABSL_LOCKS_EXCLUDED(mutex_);
  // Whether `lane` has a stream in the current epoch.
  bool LaneOpenLocked(uint64_t lane, uint64_t epoch) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mutex_);
  // `lane` if it is open in `epoch`, else another that is (0 if none is), for what
  // needs no order after `lane`'s operations (it has none left to carry out).
  uint64_t OpenLaneOrAnyLocked(uint64_t lane, uint64_t epoch) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mutex_);
  // The next number of a multi-host launch in `epoch`.
  uint64_t NextGangLocked(uint64_t epoch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mutex_);
  // Sends the deletions waiting for lane `key` (on another open lane if it is not);
  // false once the connection is down.
  bool SendDeletesLocked(uint64_t key, Claims* claims) ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mutex_)
      ABSL_LOCKS_EXCLUDED(mutex_);
  // Takes the deletions that may go on `lane`: its own, and those of lanes not open.
  std::vector<uint64_t> TakeDeletesLocked(const Lane& lane)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mutex_) ABSL_LOCKS_EXCLUDED(mutex_);
  // Queues `op` on the lane's stream (never blocks), its write started by the caller
  // (`claims`) once unlocked; false once the stream failed.
  static bool WriteLocked(Lane& lane, DispatchRequest op, Claims* claims);
  void BringUpLocked(const HostView& view) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // One answer on a lane of `epoch`: settles what waited on it.
  void Answered(DispatchResponse& response, uint64_t epoch) ABSL_LOCKS_EXCLUDED(mutex_);
  // A lane's stream ended: the epoch with it unless the lane was closed here; fails
  // what still waited on it.
  void LaneEnded(const absl::Status& finished, uint64_t epoch, uint64_t stream_id, bool closed)
      ABSL_LOCKS_EXCLUDED(mutex_);
  std::string Describe() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  absl::Status CheckEpochLocked(uint64_t epoch) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  const int slice_index_;
  const int host_index_;
  const HostCallbackSink host_callbacks_;
  const std::shared_ptr<CompletionPool> lane_pool_;

  // Held while an operation gets its sequence number and joins its lane's queue, so
  // operations go out in that order (sequence numbers rise across lanes). Never held
  // across the start of a write (a sender starts it after letting go), never taken by
  // stream completions nor to end an epoch.
  absl::Mutex write_mutex_ ABSL_ACQUIRED_BEFORE(mutex_);
  uint64_t next_seq_ ABSL_GUARDED_BY(write_mutex_) = 1;
  std::map<uint64_t, Lane> lanes_ ABSL_GUARDED_BY(write_mutex_);  // stable addresses
  // Every stream started, until its end has run (Close waits for them).
  std::vector<std::shared_ptr<LaneStream>> streams_ ABSL_GUARDED_BY(write_mutex_);
  uint64_t gang_epoch_ ABSL_GUARDED_BY(write_mutex_) = 0;
  uint64_t next_gang_ ABSL_GUARDED_BY(write_mutex_) = 1;

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
  // Why the last epoch ended, kept after a new one begins: what waited on the old epoch
  // often fails only after the worker is back (its streams end asynchronously).
  uint64_t ended_epoch_ ABSL_GUARDED_BY(mutex_) = 0;
  absl::Status ended_ ABSL_GUARDED_BY(mutex_);
  // The current epoch's lanes, by key, to cancel and watch without the write lock.
  absl::flat_hash_map<uint64_t, std::shared_ptr<LaneState>> live_lanes_ ABSL_GUARDED_BY(mutex_);
  std::map<uint64_t, Waiter> waiting_ ABSL_GUARDED_BY(mutex_);  // by seq
  bool closing_ ABSL_GUARDED_BY(mutex_) = false;                // the proxy is stopping: no news
  // Deletions waiting for their lane's next operation, by lane.
  absl::flat_hash_map<uint64_t, std::vector<uint64_t>> pending_deletes_ ABSL_GUARDED_BY(mutex_);
  // Set when one is queued, so the fleet's periodic SendDeletes looks at a thousand idle
  // connections for the price of a load each.
  std::atomic<bool> deletes_waiting_{false};
};

}  // namespace switchyard::proxy
