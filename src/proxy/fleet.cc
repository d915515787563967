#include "proxy/fleet.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/grpc_server.h"
#include "common/grpc_status.h"
#include "common/logging.h"

namespace switchyard::proxy {
WorkerConnection::WorkerConnection(std::string address)
    : address_(std::move(address)),
      stub_(Worker::NewStub(CreateChannel(address_))),
      thread_([this] { Loop(); }) {}

WorkerConnection::~WorkerConnection() {
  {
    absl::MutexLock lock(&mutex_);
    stop_ = true;
  }
  thread_.join();
}

void WorkerConnection::Enqueue(std::function<void()> call) {
  absl::MutexLock lock(&mutex_);
  queue_.emplace_back(std::move(call));
}

void WorkerConnection::DeleteLater(uint64_t buffer_id) {
  absl::MutexLock lock(&mutex_);
  if (queue_.empty() || !std::holds_alternative<std::vector<uint64_t>>(queue_.back())) {
    queue_.emplace_back(std::vector<uint64_t>());
  }
  std::get<std::vector<uint64_t>>(queue_.back()).push_back(buffer_id);
}

void WorkerConnection::Flush() {
  absl::MutexLock lock(&mutex_);
  auto drained = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    return queue_.empty() && !busy_;
  };
  mutex_.Await(absl::Condition(&drained));
}

void WorkerConnection::DeleteBuffers(const std::vector<uint64_t>& ids) {
  DeleteBuffersRequest request;
  request.mutable_buffer_ids()->Add(ids.begin(), ids.end());
  DeleteBuffersResponse response;
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
  grpc::Status status = stub_->DeleteBuffers(&context, request, &response);
  if (!status.ok()) {
    // A worker that is gone has freed its buffers with its process.
    SY_LOG(Warning) << "deleting " << ids.size() << " buffers on " << address_
                    << " failed: " << status.error_message();
  }
}

void WorkerConnection::Loop() {
  while (true) {
    Item item;
    {
      absl::MutexLock lock(&mutex_);
      busy_ = false;
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
        return stop_ || !queue_.empty();
      };
      mutex_.Await(absl::Condition(&ready));
      if (queue_.empty()) return;  // stopping, and everything has run
      item = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
    }
    if (auto* call = std::get_if<std::function<void()>>(&item)) {
      (*call)();
    } else {
      DeleteBuffers(std::get<std::vector<uint64_t>>(item));
    }
  }
}

Fleet::Fleet(std::string rm_address)
    : rm_address_(std::move(rm_address)), rm_(ResourceManager::NewStub(CreateChannel(rm_address_))) {}

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

absl::StatusOr<DeviceEntry> Fleet::Device(int64_t id) const {
  absl::MutexLock lock(&mutex_);
  auto it = devices_.find(id);
  if (it == devices_.end()) return absl::NotFoundError(absl::StrCat("unknown device ", id));
  return it->second;
}

WorkerConnection* Fleet::Connection(const std::string& address) {
  absl::MutexLock lock(&mutex_);
  auto& connection = connections_[address];
  if (connection == nullptr) connection = std::make_unique<WorkerConnection>(address);
  return connection.get();
}

}  // namespace switchyard::proxy
