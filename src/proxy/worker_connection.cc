#include "proxy/worker_connection.h"

#include <algorithm>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/call_metadata.h"
#include "common/grpc_server.h"
#include "common/grpc_status.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "switchyard/rm.pb.h"

namespace switchyard::proxy {
namespace {

constexpr absl::Duration kProbeTimeout = absl::Seconds(1);

uint64_t RandomNonZero() {
  static absl::Mutex mutex(absl::kConstInit);
  static absl::BitGen* random = new absl::BitGen();
  absl::MutexLock lock(&mutex);
  return absl::Uniform<uint64_t>(*random, 1, UINT64_MAX);
}

}  // namespace

WorkerConnection::WorkerConnection(int slice_index, int host_index, HostCallbackSink host_callbacks,
                                   std::shared_ptr<CompletionPool> lane_pool)
    : slice_index_(slice_index),
      host_index_(host_index),
      host_callbacks_(std::move(host_callbacks)),
      lane_pool_(lane_pool != nullptr ? std::move(lane_pool)
                                      : std::make_shared<CompletionPool>(1, "sy-lanes")) {
  absl::MutexLock lock(&mutex_);
  down_ = absl::DataLossError(absl::StrCat(Describe(), " has not joined the fleet yet"));
}

WorkerConnection::~WorkerConnection() { Close(); }

void WorkerConnection::Close() {
  {
    absl::MutexLock lock(&mutex_);
    closing_ = true;
    for (const auto& [key, state] : live_lanes_) state->stream->Cancel();
  }
  std::vector<std::shared_ptr<LaneStream>> streams;
  {
    absl::MutexLock write_lock(&write_mutex_);
    lanes_.clear();
    streams.swap(streams_);
  }
  // Their ends fail what still waits (with UNAVAILABLE: closing); none runs after we go.
  for (const std::shared_ptr<LaneStream>& stream : streams) {
    stream->Cancel();
    stream->AwaitDone();
  }
}

std::string WorkerConnection::Describe() const {
  return absl::StrCat("slice ", slice_index_, " host ", host_index_,
                      address_.empty() ? "" : absl::StrCat(" (worker ", address_, ")"));
}

std::string WorkerConnection::address() const {
  absl::MutexLock lock(&mutex_);
  return address_;
}

bool WorkerConnection::BulkReachable() const {
  absl::MutexLock lock(&mutex_);
  return address_.empty() || bulk_unreachable_at_ != address_;
}

bool WorkerConnection::MarkBulkUnreachable() {
  absl::MutexLock lock(&mutex_);
  if (bulk_unreachable_at_ == address_) return false;
  bulk_unreachable_at_ = address_;
  return true;
}

bool WorkerConnection::PullsPuts() const {
  absl::MutexLock lock(&mutex_);
  return view_.protocol_version >= WORKER_PROTOCOL_PULLS_PUTS && view_.address == address_ &&
         puts_unreachable_at_ != address_;
}

bool WorkerConnection::TakesRmGangs() const {
  absl::MutexLock lock(&mutex_);
  return view_.protocol_version >= WORKER_PROTOCOL_RM_GANGS && view_.address == address_;
}

bool WorkerConnection::TakesStreamReads() const {
  absl::MutexLock lock(&mutex_);
  return view_.protocol_version >= WORKER_PROTOCOL_STREAM_READS && view_.address == address_;
}

bool WorkerConnection::TakesAssembleBatches() const {
  absl::MutexLock lock(&mutex_);
  return view_.protocol_version >= WORKER_PROTOCOL_ASSEMBLE_BATCHES && view_.address == address_;
}

bool WorkerConnection::MarkPutsUnreachable() {
  absl::MutexLock lock(&mutex_);
  if (puts_unreachable_at_ == address_) return false;
  puts_unreachable_at_ = address_;
  return true;
}

std::string WorkerConnection::boot_id() const {
  absl::MutexLock lock(&mutex_);
  return boot_id_;
}

bool WorkerConnection::up() const {
  absl::MutexLock lock(&mutex_);
  return up_;
}

absl::Status WorkerConnection::CheckEpoch(uint64_t epoch) const {
  absl::MutexLock lock(&mutex_);
  return CheckEpochLocked(epoch);
}

absl::Status WorkerConnection::CheckEpochLocked(uint64_t epoch) const {
  if (!up_) return down_;
  if (epoch == epoch_) return absl::OkStatus();
  if (epoch == ended_epoch_) return ended_;
  return absl::DataLossError(
      absl::StrCat("lost with ", Describe(), ", which failed or restarted since it was made"));
}

void WorkerConnection::BringUpLocked(const HostView& view) {
  if (view.address != address_ || stub_ == nullptr) {
    stub_ = std::shared_ptr<Worker::Stub>(Worker::NewStub(CreateChannel(view.address)));
  }
  address_ = view.address;
  boot_id_ = view.boot_id;
  owner_ = RandomNonZero();
  up_ = true;
  down_ = absl::OkStatus();
  SY_LOG(Info) << Describe() << " is up (epoch " << epoch_ << ")";
}

void WorkerConnection::Update(const HostView& view) {
  if (view.rejoining) return;  // the RM restarted and knows nothing yet
  // Sent as call metadata, which gRPC aborts on unless printable (the RM checks too).
  if (!IsMetadataValue(view.boot_id)) return;
  bool restarted = false;
  uint64_t epoch = 0;
  {
    absl::MutexLock lock(&mutex_);
    view_ = view;
    epoch = epoch_;
    if (up_) {
      if (view.healthy && view.boot_id == boot_id_ && view.address == address_) return;
      restarted = view.healthy;
    } else {
      // A new boot comes up at once; the boot that was lost only through a probe.
      if (view.healthy && (view.boot_id != lost_boot_ || lost_boot_.empty())) {
        BringUpLocked(view);
      }
      return;
    }
  }
  MarkDown(epoch, restarted ? "it restarted" : "the resource manager reports it down");
  if (restarted) {
    absl::MutexLock lock(&mutex_);
    if (!up_ && view_.boot_id == view.boot_id) BringUpLocked(view);
  }
}

void WorkerConnection::ProbeIfDown() {
  HostView view;
  std::shared_ptr<Worker::Stub> stub;
  {
    absl::MutexLock lock(&mutex_);
    if (up_ || !view_.healthy || view_.boot_id != lost_boot_) return;
    view = view_;
    // A fresh channel: the lost epoch's may lead to a server that is gone (gRPC shares
    // the connection underneath when there is one).
    stub = std::shared_ptr<Worker::Stub>(Worker::NewStub(CreateChannel(view.address)));
  }
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + kProbeTimeout));
  GetInfoResponse info;
  if (!stub->GetInfo(&context, GetInfoRequest(), &info).ok() || info.boot_id() != view.boot_id) {
    return;
  }
  absl::MutexLock lock(&mutex_);
  if (!up_ && view_.boot_id == view.boot_id && view_.address == view.address) {
    BringUpLocked(view);
  }
}

void WorkerConnection::MarkDown(uint64_t epoch, absl::string_view reason) {
  {
    absl::MutexLock lock(&mutex_);
    if (!up_ || epoch != epoch_) return;
    up_ = false;
    lost_boot_ = boot_id_;
    ++epoch_;
    down_ = closing_ ? absl::UnavailableError("the proxy is stopping")
                     : absl::DataLossError(absl::StrCat(Describe(), " is down: ", reason));
    ended_epoch_ = epoch;
    ended_ = closing_ ? down_
                      : absl::DataLossError(absl::StrCat("lost with ", Describe(), " when epoch ",
                                                         epoch, " ended: ", reason));
    // The epoch's streams fail what waits on it as they end (never here: callers may
    // hold locks), once cancelled; that also ends stuck writes.
    for (const auto& [key, state] : live_lanes_) state->stream->Cancel();
    live_lanes_.clear();
    pending_deletes_.clear();  // the worker frees them: their owner's lease runs out
    if (closing_) return;
  }
  SY_LOG(Warning) << "slice " << slice_index_ << " host " << host_index_ << " was lost: " << reason
                  << " (epoch " << epoch << " ended)";
}

absl::StatusOr<WorkerConnection::Lane*> WorkerConnection::EnsureLaneLocked(uint64_t key) {
  uint64_t epoch;
  bool lanes = false;
  std::shared_ptr<Worker::Stub> stub;
  std::string owner, boot;
  {
    absl::MutexLock lock(&mutex_);
    if (!up_) return down_;
    epoch = epoch_;
    lanes = view_.protocol_version >= WORKER_PROTOCOL_LANES;
    stub = stub_;
    owner = absl::StrCat(owner_);
    boot = boot_id_;
  }
  if (!lanes) key = 0;  // the worker reads one stream: everything goes on it, in order
  Lane& lane = lanes_[key];
  if (lane.epoch == epoch && lane.stream != nullptr) return &lane;
  // Streams that ended are let go of here, so they do not pile up.
  std::erase_if(streams_, [](const std::shared_ptr<LaneStream>& s) { return s->done(); });
  // The lane's stream of an earlier epoch was cancelled when the epoch ended (and is
  // now, to be sure).
  if (lane.stream != nullptr) lane.stream->Cancel();
  auto context = std::make_shared<grpc::ClientContext>();
  lane = Lane{};
  lane.key = key;
  lane.epoch = epoch;
  lane.stream_id = RandomNonZero();
  lane.numbers_gangs = lanes;
  context->AddMetadata(kOwnerMetadata, owner);
  context->AddMetadata(kBootMetadata, boot);
  context->AddMetadata(kStreamMetadata, absl::StrCat(lane.stream_id));
  auto closed = std::make_shared<std::atomic<bool>>(false);
  // Under the write lock, but it waits for nothing: the call is queued until the
  // channel connects (WorkerConnectionTest.OpeningLanesToAWorkerThatDoesNotAnswer...).
  // Operations go out as gRPC takes them: a sender never waits on a worker that is slow
  // to read. The stream's handlers hold no reference to the lane, only what they report.
  lane.stream = LaneStream::Start(
      stub.get(), std::move(context), lane_pool_->Pick(),
      [this, epoch](DispatchResponse& response) { Answered(response, epoch); },
      [this, epoch, stream_id = lane.stream_id, closed](absl::Status finished) {
        LaneEnded(finished, epoch, stream_id, closed->load());
      });
  lane.state = std::make_shared<LaneState>(LaneState{epoch, lane.stream, std::move(closed)});
  streams_.push_back(lane.stream);
  {
    absl::MutexLock lock(&mutex_);
    if (epoch_ != epoch) {
      lane.stream->Cancel();  // it ended meanwhile; the stream's end finds out
    } else {
      live_lanes_[key] = lane.state;
    }
  }
  return &lane;
}

bool WorkerConnection::LaneOpenLocked(uint64_t key, uint64_t epoch) const {
  auto it = lanes_.find(key);
  return it != lanes_.end() && it->second.epoch == epoch && it->second.stream != nullptr;
}

uint64_t WorkerConnection::OpenLaneOrAnyLocked(uint64_t lane, uint64_t epoch) const {
  if (LaneOpenLocked(lane, epoch)) return lane;
  for (const auto& [key, open] : lanes_) {
    if (LaneOpenLocked(key, epoch)) return key;
  }
  return 0;
}

uint64_t WorkerConnection::NextGangLocked(uint64_t epoch) {
  if (gang_epoch_ != epoch) {  // a new owner on the worker: its numbers start again
    gang_epoch_ = epoch;
    next_gang_ = 1;
  }
  return next_gang_++;
}

std::vector<uint64_t> WorkerConnection::TakeDeletesLocked(const Lane& lane) {
  std::vector<uint64_t> deletes;
  absl::MutexLock lock(&mutex_);
  if (!up_) {
    pending_deletes_.clear();
    return deletes;
  }
  for (auto it = pending_deletes_.begin(); it != pending_deletes_.end();) {
    // A lane not open has nothing of its own left to carry out (closed once drained, or
    // never opened: a put's buffer no launch used), so its deletions may go anywhere.
    const bool here = it->first == lane.key || !LaneOpenLocked(it->first, lane.epoch);
    if (here) {
      deletes.insert(deletes.end(), it->second.begin(), it->second.end());
      pending_deletes_.erase(it++);
    } else {
      ++it;
    }
  }
  return deletes;
}

bool WorkerConnection::WriteLocked(Lane& lane, DispatchRequest op, Claims* claims) {
  if (lane.stream == nullptr) return false;
  bool claimed = false;
  const bool posted = lane.stream->Post(std::move(op), &claimed);
  if (claimed) claims->push_back(lane.stream);
  return posted;
}

void WorkerConnection::StartClaimed(const Claims& claims) {
  for (const std::shared_ptr<LaneStream>& stream : claims) stream->StartClaimed();
}

void WorkerConnection::CheckStall(absl::Duration limit) {
  const int64_t now = absl::GetCurrentTimeNanos();
  std::vector<uint64_t> stalled;
  {
    absl::MutexLock lock(&mutex_);
    for (const auto& [key, state] : live_lanes_) {
      const int64_t started = state->stream->write_started_ns();
      if (started != 0 && now - started >= absl::ToInt64Nanoseconds(limit)) {
        stalled.push_back(state->epoch);
      }
    }
  }
  for (uint64_t epoch : stalled) {
    MarkDown(epoch, absl::StrCat("it has not taken an operation for ", absl::FormatDuration(limit),
                                 " (hung?)"));
  }
}

void WorkerConnection::SendDeletes() {
  // Cleared before the deletions are taken: one queued meanwhile sets it again.
  if (!deletes_waiting_.exchange(false)) return;
  std::vector<uint64_t> keys;
  {
    absl::MutexLock lock(&mutex_);
    for (const auto& [key, ids] : pending_deletes_) keys.push_back(key);
  }
  if (keys.empty()) return;
  Claims claims;
  {
    absl::MutexLock write_lock(&write_mutex_);
    for (uint64_t key : keys) {
      if (!SendDeletesLocked(key, &claims)) break;
    }
  }
  StartClaimed(claims);
}

bool WorkerConnection::SendDeletesLocked(uint64_t key, Claims* claims) {
  uint64_t epoch;
  {
    absl::MutexLock lock(&mutex_);
    if (!up_) return false;
    epoch = epoch_;
  }
  absl::StatusOr<Lane*> lane = EnsureLaneLocked(OpenLaneOrAnyLocked(key, epoch));
  if (!lane.ok()) return false;
  std::vector<uint64_t> deletes = TakeDeletesLocked(**lane);
  if (deletes.empty()) return true;
  DispatchRequest batch;
  batch.set_seq(next_seq_++);
  batch.mutable_delete_buffers()->mutable_buffer_ids()->Add(deletes.begin(), deletes.end());
  if (!WriteLocked(**lane, std::move(batch), claims))
    MarkDown(epoch, "its operation stream failed");
  return true;
}

absl::StatusOr<WorkerConnection::Ticket> WorkerConnection::Send(uint64_t lane, DispatchRequest op,
                                                                Done done,
                                                                uint64_t expected_epoch) {
  Claims claims;
  absl::StatusOr<Ticket> ticket;
  {
    absl::MutexLock write_lock(&write_mutex_);
    ticket = SendLocked(lane, std::move(op), std::move(done), expected_epoch, &claims);
  }
  StartClaimed(claims);
  return ticket;
}

void WorkerConnection::SendAfter(uint64_t lane, DispatchRequest op) {
  Claims claims;
  {
    absl::MutexLock write_lock(&write_mutex_);
    uint64_t epoch;
    {
      absl::MutexLock lock(&mutex_);
      if (!up_) return;
      epoch = epoch_;
    }
    (void)SendLocked(OpenLaneOrAnyLocked(lane, epoch), std::move(op), nullptr, 0, &claims);
  }
  StartClaimed(claims);
}

absl::StatusOr<std::vector<WorkerConnection::Ticket>> WorkerConnection::SendTogether(
    uint64_t lane, std::vector<Part> parts) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  // Write locks taken in host order, so two such steps never wait on each other.
  std::vector<size_t> order(parts.size());
  for (size_t i = 0; i < parts.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const WorkerConnection* x = parts[a].worker;
    const WorkerConnection* y = parts[b].worker;
    return std::pair(x->slice_index_, x->host_index_) < std::pair(y->slice_index_, y->host_index_);
  });
  for (size_t i : order) parts[i].worker->write_mutex_.Lock();
  absl::Status down;
  std::vector<Lane*> lanes(parts.size());
  for (size_t i : order) {
    absl::StatusOr<Lane*> opened = parts[i].worker->EnsureLaneLocked(lane);
    if (!opened.ok()) {
      down = opened.status();
    } else if (parts[i].expected_epoch != 0 && (*opened)->epoch != parts[i].expected_epoch) {
      down = parts[i].worker->CheckEpoch(parts[i].expected_epoch);
    } else {
      lanes[i] = *opened;
    }
    if (!down.ok()) break;
  }
  // Numbered once every part can go (a number taken and never sent would hold up the
  // host's later multi-host launches), while every host's write lock is held: the same
  // order on each.
  for (size_t i = 0; i < parts.size() && down.ok(); ++i) {
    // Numbered by the resource manager already (its order spans proxies).
    if (parts[i].op.has_execute() && parts[i].op.execute().gang_sequencer() != 0) continue;
    if (lanes[i]->numbers_gangs && parts[i].op.has_execute()) {
      parts[i].op.mutable_execute()->set_gang(parts[i].worker->NextGangLocked(lanes[i]->epoch));
    }
  }
  // A host whose epoch ends between the check above and its write gets nothing while
  // its peers get their parts; those then wait in a collective until the plugin gives
  // up. The host is lost either way, and so is the launch.
  std::vector<Ticket> tickets(parts.size());
  Claims claims;
  if (down.ok()) {
    for (size_t i = 0; i < parts.size(); ++i) {
      absl::StatusOr<Ticket> ticket = parts[i].worker->SendLocked(
          lane, std::move(parts[i].op), std::move(parts[i].done), parts[i].expected_epoch, &claims);
      if (ticket.ok()) tickets[i] = *ticket;
    }
  }
  for (auto it = order.rbegin(); it != order.rend(); ++it) parts[*it].worker->write_mutex_.Unlock();
  StartClaimed(claims);
  if (!down.ok()) return down;
  return tickets;
}

absl::StatusOr<WorkerConnection::Ticket> WorkerConnection::SendLocked(uint64_t key,
                                                                      DispatchRequest op, Done done,
                                                                      uint64_t expected_epoch,
                                                                      Claims* claims,
                                                                      ReadDone read) {
  SY_ASSIGN_OR_RETURN(Lane * lane, EnsureLaneLocked(key));
  if (expected_epoch != 0 && lane->epoch != expected_epoch) return CheckEpoch(expected_epoch);
  std::vector<uint64_t> deletes = TakeDeletesLocked(*lane);
  op.mutable_deletes_before()->Add(deletes.begin(), deletes.end());
  Ticket ticket{lane->epoch, lane->stream_id, next_seq_++, key};
  op.set_seq(ticket.seq);
  if (done != nullptr || read != nullptr) {
    op.set_reply(true);
    absl::MutexLock lock(&mutex_);
    if (absl::Status current = CheckEpochLocked(ticket.epoch); !current.ok()) return current;
    waiting_[ticket.seq] = Waiter{ticket.epoch, ticket.stream, std::move(done), std::move(read)};
  }
  // A failed write ends the epoch, whose streams' ends then fail the waiter registered
  // above; what the operation was to make is lost with the epoch.
  if (!WriteLocked(*lane, std::move(op), claims)) {
    MarkDown(ticket.epoch, "its operation stream failed");
  }
  return ticket;
}

void WorkerConnection::Answered(DispatchResponse& response, uint64_t epoch) {
  if (response.has_host_callback()) {
    if (host_callbacks_ != nullptr) host_callbacks_(response.host_callback(), this);
    return;
  }
  absl::Status status(static_cast<absl::StatusCode>(response.code()), response.message());
  Done done;
  ReadDone read;
  {
    absl::MutexLock lock(&mutex_);
    auto it = waiting_.find(response.seq());
    if (it != waiting_.end() && it->second.epoch == epoch) {
      done = std::move(it->second.done);
      read = std::move(it->second.read);
      waiting_.erase(it);
    }
  }
  if (read != nullptr) {
    if (status.ok()) {
      read(std::move(*response.mutable_data()));
    } else {
      read(status);
    }
  } else if (done != nullptr) {
    done(status);
  } else if (!status.ok() && !absl::IsDataLoss(status)) {  // losses are logged where seen
    SY_LOG(Warning) << "operation on slice " << slice_index_ << " host " << host_index_
                    << " failed: " << status;
  }
}

void WorkerConnection::LaneEnded(const absl::Status& finished, uint64_t epoch, uint64_t stream_id,
                                 bool closed) {
  // A lane closed here ends alone. Otherwise what the stream was to carry out will not
  // be, and the epoch is over.
  if (!closed) {
    MarkDown(epoch, absl::StrCat("its operation stream ended (", finished.ToString(), ")"));
  }
  std::vector<Done> orphans;
  absl::Status lost;
  {
    absl::MutexLock lock(&mutex_);
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      if (it->second.epoch == epoch && (!closed || it->second.stream == stream_id)) {
        orphans.push_back(std::move(it->second).TakeDone());
        it = waiting_.erase(it);
      } else {
        ++it;
      }
    }
    lost = CheckEpochLocked(epoch);
    if (closed && lost.ok()) lost = absl::CancelledError("its session's operation stream closed");
  }
  for (Done& done : orphans) done(lost);
}

WorkerConnection::Done WorkerConnection::Waiter::TakeDone() && {
  if (read == nullptr) return std::move(done);
  return [read = std::move(read)](absl::Status status) { read(std::move(status)); };
}

absl::Status WorkerConnection::ReadOnLane(const Ticket& made, uint64_t buffer_id, ReadDone done) {
  DispatchRequest op;
  op.mutable_read_buffer()->set_buffer_id(buffer_id);
  Claims claims;
  absl::Status sent;
  {
    absl::MutexLock write_lock(&write_mutex_);
    // On another stream the buffer might not be made yet when the read comes.
    auto it = lanes_.find(made.lane);
    if (it == lanes_.end() || it->second.epoch != made.epoch ||
        it->second.stream_id != made.stream) {
      return absl::FailedPreconditionError(
          absl::StrCat("buffer ", buffer_id, " was made on a stream no longer open"));
    }
    // Queued: the caller (a session answering its client) goes on.
    sent = SendLocked(made.lane, std::move(op), nullptr, made.epoch, &claims, std::move(done))
               .status();
  }
  StartClaimed(claims);
  return sent;
}

void WorkerConnection::DeleteLater(uint64_t buffer_id, const Ticket& made) {
  absl::MutexLock lock(&mutex_);
  if (up_ && made.epoch == epoch_) {
    pending_deletes_[made.lane].push_back(buffer_id);
    deletes_waiting_.store(true);
  }
}

void WorkerConnection::AwaitThen(uint64_t lane, const std::vector<uint64_t>& buffer_ids,
                                 Done done) {
  DispatchRequest op;
  op.mutable_await_buffers()->mutable_buffer_ids()->Add(buffer_ids.begin(), buffer_ids.end());
  // `done` is moved into the waiter only when the send goes ahead.
  auto shared = std::make_shared<Done>(std::move(done));
  absl::StatusOr<Ticket> sent =
      Send(lane, std::move(op), [shared](absl::Status status) { (*shared)(std::move(status)); });
  if (!sent.ok()) (*shared)(sent.status());
}

absl::Status WorkerConnection::Flush(uint64_t lane, absl::Duration timeout) {
  struct Result {
    absl::Notification done;
    absl::Status status;
  };
  auto result = std::make_shared<Result>();
  {
    absl::MutexLock write_lock(&write_mutex_);
    absl::MutexLock lock(&mutex_);
    lane = OpenLaneOrAnyLocked(lane, epoch_);
  }
  AwaitThen(lane, {}, [result](absl::Status status) {
    result->status = std::move(status);
    result->done.Notify();
  });
  if (!result->done.WaitForNotificationWithTimeout(timeout)) {
    return absl::DeadlineExceededError(absl::StrCat("slice ", slice_index_, " host ", host_index_,
                                                    " did not answer within ",
                                                    absl::FormatDuration(timeout)));
  }
  return result->status;
}

void WorkerConnection::CloseLane(uint64_t key, absl::Duration grace) {
  Lane lane;
  {
    absl::MutexLock write_lock(&write_mutex_);
    auto it = lanes_.find(key);
    if (it == lanes_.end()) return;
    lane = std::move(it->second);
    lanes_.erase(it);
    absl::MutexLock lock(&mutex_);
    auto live = live_lanes_.find(key);
    if (live != live_lanes_.end() && live->second == lane.state) live_lanes_.erase(live);
  }
  if (lane.stream == nullptr) return;
  lane.state->closed->store(true);
  // What is queued goes out first (the session's last deletions), then the half-close;
  // the worker carries everything out before it ends the stream.
  if (!lane.stream->AwaitIdle(grace)) lane.stream->Cancel();
  lane.stream->CloseWrites();
}

absl::StatusOr<WorkerConnection::Call> WorkerConnection::PrepareCall(grpc::ClientContext* context) {
  absl::MutexLock write_lock(&write_mutex_);
  uint64_t epoch;
  {
    absl::MutexLock lock(&mutex_);
    if (!up_) return down_;
    epoch = epoch_;
  }
  bool open = false;
  for (const auto& [key, lane] : lanes_) open = open || LaneOpenLocked(key, epoch);
  if (!open) {
    SY_ASSIGN_OR_RETURN(Lane * lane, EnsureLaneLocked(0));
    epoch = lane->epoch;
  }
  absl::MutexLock lock(&mutex_);
  if (absl::Status current = CheckEpochLocked(epoch); !current.ok()) return current;
  context->AddMetadata(kOwnerMetadata, absl::StrCat(owner_));
  context->AddMetadata(kBootMetadata, boot_id_);
  return Call{stub_, epoch};
}

absl::Status WorkerConnection::CallFailed(uint64_t epoch, const absl::Status& status) {
  // Only the transport says the worker is gone: a DATA_LOSS answer is the worker's own
  // (it restarted, or a source it pulled from is lost) and reaches the caller as it is.
  if (absl::IsUnavailable(status)) MarkDown(epoch, status.message());
  absl::Status lost = CheckEpoch(epoch);
  return lost.ok() ? status : lost;
}

}  // namespace switchyard::proxy
