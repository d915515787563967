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
#include "common/ordered_writer.h"
#include "common/thread_name.h"
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

WorkerConnection::WorkerConnection(int slice_index, int host_index, HostCallbackSink host_callbacks)
    : slice_index_(slice_index),
      host_index_(host_index),
      host_callbacks_(std::move(host_callbacks)) {
  absl::MutexLock lock(&mutex_);
  down_ = absl::DataLossError(absl::StrCat(Describe(), " has not joined the fleet yet"));
}

WorkerConnection::~WorkerConnection() { Close(); }

void WorkerConnection::Close() {
  {
    absl::MutexLock lock(&mutex_);
    closing_ = true;
    // Unblocks a write stuck on a worker that does not read, so the lock below comes.
    if (live_context_ != nullptr) live_context_->TryCancel();
  }
  std::vector<Reader> readers;
  std::shared_ptr<Writer> writer;
  {
    absl::MutexLock write_lock(&write_mutex_);
    if (stream_ != nullptr) context_->TryCancel();
    readers.swap(readers_);
    writer = std::move(writer_);
  }
  // Its write, if any (also a sender's claimed one), fails now that the stream is
  // cancelled; senders holding it find it closed.
  if (writer != nullptr) writer->Close();
  for (Reader& reader : readers) reader.thread.join();
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
    // The epoch's reader fails what waits on it (never here: callers may hold locks),
    // once the stream is cancelled; that also unblocks a stuck write.
    if (live_context_ != nullptr) live_context_->TryCancel();
    live_context_ = nullptr;
    pending_deletes_.clear();  // the worker frees them: their owner's lease runs out
    if (closing_) return;
  }
  SY_LOG(Warning) << "slice " << slice_index_ << " host " << host_index_ << " was lost: " << reason
                  << " (epoch " << epoch << " ended)";
}

absl::StatusOr<uint64_t> WorkerConnection::EnsureStreamLocked() {
  uint64_t epoch;
  std::shared_ptr<Worker::Stub> stub;
  std::string owner, boot;
  {
    absl::MutexLock lock(&mutex_);
    if (!up_) return down_;
    epoch = epoch_;
    if (stream_epoch_ == epoch && stream_ != nullptr) return epoch;
    stub = stub_;
    owner = absl::StrCat(owner_);
    boot = boot_id_;
  }
  // Readers of ended streams are joined here, so they do not pile up.
  for (auto it = readers_.begin(); it != readers_.end();) {
    if (it->finished->load()) {
      it->thread.join();
      it = readers_.erase(it);
    } else {
      ++it;
    }
  }
  // The previous epoch's writer: its stream was cancelled when the epoch ended (and is
  // now, to be sure), so a write still in progress fails at once.
  if (writer_ != nullptr) {
    writer_->Close(absl::ZeroDuration(), [context = context_] { context->TryCancel(); });
    writer_.reset();
  }
  context_ = std::make_shared<grpc::ClientContext>();
  stream_id_ = RandomNonZero();
  context_->AddMetadata(kOwnerMetadata, owner);
  context_->AddMetadata(kBootMetadata, boot);
  context_->AddMetadata(kStreamMetadata, absl::StrCat(stream_id_));
  stream_ = std::shared_ptr<Stream>(stub->Dispatch(context_.get()));
  stream_epoch_ = epoch;
  // Operations go out on a thread of the stream's own: a sender never waits on a worker
  // that is slow to read (and never holds the write lock while it does).
  writer_ = std::make_shared<Writer>(
      [this, stream = stream_, epoch](const DispatchRequest& op) {
        write_epoch_.store(epoch);
        write_started_ns_.store(absl::GetCurrentTimeNanos());
        const bool written = stream->Write(op);
        write_started_ns_.store(0);
        if (!written) MarkDown(epoch, "its operation stream failed");
        return written;
      },
      "sy-worker-out");
  {
    absl::MutexLock lock(&mutex_);
    if (epoch_ != epoch) {
      context_->TryCancel();  // it ended meanwhile; the reader below finds out
    } else {
      live_context_ = context_;
    }
  }
  auto finished = std::make_shared<std::atomic<bool>>(false);
  readers_.push_back(
      Reader{std::thread([this, context = context_, stream = stream_, epoch, finished] {
               NameThisThread("sy-worker-in");
               ReadLoop(context, stream, epoch);
               finished->store(true);
             }),
             finished});
  return epoch;
}

void WorkerConnection::WriteDeletesLocked(DispatchRequest* next) {
  std::vector<uint64_t> deletes;
  {
    absl::MutexLock lock(&mutex_);
    if (!up_) {
      pending_deletes_.clear();
      return;
    }
    deletes.swap(pending_deletes_);
  }
  if (deletes.empty()) return;
  if (next != nullptr) {  // the stream is open: the caller is about to write `next`
    next->mutable_deletes_before()->Add(deletes.begin(), deletes.end());
    return;
  }
  absl::StatusOr<uint64_t> epoch = EnsureStreamLocked();
  if (!epoch.ok()) return;
  DispatchRequest batch;
  batch.set_seq(next_seq_++);
  batch.mutable_delete_buffers()->mutable_buffer_ids()->Add(deletes.begin(), deletes.end());
  if (!WriteLocked(std::move(batch))) MarkDown(*epoch, "its operation stream failed");
}

bool WorkerConnection::WriteLocked(DispatchRequest op, Claims* claims) {
  if (writer_ == nullptr) return false;
  if (claims == nullptr) return writer_->Post(std::move(op));
  bool claimed = false;
  const bool posted = writer_->Post(std::move(op), &claimed);
  if (claimed) claims->push_back(writer_);
  return posted;
}

void WorkerConnection::WriteClaimed(const Claims& claims) {
  // A few messages each: a sender writes its own, not a queue that others keep filling.
  constexpr size_t kWritesHere = 4;
  for (const std::shared_ptr<Writer>& writer : claims) writer->WriteClaimed(kWritesHere);
}

void WorkerConnection::CheckStall(absl::Duration limit) {
  const int64_t started = write_started_ns_.load();
  if (started == 0 || absl::GetCurrentTimeNanos() - started < absl::ToInt64Nanoseconds(limit)) {
    return;
  }
  MarkDown(write_epoch_.load(), absl::StrCat("it has not taken an operation for ",
                                             absl::FormatDuration(limit), " (hung?)"));
}

void WorkerConnection::SendDeletes() {
  {
    absl::MutexLock lock(&mutex_);
    if (pending_deletes_.empty()) return;
  }
  absl::MutexLock write_lock(&write_mutex_);
  WriteDeletesLocked(nullptr);
}

absl::StatusOr<WorkerConnection::Ticket> WorkerConnection::Send(DispatchRequest op, Done done,
                                                                uint64_t expected_epoch,
                                                                bool write_here) {
  Claims claims;
  absl::StatusOr<Ticket> ticket;
  {
    absl::MutexLock write_lock(&write_mutex_);
    ticket =
        SendLocked(std::move(op), std::move(done), expected_epoch, write_here ? &claims : nullptr);
  }
  WriteClaimed(claims);
  return ticket;
}

absl::StatusOr<std::vector<WorkerConnection::Ticket>> WorkerConnection::SendTogether(
    std::vector<Part> parts, bool write_here) ABSL_NO_THREAD_SAFETY_ANALYSIS {
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
  for (size_t i : order) {
    absl::StatusOr<uint64_t> epoch = parts[i].worker->EnsureStreamLocked();
    if (!epoch.ok()) {
      down = epoch.status();
    } else if (parts[i].expected_epoch != 0 && *epoch != parts[i].expected_epoch) {
      down = parts[i].worker->CheckEpoch(parts[i].expected_epoch);
    }
    if (!down.ok()) break;
  }
  // A host whose epoch ends between the check above and its write gets nothing while
  // its peers get their parts; those then wait in a collective until the plugin gives
  // up. The host is lost either way, and so is the launch.
  std::vector<Ticket> tickets(parts.size());
  Claims claims;
  if (down.ok()) {
    for (size_t i = 0; i < parts.size(); ++i) {
      absl::StatusOr<Ticket> ticket =
          parts[i].worker->SendLocked(std::move(parts[i].op), std::move(parts[i].done),
                                      parts[i].expected_epoch, write_here ? &claims : nullptr);
      if (ticket.ok()) tickets[i] = *ticket;
    }
  }
  for (auto it = order.rbegin(); it != order.rend(); ++it) parts[*it].worker->write_mutex_.Unlock();
  WriteClaimed(claims);
  if (!down.ok()) return down;
  return tickets;
}

absl::StatusOr<WorkerConnection::Ticket> WorkerConnection::SendLocked(DispatchRequest op, Done done,
                                                                      uint64_t expected_epoch,
                                                                      Claims* claims) {
  absl::StatusOr<uint64_t> epoch = EnsureStreamLocked();
  if (!epoch.ok()) return epoch.status();
  if (expected_epoch != 0 && *epoch != expected_epoch) return CheckEpoch(expected_epoch);
  WriteDeletesLocked(&op);
  Ticket ticket{*epoch, stream_id_, next_seq_++};
  op.set_seq(ticket.seq);
  if (done != nullptr) {
    op.set_reply(true);
    absl::MutexLock lock(&mutex_);
    if (absl::Status current = CheckEpochLocked(ticket.epoch); !current.ok()) return current;
    waiting_[ticket.seq] = Waiter{ticket.epoch, std::move(done)};
  }
  // A failed write ends the epoch, whose reader then fails the waiter registered above;
  // what the operation was to make is lost with the epoch.
  if (!WriteLocked(std::move(op), claims)) MarkDown(ticket.epoch, "its operation stream failed");
  return ticket;
}

void WorkerConnection::ReadLoop(std::shared_ptr<grpc::ClientContext> context,
                                std::shared_ptr<Stream> stream, uint64_t epoch) {
  DispatchResponse response;
  while (stream->Read(&response)) {
    if (response.has_host_callback()) {
      if (host_callbacks_ != nullptr) host_callbacks_(response.host_callback(), this);
      continue;
    }
    absl::Status status(static_cast<absl::StatusCode>(response.code()), response.message());
    Done done;
    {
      absl::MutexLock lock(&mutex_);
      auto it = waiting_.find(response.seq());
      if (it != waiting_.end() && it->second.epoch == epoch) {
        done = std::move(it->second.done);
        waiting_.erase(it);
      }
    }
    if (done != nullptr) {
      done(status);
    } else if (!status.ok() && !absl::IsDataLoss(status)) {  // losses are logged where seen
      SY_LOG(Warning) << "operation on slice " << slice_index_ << " host " << host_index_
                      << " failed: " << status;
    }
  }
  // The stream ended: what it was to carry out will not be, and the epoch is over.
  absl::Status finished = FromGrpcStatus(stream->Finish());
  MarkDown(epoch, absl::StrCat("its operation stream ended (", finished.ToString(), ")"));
  std::vector<Done> orphans;
  absl::Status lost;
  {
    absl::MutexLock lock(&mutex_);
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      if (it->second.epoch == epoch) {
        orphans.push_back(std::move(it->second.done));
        it = waiting_.erase(it);
      } else {
        ++it;
      }
    }
    lost = CheckEpochLocked(epoch);
  }
  for (Done& done : orphans) done(lost);
}

void WorkerConnection::DeleteLater(uint64_t buffer_id, uint64_t epoch) {
  absl::MutexLock lock(&mutex_);
  if (up_ && epoch == epoch_) pending_deletes_.push_back(buffer_id);
}

void WorkerConnection::AwaitThen(const std::vector<uint64_t>& buffer_ids, Done done) {
  DispatchRequest op;
  op.mutable_await_buffers()->mutable_buffer_ids()->Add(buffer_ids.begin(), buffer_ids.end());
  // `done` is moved into the waiter only when the send goes ahead.
  auto shared = std::make_shared<Done>(std::move(done));
  absl::StatusOr<Ticket> sent =
      Send(std::move(op), [shared](absl::Status status) { (*shared)(std::move(status)); });
  if (!sent.ok()) (*shared)(sent.status());
}

absl::Status WorkerConnection::Flush(absl::Duration timeout) {
  struct Result {
    absl::Notification done;
    absl::Status status;
  };
  auto result = std::make_shared<Result>();
  AwaitThen({}, [result](absl::Status status) {
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

absl::StatusOr<WorkerConnection::Call> WorkerConnection::PrepareCall(grpc::ClientContext* context) {
  absl::MutexLock write_lock(&write_mutex_);
  absl::StatusOr<uint64_t> epoch = EnsureStreamLocked();
  if (!epoch.ok()) return epoch.status();
  absl::MutexLock lock(&mutex_);
  if (absl::Status current = CheckEpochLocked(*epoch); !current.ok()) return current;
  context->AddMetadata(kOwnerMetadata, absl::StrCat(owner_));
  context->AddMetadata(kBootMetadata, boot_id_);
  return Call{stub_, *epoch};
}

absl::Status WorkerConnection::CallFailed(uint64_t epoch, const absl::Status& status) {
  // Only the transport says the worker is gone: a DATA_LOSS answer is the worker's own
  // (it restarted, or a source it pulled from is lost) and reaches the caller as it is.
  if (absl::IsUnavailable(status)) MarkDown(epoch, status.message());
  absl::Status lost = CheckEpoch(epoch);
  return lost.ok() ? status : lost;
}

}  // namespace switchyard::proxy
