#include "proxy/fleet.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/grpc_server.h"
#include "common/grpc_status.h"
#include "common/limits.h"
#include "common/logging.h"
#include "absl/synchronization/notification.h"

namespace switchyard::proxy {
WorkerConnection::WorkerConnection(std::string address)
    : address_(std::move(address)), stub_(Worker::NewStub(CreateChannel(address_))) {}

WorkerConnection::~WorkerConnection() {
  std::vector<std::thread> readers;
  {
    absl::MutexLock lock(&write_mutex_);
    if (stream_ != nullptr) {
      stream_->WritesDone();
      context_->TryCancel();
    }
    readers.swap(readers_);
  }
  for (std::thread& reader : readers) reader.join();
}

void WorkerConnection::OpenLocked() {
  if (context_ != nullptr) context_->TryCancel();  // its reader fails what waits on it
  context_ = std::make_shared<grpc::ClientContext>();
  stream_ = std::shared_ptr<grpc::ClientReaderWriter<DispatchRequest, DispatchResponse>>(
      stub_->Dispatch(context_.get()));
  ++generation_;
  readers_.emplace_back([this, context = context_, stream = stream_, generation = generation_] {
    ReadLoop(context, stream, generation);
  });
}

void WorkerConnection::Fail(uint64_t seq, const absl::Status& status) {
  Done done;
  {
    absl::MutexLock lock(&mutex_);
    auto it = waiting_.find(seq);
    if (it == waiting_.end()) return;
    done = std::move(it->second.done);
    waiting_.erase(it);
  }
  if (done != nullptr) done(status);
}

void WorkerConnection::WriteDeletesLocked() {
  std::vector<uint64_t> deletes;
  {
    absl::MutexLock lock(&mutex_);
    deletes.swap(pending_deletes_);
  }
  if (deletes.empty()) return;
  if (stream_ == nullptr) OpenLocked();
  DispatchRequest batch;
  batch.set_seq(next_seq_++);
  batch.mutable_delete_buffers()->mutable_buffer_ids()->Add(deletes.begin(), deletes.end());
  if (!stream_->Write(batch)) OpenLocked();  // the buffers of a lost worker are gone anyway
}

void WorkerConnection::SendDeletes() {
  {
    absl::MutexLock lock(&mutex_);
    if (pending_deletes_.empty()) return;
  }
  absl::MutexLock write_lock(&write_mutex_);
  WriteDeletesLocked();
}

void WorkerConnection::Send(DispatchRequest op, Done done) {
  absl::MutexLock write_lock(&write_mutex_);
  SendLocked(std::move(op), std::move(done));
}

void WorkerConnection::SendTogether(
    std::vector<std::pair<WorkerConnection*, DispatchRequest>> ops) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  // Write locks taken in address order, so two such steps never wait on each other.
  std::sort(ops.begin(), ops.end(),
            [](const auto& a, const auto& b) { return a.first->address_ < b.first->address_; });
  for (auto& [worker, op] : ops) worker->write_mutex_.Lock();
  for (auto& [worker, op] : ops) worker->SendLocked(std::move(op), nullptr);
  for (auto it = ops.rbegin(); it != ops.rend(); ++it) it->first->write_mutex_.Unlock();
}

void WorkerConnection::SendLocked(DispatchRequest op, Done done) {
  WriteDeletesLocked();
  if (stream_ == nullptr) OpenLocked();
  const uint64_t seq = next_seq_++;
  op.set_seq(seq);
  const bool reply = done != nullptr;
  if (reply) {
    op.set_reply(true);
    absl::MutexLock lock(&mutex_);
    waiting_[seq] = Waiter{generation_, std::move(done)};
  }
  if (stream_->Write(op)) return;
  // The worker went away (or restarted): one new stream, one more try.
  OpenLocked();
  if (reply) {
    absl::MutexLock lock(&mutex_);
    auto it = waiting_.find(seq);
    // The old stream's reader may already have failed it, as lost with that stream.
    if (it == waiting_.end()) return;
    it->second.generation = generation_;
  }
  if (stream_->Write(op)) return;
  const absl::Status lost = absl::UnavailableError(absl::StrCat("worker ", address_, " is unreachable"));
  if (reply) {
    Fail(seq, lost);
  } else {
    SY_LOG(Warning) << lost.message() << "; an operation was dropped";
  }
}

void WorkerConnection::ReadLoop(
    std::shared_ptr<grpc::ClientContext> context,
    std::shared_ptr<grpc::ClientReaderWriter<DispatchRequest, DispatchResponse>> stream,
    uint64_t generation) {
  DispatchResponse response;
  while (stream->Read(&response)) {
    absl::Status status(static_cast<absl::StatusCode>(response.code()), response.message());
    Done done;
    {
      absl::MutexLock lock(&mutex_);
      auto it = waiting_.find(response.seq());
      if (it != waiting_.end()) {
        done = std::move(it->second.done);
        waiting_.erase(it);
      }
    }
    if (done != nullptr) {
      done(status);
    } else if (!status.ok()) {
      SY_LOG(Warning) << "operation on worker " << address_ << " failed: " << status;
    }
  }
  // This stream ended: whatever still waits on it will not be answered.
  std::vector<Done> orphans;
  {
    absl::MutexLock lock(&mutex_);
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      if (it->second.generation == generation) {
        orphans.push_back(std::move(it->second.done));
        it = waiting_.erase(it);
      } else {
        ++it;
      }
    }
  }
  const absl::Status lost =
      absl::UnavailableError(absl::StrCat("lost the operation stream to worker ", address_));
  for (Done& done : orphans) done(lost);
}

void WorkerConnection::DeleteLater(uint64_t buffer_id) {
  absl::MutexLock lock(&mutex_);
  pending_deletes_.push_back(buffer_id);
}

absl::Status WorkerConnection::Await(const std::vector<uint64_t>& buffer_ids) {
  struct Result {
    absl::Notification done;
    absl::Status status;
  };
  auto result = std::make_shared<Result>();
  AwaitThen(buffer_ids, [result](absl::Status status) {
    result->status = std::move(status);
    result->done.Notify();
  });
  result->done.WaitForNotification();
  return result->status;
}

void WorkerConnection::AwaitThen(const std::vector<uint64_t>& buffer_ids, Done done) {
  DispatchRequest op;
  op.mutable_await_buffers()->mutable_buffer_ids()->Add(buffer_ids.begin(), buffer_ids.end());
  Send(std::move(op), std::move(done));
}

Fleet::Fleet(std::string rm_address)
    : rm_address_(std::move(rm_address)), rm_(ResourceManager::NewStub(CreateChannel(rm_address_))) {
  delete_flusher_ = std::thread([this] {
    while (!stop_.WaitForNotificationWithTimeout(absl::Milliseconds(limits::kDeleteFlushPeriodMs))) {
      std::vector<WorkerConnection*> connections;
      {
        absl::MutexLock lock(&mutex_);
        for (auto& [address, connection] : connections_) connections.push_back(connection.get());
      }
      for (WorkerConnection* connection : connections) connection->SendDeletes();
    }
  });
}

int32_t Fleet::NextLaunchId() {
  return static_cast<int32_t>(launches_.fetch_add(1) % 0x7fffffffu) + 1;
}

Fleet::~Fleet() {
  stop_.Notify();
  delete_flusher_.join();
}

absl::Status Fleet::Refresh() {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  switchyard::Fleet fleet;
  absl::Status status = FromGrpcStatus(rm_->GetFleet(&context, GetFleetRequest(), &fleet));
  if (!status.ok()) {
    return absl::UnavailableError(absl::StrCat("cannot reach the resource manager at ",
                                               rm_address_, ": ", status.message()));
  }
  std::map<int64_t, DeviceEntry> devices;
  for (const SliceStatus& slice : fleet.slices()) {
    for (const HostStatus& host : slice.hosts()) {
      if (!host.healthy()) continue;
      for (const DeviceInfo& device : host.devices()) {
        devices[device.global_id()] = DeviceEntry{device, host.address(), host.plugin()};
      }
    }
  }
  if (devices.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("no healthy worker is registered with the resource manager at ", rm_address_));
  }
  absl::MutexLock lock(&mutex_);
  devices_ = std::move(devices);
  return absl::OkStatus();
}

std::vector<DeviceEntry> Fleet::Devices() const {
  absl::MutexLock lock(&mutex_);
  std::vector<DeviceEntry> out;
  for (const auto& [id, entry] : devices_) out.push_back(entry);
  return out;
}

WorkerConnection* Fleet::Connection(const std::string& address) {
  absl::MutexLock lock(&mutex_);
  auto& connection = connections_[address];
  if (connection == nullptr) connection = std::make_unique<WorkerConnection>(address);
  return connection.get();
}

}  // namespace switchyard::proxy
