#include "support/fake_worker.h"

#include <unistd.h>

#include <chrono>
#include <cstring>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/call_metadata.h"
#include "common/grpc_status.h"
#include "grpcpp/client_context.h"

namespace switchyard::test_support {
namespace {

// How long a read waits for a buffer another operation is still to make.
constexpr absl::Duration kWaitForBuffer = absl::Seconds(10);
constexpr size_t kChunkBytes = 1 << 20;

// The fakes of this process by address, so that a copy pulls from its peer directly.
absl::Mutex registry_mutex(absl::kConstInit);
std::map<std::string, FakeWorker*>& Registry() ABSL_EXCLUSIVE_LOCKS_REQUIRED(registry_mutex) {
  static auto* registry = new std::map<std::string, FakeWorker*>();
  return *registry;
}

std::string NewBootId() {
  static std::atomic<uint64_t> next{1};
  return absl::StrCat("fake-", getpid(), "-", next.fetch_add(1));
}

uint64_t MetadataNumber(const grpc::ServerContext& context, const char* key) {
  auto it = context.client_metadata().find(key);
  if (it == context.client_metadata().end()) return 0;
  uint64_t value = 0;
  if (!absl::SimpleAtoi(absl::string_view(it->second.data(), it->second.size()), &value)) return 0;
  return value;
}

// Erases each of `ids` from `table`, answering those it did not hold as not found (both
// deletions answer so).
template <typename Table, typename Ids, typename Response>
void EraseEach(Table& table, const Ids& ids, Response* response) {
  for (uint64_t id : ids) {
    if (table.erase(id) == 0) response->add_not_found(id);
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<FakeWorker>> FakeWorker::Start(const Options& options) {
  std::unique_ptr<FakeWorker> worker(new FakeWorker(options));
  absl::StatusOr<StartedServer> server = StartGrpcServer(kInProcessHost, 0, {worker.get()});
  if (!server.ok()) return server.status();
  worker->server_ = *std::move(server);
  worker->address_ = worker->server_.address;
  {
    absl::MutexLock lock(&registry_mutex);
    Registry()[worker->address_] = worker.get();
  }
  worker->rm_ = ResourceManager::NewStub(CreateChannel(options.rm_address));
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  absl::Status registered = worker->Register();
  while (!registered.ok() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
    registered = worker->Register();
  }
  if (!registered.ok()) return registered;
  worker->heartbeats_ = std::thread([w = worker.get()] { w->HeartbeatLoop(); });
  return worker;
}

FakeWorker::FakeWorker(const Options& options) : options_(options), boot_id_(NewBootId()) {}

FakeWorker::~FakeWorker() {
  {
    // First: a peer's copy waiting for one of our buffers (under the registry's lock,
    // which keeps us alive meanwhile) gives up now.
    absl::MutexLock lock(&mutex_);
    crashed_ = true;
    CancelStreamsLocked();
  }
  {
    absl::MutexLock lock(&registry_mutex);
    Registry().erase(address_);
  }
  stop_.Notify();
  if (heartbeats_.joinable()) heartbeats_.join();
  if (server_.server != nullptr) {
    server_.Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    server_.server->Wait();
  }
}

std::string FakeWorker::boot_id() const {
  absl::MutexLock lock(&mutex_);
  return boot_id_;
}

int64_t FakeWorker::buffers() const {
  absl::MutexLock lock(&mutex_);
  return static_cast<int64_t>(buffers_.size());
}

void FakeWorker::Crash() {
  absl::MutexLock lock(&mutex_);
  crashed_ = true;
  CancelStreamsLocked();
}

void FakeWorker::Restart() {
  {
    absl::MutexLock lock(&mutex_);
    CancelStreamsLocked();
    boot_id_ = NewBootId();
    crashed_ = false;
    reading_ = true;
    incarnation_ = 0;  // the heartbeat loop registers it again
    buffers_.clear();
    executables_.clear();
    progress_.clear();
    ended_streams_.clear();
  }
  (void)Register();
}

void FakeWorker::StopReading() {
  absl::MutexLock lock(&mutex_);
  reading_ = false;
}

void FakeWorker::ResumeReading() {
  absl::MutexLock lock(&mutex_);
  reading_ = true;
}

void FakeWorker::CancelStreamsLocked() {
  for (grpc::ServerContext* context : streams_) context->TryCancel();
}

absl::Status FakeWorker::CheckCall(const grpc::ServerContext& context) const {
  absl::MutexLock lock(&mutex_);
  if (crashed_) return absl::UnavailableError("the fake worker has crashed");
  auto boot = context.client_metadata().find(kBootMetadata);
  if (boot != context.client_metadata().end() &&
      absl::string_view(boot->second.data(), boot->second.size()) != boot_id_) {
    return absl::DataLossError("the fake worker has restarted since");
  }
  return absl::OkStatus();
}

absl::Status FakeWorker::Register() {
  RegisterWorkerRequest request;
  {
    absl::MutexLock lock(&mutex_);
    if (crashed_) return absl::UnavailableError("crashed");
    request.set_boot_id(boot_id_);
  }
  request.set_protocol_version(options_.protocol_version);
  request.set_address(address_);
  request.set_slice_index(options_.slice_index);
  request.set_host_index(0);
  request.mutable_plugin()->set_platform_name("cpu");
  request.mutable_plugin()->set_path("fake");
  request.mutable_plugin()->set_num_nodes(1);
  request.set_hostname("fake");
  request.set_pid(getpid());
  for (int ordinal = 0; ordinal < options_.devices; ++ordinal) {
    DeviceInfo* device = request.add_devices();
    device->set_local_ordinal(ordinal);
    device->set_local_hardware_id(ordinal);
    device->set_plugin_id(ordinal);
    device->set_kind("cpu");
    device->set_default_memory_kind("device");
    MemoryInfo* memory = device->add_memories();
    memory->set_local_id(ordinal);
    memory->set_kind("device");
  }
  RegisterWorkerResponse response;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  grpc::Status status = rm_->RegisterWorker(&context, request, &response);
  if (!status.ok()) return FromGrpcStatus(status);
  absl::MutexLock lock(&mutex_);
  if (request.boot_id() != boot_id_) return absl::AbortedError("restarted meanwhile");
  devices_.assign(response.devices().begin(), response.devices().end());
  incarnation_ = response.incarnation();
  if (response.heartbeat_period_ms() > 0) {
    heartbeat_period_ = absl::Milliseconds(response.heartbeat_period_ms());
  }
  return absl::OkStatus();
}

void FakeWorker::HeartbeatLoop() {
  while (true) {
    absl::Duration period;
    uint64_t incarnation;
    bool crashed;
    {
      absl::MutexLock lock(&mutex_);
      period = heartbeat_period_;
      incarnation = incarnation_;
      crashed = crashed_;
    }
    if (stop_.WaitForNotificationWithTimeout(period)) return;
    if (crashed) continue;
    if (incarnation == 0) {
      (void)Register();
      continue;
    }
    HeartbeatRequest request;
    request.set_incarnation(incarnation);
    HeartbeatResponse response;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(1));
    grpc::Status status = rm_->Heartbeat(&context, request, &response);
    if (status.error_code() == grpc::StatusCode::NOT_FOUND) {
      absl::MutexLock lock(&mutex_);
      if (incarnation_ == incarnation) incarnation_ = 0;  // the RM forgot us: register again
    }
  }
}

bool FakeWorker::OwnsDevice(int64_t global_id) const {
  for (const DeviceInfo& device : devices_) {
    if (device.global_id() == global_id) return true;
  }
  return false;
}

absl::StatusOr<FakeWorker::Buffer> FakeWorker::Find(uint64_t id, absl::Duration wait) const {
  absl::MutexLock lock(&mutex_);
  auto made = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    return crashed_ || buffers_.contains(id);
  };
  mutex_.AwaitWithTimeout(absl::Condition(&made), wait);
  if (crashed_) return absl::UnavailableError("the fake worker has crashed");
  auto it = buffers_.find(id);
  if (it == buffers_.end()) return absl::NotFoundError(absl::StrCat("no buffer ", id));
  if (!it->second.status.ok()) return it->second.status;
  return it->second;
}

absl::StatusOr<FakeWorker::Buffer> FakeWorker::Source(const BufferPiece& piece) {
  if (!piece.source_start().empty() || !piece.size().empty() || !piece.dest_start().empty()) {
    return absl::UnimplementedError("the fake worker copies whole buffers only");
  }
  if (piece.source_address().empty() || piece.source_address() == address_) {
    return Find(piece.source_buffer_id(), kWaitForBuffer);
  }
  // The registry's lock keeps the peer alive while it is asked; the peer's end wakes
  // the wait (~FakeWorker).
  absl::MutexLock lock(&registry_mutex);
  auto peer = Registry().find(piece.source_address());
  if (peer == Registry().end()) {
    return absl::UnavailableError(absl::StrCat("no worker at ", piece.source_address()));
  }
  // Made by an operation of the peer's that may still be on its way.
  return peer->second->Find(piece.source_buffer_id(), kWaitForBuffer);
}

grpc::Status FakeWorker::GetInfo(grpc::ServerContext* context, const GetInfoRequest*,
                                 GetInfoResponse* response) {
  if (absl::Status ok = CheckCall(*context); !ok.ok()) return ToGrpcStatus(ok);
  absl::MutexLock lock(&mutex_);
  response->set_address(address_);
  response->set_slice_index(options_.slice_index);
  response->mutable_plugin()->set_platform_name("cpu");
  for (const DeviceInfo& device : devices_) *response->add_devices() = device;
  response->set_registered(!devices_.empty());
  response->set_boot_id(boot_id_);
  return grpc::Status::OK;
}

grpc::Status FakeWorker::PutBuffer(grpc::ServerContext* context,
                                   grpc::ServerReader<PutBufferChunk>* reader,
                                   PutBufferResponse* response) {
  if (absl::Status ok = CheckCall(*context); !ok.ok()) return ToGrpcStatus(ok);
  PutBufferChunk chunk;
  if (!reader->Read(&chunk) || !chunk.has_header()) {
    return ToGrpcStatus(absl::InvalidArgumentError("a put starts with its header"));
  }
  if (chunk.has_offer()) {
    // This worker has no data plane to pull on: the bytes come inline.
    response->set_unreachable(true);
    return grpc::Status::OK;
  }
  Buffer buffer;
  buffer.header = chunk.header();
  buffer.bytes = chunk.data();
  while (reader->Read(&chunk)) buffer.bytes += chunk.data();
  if (buffer.bytes.size() != buffer.header.size_bytes()) {
    return ToGrpcStatus(absl::InvalidArgumentError(absl::StrCat(
        "put of ", buffer.header.size_bytes(), " bytes brought ", buffer.bytes.size())));
  }
  absl::MutexLock lock(&mutex_);
  if (!OwnsDevice(buffer.header.device_id())) {
    return ToGrpcStatus(absl::InvalidArgumentError(
        absl::StrCat("device ", buffer.header.device_id(), " is not this worker's")));
  }
  buffers_[buffer.header.buffer_id()] = std::move(buffer);
  return grpc::Status::OK;
}

grpc::Status FakeWorker::GetBuffer(grpc::ServerContext* context, const GetBufferRequest* request,
                                   grpc::ServerWriter<GetBufferChunk>* writer) {
  if (absl::Status ok = CheckCall(*context); !ok.ok()) return ToGrpcStatus(ok);
  if (request->after_stream() != 0) {
    absl::MutexLock lock(&mutex_);
    auto carried_out = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
      auto it = progress_.find(request->after_stream());
      return crashed_ || ended_streams_.contains(request->after_stream()) ||
             (it != progress_.end() && it->second >= request->after_seq());
    };
    if (!mutex_.AwaitWithTimeout(absl::Condition(&carried_out), kWaitForBuffer)) {
      return ToGrpcStatus(absl::DeadlineExceededError("the operation making it never came"));
    }
  }
  absl::StatusOr<Buffer> buffer = Find(
      request->buffer_id(),
      request->after_stream() != 0 ? absl::ZeroDuration() : absl::Milliseconds(request->wait_ms()));
  if (!buffer.ok()) return ToGrpcStatus(buffer.status());
  GetBufferChunk chunk;
  *chunk.mutable_header() = buffer->header;
  if (!writer->Write(chunk)) return grpc::Status::OK;
  for (size_t at = 0; at < buffer->bytes.size(); at += kChunkBytes) {
    GetBufferChunk data;
    data.set_data(buffer->bytes.substr(at, kChunkBytes));
    if (!writer->Write(data)) break;
  }
  return grpc::Status::OK;
}

grpc::Status FakeWorker::DeleteBuffers(grpc::ServerContext* context,
                                       const DeleteBuffersRequest* request,
                                       DeleteBuffersResponse* response) {
  if (absl::Status ok = CheckCall(*context); !ok.ok()) return ToGrpcStatus(ok);
  absl::MutexLock lock(&mutex_);
  EraseEach(buffers_, request->buffer_ids(), response);
  return grpc::Status::OK;
}

grpc::Status FakeWorker::Compile(grpc::ServerContext* context, const CompileRequest* request,
                                 CompileResponse* response) {
  if (absl::Status ok = CheckCall(*context); !ok.ok()) return ToGrpcStatus(ok);
  if (!absl::StrContains(request->program(), "@add_one")) {
    return ToGrpcStatus(
        absl::InvalidArgumentError("the fake worker compiles only the add-one program"));
  }
  absl::MutexLock lock(&mutex_);
  if (devices_.empty()) return ToGrpcStatus(absl::UnavailableError("not registered"));
  const int64_t device =
      request->device_ids().empty() ? devices_[0].global_id() : request->device_ids(0);
  if (!OwnsDevice(device)) {
    return ToGrpcStatus(
        absl::InvalidArgumentError(absl::StrCat("device ", device, " is not this worker's")));
  }
  executables_[request->executable_id()] = Executable{device, "add_one"};
  response->add_device_ids(device);
  OutputSpec* output = response->add_outputs();
  output->set_dtype(F32);
  output->add_dims(4);
  response->set_name("add_one");
  response->set_num_replicas(1);
  response->set_num_partitions(1);
  response->set_has_output_sharding(true);
  return grpc::Status::OK;
}

grpc::Status FakeWorker::DeleteExecutables(grpc::ServerContext* context,
                                           const DeleteExecutablesRequest* request,
                                           DeleteExecutablesResponse* response) {
  if (absl::Status ok = CheckCall(*context); !ok.ok()) return ToGrpcStatus(ok);
  absl::MutexLock lock(&mutex_);
  EraseEach(executables_, request->executable_ids(), response);
  return grpc::Status::OK;
}

grpc::Status FakeWorker::GetStats(grpc::ServerContext* context, const GetStatsRequest*,
                                  WorkerStats* response) {
  if (absl::Status ok = CheckCall(*context); !ok.ok()) return ToGrpcStatus(ok);
  absl::MutexLock lock(&mutex_);
  response->set_buffers(static_cast<int64_t>(buffers_.size()));
  response->set_executables(static_cast<int64_t>(executables_.size()));
  return grpc::Status::OK;
}

grpc::Status FakeWorker::CancelLaunches(grpc::ServerContext* context, const CancelLaunchesRequest*,
                                        CancelLaunchesResponse*) {
  // Launches run as they are read: none is ever waiting to be dropped.
  return ToGrpcStatus(CheckCall(*context));
}

absl::Status FakeWorker::Launch(const ExecuteRequest& request) {
  std::vector<uint64_t> outputs;
  for (const BufferIdList& ids : request.outputs()) {
    outputs.insert(outputs.end(), ids.ids().begin(), ids.ids().end());
  }
  absl::MutexLock lock(&mutex_);
  auto fail = [&](absl::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    for (uint64_t id : outputs) buffers_[id].status = status;  // read back as the error
    return status;
  };
  auto executable = executables_.find(request.executable_id());
  if (executable == executables_.end()) {
    return fail(absl::NotFoundError(absl::StrCat("no executable ", request.executable_id())));
  }
  if (request.arguments_size() != 1 || request.arguments(0).ids_size() != 1 ||
      outputs.size() != 1) {
    return fail(absl::InvalidArgumentError("add_one takes one argument and makes one output"));
  }
  auto input = buffers_.find(request.arguments(0).ids(0));
  if (input == buffers_.end()) {
    return fail(absl::NotFoundError(absl::StrCat("no buffer ", request.arguments(0).ids(0))));
  }
  if (!input->second.status.ok()) return fail(input->second.status);
  if (input->second.header.device_id() != executable->second.device) {
    return fail(absl::InvalidArgumentError(
        absl::StrCat("argument on device ", input->second.header.device_id(),
                     ", the program runs on device ", executable->second.device)));
  }
  if (input->second.header.dtype() != F32) {
    return fail(absl::InvalidArgumentError("add_one takes f32"));
  }
  Buffer output = input->second;
  output.header.set_buffer_id(outputs[0]);
  for (size_t at = 0; at + sizeof(float) <= output.bytes.size(); at += sizeof(float)) {
    float value;
    std::memcpy(&value, output.bytes.data() + at, sizeof(float));
    value += 1;
    std::memcpy(output.bytes.data() + at, &value, sizeof(float));
  }
  buffers_[outputs[0]] = std::move(output);
  return absl::OkStatus();
}

absl::Status FakeWorker::Assemble(const AssembleBufferRequest& request) {
  absl::Status status;
  Buffer made;
  made.header = request.header();
  if (request.pieces_size() != 1) {
    status = absl::UnimplementedError("the fake worker assembles from one piece only");
  } else if (absl::StatusOr<Buffer> source = Source(request.pieces(0)); !source.ok()) {
    status = source.status();
  } else if (source->bytes.size() != request.header().size_bytes()) {
    status = absl::InvalidArgumentError("the piece is not the size of the buffer");
  } else {
    made.bytes = std::move(source->bytes);
  }
  absl::MutexLock lock(&mutex_);
  if (status.ok() && !OwnsDevice(made.header.device_id())) {
    status = absl::InvalidArgumentError(
        absl::StrCat("device ", made.header.device_id(), " is not this worker's"));
  }
  made.status = status;
  buffers_[request.header().buffer_id()] = std::move(made);
  return status;
}

absl::Status FakeWorker::Run(const DispatchRequest& request) {
  switch (request.op_case()) {
    case DispatchRequest::kExecute:
      return Launch(request.execute());
    case DispatchRequest::kAssemble:
      return Assemble(request.assemble());
    case DispatchRequest::kAssembleBuffers: {
      absl::Status first;
      for (const AssembleBufferRequest& buffer : request.assemble_buffers().buffers()) {
        absl::Status made = Assemble(buffer);
        if (first.ok()) first = made;
      }
      return first;
    }
    case DispatchRequest::kDeleteBuffers: {
      absl::MutexLock lock(&mutex_);
      for (uint64_t id : request.delete_buffers().buffer_ids()) buffers_.erase(id);
      return absl::OkStatus();
    }
    case DispatchRequest::kDeleteExecutables: {
      absl::MutexLock lock(&mutex_);
      for (uint64_t id : request.delete_executables().executable_ids()) executables_.erase(id);
      return absl::OkStatus();
    }
    case DispatchRequest::kAwaitBuffers:
      for (uint64_t id : request.await_buffers().buffer_ids()) {
        if (absl::StatusOr<Buffer> buffer = Find(id, absl::ZeroDuration()); !buffer.ok())
          return buffer.status();
      }
      return absl::OkStatus();
    default:
      return absl::UnimplementedError("the fake worker does not take this operation");
  }
}

grpc::Status FakeWorker::Dispatch(
    grpc::ServerContext* context,
    grpc::ServerReaderWriter<DispatchResponse, DispatchRequest>* stream) {
  if (absl::Status ok = CheckCall(*context); !ok.ok()) return ToGrpcStatus(ok);
  const uint64_t stream_id = MetadataNumber(*context, kStreamMetadata);
  {
    absl::MutexLock lock(&mutex_);
    streams_.insert(context);
  }
  DispatchRequest request;
  while (stream->Read(&request)) {
    {
      // A hung worker: the operation just read is held, so the transport takes no more.
      absl::MutexLock lock(&mutex_);
      auto may_go_on = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) { return reading_ || crashed_; };
      // Bounded: a cancelled stream must see its cancellation.
      while (!mutex_.AwaitWithTimeout(absl::Condition(&may_go_on), absl::Milliseconds(20))) {
        if (context->IsCancelled()) break;
      }
      if (crashed_ || context->IsCancelled()) break;
    }
    operations_.fetch_add(1);
    if (request.deletes_before_size() > 0) {
      absl::MutexLock lock(&mutex_);
      for (uint64_t id : request.deletes_before()) buffers_.erase(id);
    }
    DispatchResponse response;
    absl::Status status;
    if (request.op_case() == DispatchRequest::kReadBuffer) {
      absl::StatusOr<Buffer> buffer = Find(request.read_buffer().buffer_id(), absl::ZeroDuration());
      if (buffer.ok()) response.set_data(std::move(buffer->bytes));
      status = buffer.status();
    } else {
      status = Run(request);
    }
    if (stream_id != 0) {
      absl::MutexLock lock(&mutex_);
      progress_[stream_id] = request.seq();
    }
    const bool answer = !status.ok() || request.reply() ||
                        request.op_case() == DispatchRequest::kAwaitBuffers ||
                        request.op_case() == DispatchRequest::kReadBuffer ||
                        (request.has_execute() && request.answer_when_computed());
    if (!answer) continue;
    response.set_seq(request.seq());
    response.set_code(static_cast<int>(status.code()));
    response.set_message(std::string(status.message()));
    if (!stream->Write(response)) break;
  }
  absl::MutexLock lock(&mutex_);
  streams_.erase(context);
  if (stream_id != 0) ended_streams_.insert(stream_id);
  if (crashed_) return ToGrpcStatus(absl::UnavailableError("the fake worker has crashed"));
  return grpc::Status::OK;
}

}  // namespace switchyard::test_support
