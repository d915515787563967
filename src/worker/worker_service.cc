#include "worker/worker_service.h"

#include <algorithm>
#include <cstring>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/bulk_client.h"
#include "common/call_metadata.h"
#include "common/copy_count.h"
#include "common/grpc_status.h"
#include "common/guarded.h"
#include "common/limits.h"
#include "common/logging.h"
#include "common/ordered_writer.h"
#include "common/status_join.h"
#include "common/status_macros.h"
#include "common/thread_name.h"
#include "common/trace.h"
#include "common/wire_numbers.h"
#include "common/wire_record.h"
#include "ifrt/ifrt_types.pb.h"
#include "pjrt/buffer.h"
#include "pjrt/dtype.h"
#include "worker/transfers.h"

namespace switchyard::worker {
namespace {

absl::Duration WaitFor(int64_t wait_ms) {
  return absl::Milliseconds(std::clamp<int64_t>(wait_ms, 0, limits::kBufferWaitMs));
}

// The value of metadata `key`, or empty.
std::string Metadata(const grpc::ServerContext& context, const char* key) {
  auto it = context.client_metadata().find(key);
  if (it == context.client_metadata().end()) return "";
  return std::string(it->second.data(), it->second.size());
}

uint64_t MetadataNumber(const grpc::ServerContext& context, const char* key) {
  uint64_t value = 0;
  return absl::SimpleAtoi(Metadata(context, key), &value) ? value : 0;
}

// The answers of one Dispatch stream, written in order by one thread of the stream's
// own: readiness callbacks run on the plugin's device threads and must never block
// there (a device thread stuck in a write would leave its peers waiting in a
// collective). Shared with those callbacks, which may outlive the stream: answers
// that come after it has ended are dropped.
class DispatchAnswers {
 public:
  using Stream = grpc::ServerReaderWriter<DispatchResponse, DispatchRequest>;
  explicit DispatchAnswers(Stream* stream)
      : reader_(std::this_thread::get_id()),
        writer_(
            [this, stream](const DispatchResponse& response) { return Write(stream, response); },
            "sy-dispatch-out") {}

  // A host callback call of a launch on this stream; from a device thread.
  bool PostCall(const DispatchResponse& call) { return writer_.Post(call); }

  // An await whose answer comes later, from a device thread.
  void AwaitStarted() ABSL_LOCKS_EXCLUDED(mutex_) {
    absl::MutexLock lock(&mutex_);
    ++waiting_;
  }

  // Operation `seq` reads `buffer`: its answer carries the bytes, copied where it is
  // written (never on a device thread). From the stream's own thread.
  void ExpectRead(uint64_t seq, std::shared_ptr<const StoredBuffer> buffer)
      ABSL_LOCKS_EXCLUDED(mutex_) {
    absl::MutexLock lock(&mutex_);
    reads_[seq] = std::move(buffer);
  }

  // On the stream's own thread the answer is written at once when nothing is ahead of
  // it; device threads only queue it (they must not wait on the proxy).
  void Respond(uint64_t seq, const absl::Status& status, bool awaited = false)
      ABSL_LOCKS_EXCLUDED(mutex_) {
    DispatchResponse response;
    response.set_seq(seq);
    response.set_code(static_cast<int>(status.code()));
    response.set_message(std::string(status.message()));
    if (std::this_thread::get_id() == reader_) {
      writer_.Write(std::move(response));
    } else {
      writer_.Post(std::move(response));
    }
    if (awaited) {
      absl::MutexLock lock(&mutex_);
      --waiting_;
    }
  }

  // Reading has ended. Pending awaits are still answered while the caller is there;
  // once it has gone (cancelled), nothing is waited for. Then the stream may go away.
  void Finish(grpc::ServerContext& context) ABSL_LOCKS_EXCLUDED(mutex_) {
    while (!context.IsCancelled()) {
      {
        absl::MutexLock lock(&mutex_);
        auto answered = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) { return waiting_ == 0; };
        if (!mutex_.AwaitWithTimeout(absl::Condition(&answered), absl::Milliseconds(100))) continue;
      }
      if (writer_.AwaitIdle(absl::Milliseconds(100))) break;
    }
    writer_.Close(absl::ZeroDuration(), [&context] { context.TryCancel(); });
    // Reads never answered let go of their buffers here, not on a device thread.
    absl::MutexLock lock(&mutex_);
    reads_.clear();
  }

 private:
  bool Write(Stream* stream, const DispatchResponse& response) ABSL_LOCKS_EXCLUDED(mutex_) {
    std::shared_ptr<const StoredBuffer> read;
    if (response.seq() != 0) {
      absl::MutexLock lock(&mutex_);
      if (auto it = reads_.find(response.seq()); it != reads_.end()) {
        read = std::move(it->second);
        reads_.erase(it);
      }
    }
    if (read == nullptr || response.code() != 0) return stream->Write(response);
    DispatchResponse answer = response;
    std::string* data = answer.mutable_data();
    data->resize(read->buffer->host_size_bytes());
    absl::Status copied = read->buffer->ToHost(absl::MakeSpan(data->data(), data->size()));
    if (!copied.ok()) {
      answer.clear_data();
      answer.set_code(static_cast<int>(copied.code()));
      answer.set_message(std::string(copied.message()));
    }
    return stream->Write(answer);
  }

  const std::thread::id reader_;
  absl::Mutex mutex_;
  int waiting_ ABSL_GUARDED_BY(mutex_) = 0;  // awaits not yet answered
  // Reads whose answers are still to be written, by operation.
  absl::flat_hash_map<uint64_t, std::shared_ptr<const StoredBuffer>> reads_ ABSL_GUARDED_BY(mutex_);
  OrderedWriter<DispatchResponse> writer_;
};

// Answers operation `seq` once the buffers `ids` are computed, with the first error
// among them, without blocking the stream. An unknown id is an error now (nothing is
// answered then: the caller answers with it).
template <typename Ids>
absl::Status AnswerWhenComputed(const BufferStore& store, const Ids& ids, uint64_t seq,
                                const std::shared_ptr<DispatchAnswers>& answers) {
  std::vector<std::shared_ptr<const StoredBuffer>> buffers;
  for (uint64_t id : ids) {
    SY_ASSIGN_OR_RETURN(std::shared_ptr<const StoredBuffer> stored, store.GetAny(id));
    if (stored->is_strings) continue;  // made whole, at once
    buffers.push_back(std::move(stored));
  }
  if (buffers.empty()) {
    answers->Respond(seq, absl::OkStatus());
    return absl::OkStatus();
  }
  answers->AwaitStarted();
  // The last callback runs on a device thread: it only queues the answer for the
  // writer thread, and holds no buffer (destroying one there would wait for that
  // device). It may run after the stream has ended: `answers` outlives it.
  auto ready = JoinStatuses(buffers.size(), [answers, seq](absl::Status result) {
    answers->Respond(seq, result, /*awaited=*/true);
  });
  for (const auto& stored : buffers) stored->buffer->OnReady(ready);
  return absl::OkStatus();
}

// Answers operation `seq` with buffer `id`'s bytes once it is computed (or with its
// error), without blocking the stream. Refused now: an unknown id, a string array's
// shard, more than limits::kStreamReadMaxBytes.
absl::Status AnswerWithBytes(const BufferStore& store, uint64_t id, uint64_t seq,
                             const std::shared_ptr<DispatchAnswers>& answers) {
  SY_ASSIGN_OR_RETURN(std::shared_ptr<const StoredBuffer> stored, store.GetAny(id));
  if (stored->is_strings) {
    return absl::InvalidArgumentError(
        absl::StrCat("buffer ", id, " holds strings: read it with GetBuffer"));
  }
  const int64_t size = stored->buffer->host_size_bytes();
  if (size > limits::kStreamReadMaxBytes) {
    return absl::InvalidArgumentError(absl::StrCat("buffer ", id, " has ", size,
                                                   " bytes; a read on the operation stream takes "
                                                   "at most ",
                                                   limits::kStreamReadMaxBytes,
                                                   ": read it with GetBuffer"));
  }
  answers->AwaitStarted();
  answers->ExpectRead(seq, stored);
  // As AnswerWhenComputed: the callback only queues the answer and holds no buffer.
  const pjrt::Buffer& buffer = *stored->buffer;
  stored.reset();
  buffer.OnReady(
      [answers, seq](absl::Status result) { answers->Respond(seq, result, /*awaited=*/true); });
  return absl::OkStatus();
}

BufferHeader HeaderOf(uint64_t id, const StoredBuffer& stored) {
  const pjrt::Buffer& buffer = *stored.buffer;
  BufferHeader header;
  header.set_buffer_id(id);
  header.set_device_id(stored.device_id);
  header.set_dtype(static_cast<DType>(buffer.dtype()));
  header.mutable_dims()->Add(buffer.dims().begin(), buffer.dims().end());
  header.set_size_bytes(buffer.host_size_bytes());
  header.set_memory_kind(buffer.memory_kind());
  return header;
}

}  // namespace

absl::StatusOr<uint64_t> WorkerService::CheckCaller(const grpc::ServerContext& context) const {
  const std::string boot = Metadata(context, kBootMetadata);
  if (!boot.empty() && boot != identity_.boot_id) {
    return absl::DataLossError(absl::StrCat(
        "worker of slice ", identity_.slice_index, " host ", identity_.host_index,
        " restarted: the caller's buffers and programs were on its previous process (boot ",
        boot.substr(0, 64), "; this is boot ", identity_.boot_id, ")"));
  }
  return MetadataNumber(context, kOwnerMetadata);
}

void WorkerService::Touch(uint64_t owner) {
  if (owner == 0) return;
  absl::MutexLock lock(&leases_mutex_);
  leases_.Touched(owner, absl::Now());
}

void WorkerService::ReleaseExpiredOwners() {
  std::vector<uint64_t> expired;
  {
    absl::MutexLock lock(&leases_mutex_);
    expired = leases_.Expire(absl::Now());
  }
  for (uint64_t owner : expired) {
    const int64_t buffers = buffers_->DeleteOwned(owner);
    const int64_t executables = executor_->DeleteOwned(owner);
    if (colocated_ != nullptr) colocated_->EndOwner(owner);
    if (buffers + executables > 0) {
      SY_LOG(Info) << "owner " << owner << " has had no stream open for "
                   << limits::kOwnerLeaseGraceMs << " ms (its proxy died or reconnected): freed "
                   << buffers << " buffers and " << executables << " executables";
    }
  }
}
void WorkerService::SetAddress(std::string address) {
  absl::MutexLock lock(&mutex_);
  address_ = std::move(address);
}

grpc::Status WorkerService::GetInfo(grpc::ServerContext* context, const GetInfoRequest* request,
                                    GetInfoResponse* response) {
  {
    absl::MutexLock lock(&mutex_);
    response->set_address(address_);
  }
  response->set_slice_index(identity_.slice_index);
  response->set_host_index(identity_.host_index);
  *response->mutable_plugin() = identity_.plugin;
  for (DeviceInfo& device : devices_->Devices()) *response->add_devices() = std::move(device);
  response->set_registered(devices_->registered());
  response->set_boot_id(identity_.boot_id);
  return grpc::Status::OK;
}

absl::Status WorkerService::ReceiveBuffer(grpc::ServerReader<PutBufferChunk>* reader,
                                          uint64_t owner, PutBufferResponse* response) {
  PutBufferChunk chunk;
  if (!reader->Read(&chunk) || !chunk.has_header()) {
    return absl::InvalidArgumentError("PutBuffer stream must start with a header");
  }
  const BufferHeader header = chunk.header();
  RecordWire("worker_put_header", header);
  if (header.dtype() == STRING) return ReceiveStrings(chunk, reader, owner);
  SY_ASSIGN_OR_RETURN(int64_t size, CheckHeader(header));
  SY_ASSIGN_OR_RETURN(int ordinal, devices_->OrdinalOf(header.device_id()));
  if (header.buffer_id() == 0 || buffers_->Contains(header.buffer_id())) {
    return absl::InvalidArgumentError(
        absl::StrCat("buffer id ", header.buffer_id(), " is reserved or in use"));
  }
  SY_ASSIGN_OR_RETURN(
      BufferStore::Reservation memory,
      buffers_->Reserve(
          size, [&] { return absl::StrCat("buffer ", header.buffer_id(), " (an upload)"); },
          absl::Milliseconds(limits::kBufferRoomWaitMs)));
  // Received straight into memory the plugin may keep using (no copy on CPU).
  SY_ASSIGN_OR_RETURN(std::shared_ptr<HostBytes> data, HostBytes::Allocate(size));
  if (chunk.has_offer()) {
    if (!chunk.data().empty() || reader->Read(&chunk)) {
      return absl::InvalidArgumentError("a put with an offer carries no bytes of its own");
    }
    SY_RETURN_IF_ERROR(PullPut(header, chunk.offer(), *data, response));
    if (response->send_inline()) return absl::OkStatus();
  } else {
    int64_t filled = 0;
    bool first = true;
    do {
      if (!first && (chunk.has_header() || chunk.has_offer())) {
        return absl::InvalidArgumentError("a second header in one stream");
      }
      first = false;
      if (filled + static_cast<int64_t>(chunk.data().size()) > size) {
        return absl::InvalidArgumentError(
            absl::StrCat("buffer ", header.buffer_id(), " sent more than its ", size, " bytes"));
      }
      std::memcpy(data->data() + filled, chunk.data().data(), chunk.data().size());
      CountCopied(chunk.data().size(), 3);  // the kernel's, protobuf's parse, then ours
      filled += chunk.data().size();
    } while (reader->Read(&chunk));
    if (filled != size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "buffer ", header.buffer_id(), " stream ended after ", filled, " of ", size, " bytes"));
    }
  }
  std::vector<int64_t> dims(header.dims().begin(), header.dims().end());
  SY_ASSIGN_OR_RETURN(auto buffer, client_->BufferFromOwnedHost(
                                       std::move(data), static_cast<pjrt::DType>(header.dtype()),
                                       dims, ordinal, header.memory_kind()));
  Touch(owner);
  return buffers_->Add(header.buffer_id(), header.device_id(), std::move(buffer), owner);
}

absl::Status WorkerService::PullPut(const BufferHeader& header, const BulkOffer& offer,
                                    HostBytes& data, PutBufferResponse* response) {
  absl::StatusOr<bulk::Ticket> ticket = bulk::TicketFromBytes(offer.ticket());
  if (!ticket.ok()) return ticket.status();
  trace::Scoped span(absl::StrCat("bulk put ", data.size(), " bytes"), "transfer");
  // In order on one stream: the offer may still be arriving from the client, and a
  // later range would wait on the earlier ones anyway.
  const absl::Status status =
      bulk::PullInOrder(offer.address(), *ticket, absl::MakeSpan(data.data(), data.size()), nullptr,
                        absl::Seconds(limits::kBulkUploadIdleS));
  if (status.ok()) {
    put_bytes_pulled_ += static_cast<int64_t>(data.size());
    return absl::OkStatus();
  }
  switch (bulk::ClassifyFailure(status)) {
    case bulk::PullFailure::kBroken:
      return absl::DataLossError(absl::StrCat("buffer ", header.buffer_id(),
                                              ": its bytes broke off on the data plane at ",
                                              offer.address(), ": ", status.message()));
    case bulk::PullFailure::kUnreachable:
      response->set_unreachable(true);
      [[fallthrough]];
    case bulk::PullFailure::kElsewhere:
      ++put_fallbacks_;
      response->set_send_inline(true);
      return absl::OkStatus();
  }
  return status;
}

absl::Status WorkerService::ReceiveStrings(PutBufferChunk& chunk,
                                           grpc::ServerReader<PutBufferChunk>* reader,
                                           uint64_t owner) {
  const BufferHeader header = chunk.header();
  SY_RETURN_IF_ERROR(devices_->OrdinalOf(header.device_id()).status());
  SY_ASSIGN_OR_RETURN(int64_t elements, CheckedElements(absl::MakeConstSpan(header.dims().data(),
                                                                            header.dims().size()),
                                                        "string array"));
  if (header.size_bytes() > static_cast<uint64_t>(limits::kStringArrayBytesMax)) {
    return absl::InvalidArgumentError(absl::StrCat("a string array of ", header.size_bytes(),
                                                   " bytes is past the limit of ",
                                                   limits::kStringArrayBytesMax));
  }
  std::string data = std::move(*chunk.mutable_data());
  while (reader->Read(&chunk)) {
    if (chunk.has_header()) return absl::InvalidArgumentError("a second header in one stream");
    if (data.size() + chunk.data().size() > header.size_bytes()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "buffer ", header.buffer_id(), " sent more than its ", header.size_bytes(), " bytes"));
    }
    data += chunk.data();
  }
  ::xla::ifrt::StringArrayContents contents;
  if (data.size() != header.size_bytes() || !contents.ParseFromString(data)) {
    return absl::InvalidArgumentError(
        absl::StrCat("buffer ", header.buffer_id(), ": malformed string array contents"));
  }
  if (contents.strings_size() != elements) {
    return absl::InvalidArgumentError(
        absl::StrCat("a string array of shape [", absl::StrJoin(header.dims(), ","), "] needs ",
                     elements, " strings, not ", contents.strings_size()));
  }
  Touch(owner);
  return buffers_->AddStrings(header.buffer_id(), header.device_id(),
                              {header.dims().begin(), header.dims().end()},
                              {contents.strings().begin(), contents.strings().end()}, owner);
}

grpc::Status WorkerService::PutBuffer(grpc::ServerContext* context,
                                      grpc::ServerReader<PutBufferChunk>* reader,
                                      PutBufferResponse* response) {
  absl::StatusOr<uint64_t> owner = CheckCaller(*context);
  if (!owner.ok()) return ToGrpcStatus(owner.status());
  return ToGrpcStatus(
      Guarded("PutBuffer", [&] { return ReceiveBuffer(reader, *owner, response); }));
}

grpc::Status WorkerService::GetBuffer(grpc::ServerContext* context, const GetBufferRequest* request,
                                      grpc::ServerWriter<GetBufferChunk>* writer) {
  return ToGrpcStatus(Guarded("GetBuffer", [&] { return ServeBuffer(context, *request, writer); }));
}

absl::StatusOr<std::shared_ptr<const StoredBuffer>> WorkerService::FindRead(
    grpc::ServerContext* context, const GetBufferRequest& request) {
  if (request.after_stream() == 0) {
    return buffers_->GetWhenPresent(request.buffer_id(), WaitFor(request.wait_ms()));
  }
  // Waits exactly as long as the operation making the buffer can still come.
  SY_RETURN_IF_ERROR(progress_->WaitFor(
      request.after_stream(), request.after_seq(), absl::FromChrono(context->deadline()),
      absl::Seconds(limits::kStreamAppearS), [context] { return context->IsCancelled(); }));
  return buffers_->GetAny(request.buffer_id());
}

grpc::Status WorkerService::OfferBuffers(grpc::ServerContext* context,
                                         const OfferBuffersRequest* request,
                                         OfferBuffersResponse* response) {
  return ToGrpcStatus(Guarded("OfferBuffers", [&]() -> absl::Status {
    SY_RETURN_IF_ERROR(CheckCaller(*context).status());
    if (request->reads_size() > limits::kAssembleBatchMax) {
      return absl::InvalidArgumentError(absl::StrCat(
          "offers of ", request->reads_size(), " buffers; at most ", limits::kAssembleBatchMax));
    }
    for (const GetBufferRequest& read : request->reads()) {
      BufferOffer* offer = response->add_offers();
      if (absl::Status status = Offer(context, read, offer); !status.ok()) {
        offer->Clear();
        offer->set_code(static_cast<int>(status.code()));
        offer->set_message(std::string(status.message()));
      }
    }
    return absl::OkStatus();
  }));
}

absl::Status WorkerService::Offer(grpc::ServerContext* context, const GetBufferRequest& request,
                                  BufferOffer* offer) {
  SY_ASSIGN_OR_RETURN(std::shared_ptr<const StoredBuffer> stored, FindRead(context, request));
  if (stored->is_strings) return absl::FailedPreconditionError("strings are read inline");
  SY_RETURN_IF_ERROR(stored->buffer->AwaitReady());
  *offer->mutable_header() = HeaderOf(request.buffer_id(), *stored);
  if (offer->header().size_bytes() < limits::kBulkMinBytes) {
    return absl::FailedPreconditionError("below the data plane's floor: read it inline");
  }
  absl::StatusOr<BulkOffer> bulk = OfferBulk(stored);
  if (!bulk.ok()) return absl::FailedPreconditionError(bulk.status().message());
  *offer->mutable_offer() = *std::move(bulk);
  return absl::OkStatus();
}

absl::Status WorkerService::ServeBuffer(grpc::ServerContext* context,
                                        const GetBufferRequest& request,
                                        grpc::ServerWriter<GetBufferChunk>* writer) {
  SY_RETURN_IF_ERROR(CheckCaller(*context).status());
  absl::StatusOr<std::shared_ptr<const StoredBuffer>> stored = FindRead(context, request);
  if (!stored.ok()) return stored.status();
  if ((*stored)->is_strings) return ServeStrings(request.buffer_id(), **stored, writer);
  const pjrt::Buffer& buffer = *(*stored)->buffer;
  // A failed producer is reported as itself, before any bytes go out.
  absl::Status ready = buffer.AwaitReady();
  if (!ready.ok()) return ready;
  const int64_t size = buffer.host_size_bytes();
  GetBufferChunk chunk;
  *chunk.mutable_header() = HeaderOf(request.buffer_id(), **stored);
  if (request.bulk() && size >= limits::kBulkMinBytes) {
    if (absl::StatusOr<BulkOffer> offer = OfferBulk(*stored); offer.ok()) {
      *chunk.mutable_offer() = *std::move(offer);
      if (!writer->Write(chunk)) return absl::CancelledError("client went away");
      return absl::OkStatus();
    }
    // No data plane here, or too many transfers open on it: the bytes go inline.
  }
  // Each chunk is copied from the device straight into the message where the plugin
  // allows it; otherwise from one whole host copy.
  std::unique_ptr<HostBytes> whole;
  if (!buffer.can_copy_ranges()) {
    absl::StatusOr<std::unique_ptr<HostBytes>> allocated = HostBytes::Allocate(size);
    if (!allocated.ok()) return allocated.status();
    whole = *std::move(allocated);
    absl::Status copied = buffer.ToHost(absl::MakeSpan(whole->data(), whole->size()));
    if (!copied.ok()) return copied;
  }
  int64_t offset = 0;
  do {
    const int64_t n = std::min<int64_t>(limits::kBufferChunkBytes, size - offset);
    std::string* data = chunk.mutable_data();
    data->resize(n);  // the same size every chunk but the last: no refill
    if (whole != nullptr) {
      std::memcpy(data->data(), whole->data() + offset, n);
      CountCopied(n);
    } else {
      absl::Status copied = buffer.CopyRangeToHost(offset, absl::MakeSpan(data->data(), n));
      if (!copied.ok()) return copied;
    }
    if (!writer->Write(chunk)) return absl::CancelledError("client went away");
    CountCopied(n, 2);  // serialized, the kernel's
    chunk.clear_header();
    offset += n;
  } while (offset < size);
  return absl::OkStatus();
}

absl::StatusOr<BulkOffer> WorkerService::OfferBulk(
    const std::shared_ptr<const StoredBuffer>& stored) {
  if (bulk_ == nullptr) return absl::UnavailableError("no data plane");
  SY_ASSIGN_OR_RETURN(std::shared_ptr<const bulk::Source> source, BulkSourceOf(stored));
  SY_ASSIGN_OR_RETURN(bulk::Ticket ticket, bulk_->Offer(std::move(source)));
  BulkOffer offer;
  offer.set_ticket(std::string(bulk::TicketBytes(ticket)));
  offer.set_address(bulk_->address());
  return offer;
}

absl::Status WorkerService::ServeStrings(uint64_t id, const StoredBuffer& stored,
                                         grpc::ServerWriter<GetBufferChunk>* writer) {
  // One message: the IFRT host form of a string array (StringArrayContents).
  ::xla::ifrt::StringArrayContents contents;
  for (const std::string& element : stored.strings) contents.add_strings(element);
  GetBufferChunk chunk;
  BufferHeader* header = chunk.mutable_header();
  header->set_buffer_id(id);
  header->set_device_id(stored.device_id);
  header->set_dtype(STRING);
  header->mutable_dims()->Add(stored.dims.begin(), stored.dims.end());
  contents.SerializeToString(chunk.mutable_data());
  header->set_size_bytes(chunk.data().size());
  if (!writer->Write(chunk)) return absl::CancelledError("client went away");
  return absl::OkStatus();
}

grpc::Status WorkerService::DeleteBuffers(grpc::ServerContext* context,
                                          const DeleteBuffersRequest* request,
                                          DeleteBuffersResponse* response) {
  std::vector<uint64_t> ids(request->buffer_ids().begin(), request->buffer_ids().end());
  for (uint64_t id : buffers_->Delete(ids)) response->add_not_found(id);
  return grpc::Status::OK;
}

grpc::Status WorkerService::Compile(grpc::ServerContext* context, const CompileRequest* request,
                                    CompileResponse* response) {
  absl::StatusOr<uint64_t> owner = CheckCaller(*context);
  if (!owner.ok()) return ToGrpcStatus(owner.status());
  Touch(*owner);
  RecordWire("worker_compile", *request);
  auto result = Guarded("Compile", [&] { return executor_->Compile(*request, *owner); });
  if (!result.ok()) return ToGrpcStatus(result.status());
  *response = *std::move(result);
  return grpc::Status::OK;
}

grpc::Status WorkerService::Execute(grpc::ServerContext* context, const ExecuteRequest* request,
                                    ExecuteResponse* response) {
  absl::StatusOr<uint64_t> owner = CheckCaller(*context);
  if (!owner.ok()) return ToGrpcStatus(owner.status());
  Touch(*owner);
  return ToGrpcStatus(executor_->Execute(*request, *owner));
}

grpc::Status WorkerService::DeleteExecutables(grpc::ServerContext* context,
                                              const DeleteExecutablesRequest* request,
                                              DeleteExecutablesResponse* response) {
  std::vector<uint64_t> ids(request->executable_ids().begin(), request->executable_ids().end());
  for (uint64_t id : executor_->Delete(ids)) response->add_not_found(id);
  return grpc::Status::OK;
}

grpc::Status WorkerService::Dispatch(
    grpc::ServerContext* context,
    grpc::ServerReaderWriter<DispatchResponse, DispatchRequest>* stream) {
  absl::StatusOr<uint64_t> checked = CheckCaller(*context);
  if (!checked.ok()) return ToGrpcStatus(checked.status());
  const uint64_t owner = *checked;
  // Reads of what this stream makes wait on its progress (GetBufferRequest.after_stream).
  const uint64_t stream_id = MetadataNumber(*context, kStreamMetadata);
  if (stream_id != 0) progress_->Open(stream_id);
  if (owner != 0) {
    absl::MutexLock lock(&leases_mutex_);
    leases_.Opened(owner, absl::Now());
  }
  absl::Cleanup closed = [&] {
    if (stream_id != 0) progress_->Close(stream_id);
    if (owner != 0) {
      absl::MutexLock lock(&leases_mutex_);
      leases_.Closed(owner, absl::Now());
    }
  };
  auto answers = std::make_shared<DispatchAnswers>(stream);
  std::shared_ptr<HostCallbacks::Stream> callback_stream;
  if (callbacks_ != nullptr) {
    callback_stream = callbacks_->NewStream(
        [answers](const DispatchResponse& call) { return answers->PostCall(call); },
        [context] { return context->IsCancelled(); });
  }
  DispatchRequest request;
  while (stream->Read(&request)) {
    RecordWire("worker_dispatch", request);
    const uint64_t seq = request.seq();
    if (request.deletes_before_size() > 0) {
      buffers_->Delete({request.deletes_before().begin(), request.deletes_before().end()});
    }
    absl::Status status;
    switch (request.op_case()) {
      case DispatchRequest::kSaveShards: {
        if (storage_ == nullptr) {
          status = absl::UnimplementedError("this worker has no storage");
          break;
        }
        // The buffers are taken now, in stream order; the answer comes once they are
        // written, from a storage thread, without blocking the stream.
        answers->AwaitStarted();
        storage_->Save(request.save_shards(), [answers, seq](absl::Status result) {
          answers->Respond(seq, result, /*awaited=*/true);
        });
        if (stream_id != 0) progress_->Advance(stream_id, seq);
        continue;
      }
      case DispatchRequest::kReadBuffer:
        // Earlier operations on this stream have run, so the buffer exists (or its
        // error does).
        status = AnswerWithBytes(*buffers_, request.read_buffer().buffer_id(), seq, answers);
        if (!status.ok()) break;
        ++stream_reads_;
        if (stream_id != 0) progress_->Advance(stream_id, seq);
        continue;  // answered by the buffer's callback
      case DispatchRequest::kAwaitBuffers:
        status = AnswerWhenComputed(*buffers_, request.await_buffers().buffer_ids(), seq, answers);
        if (!status.ok()) break;
        if (stream_id != 0) progress_->Advance(stream_id, seq);
        continue;  // answered by the last buffer's callback
      default:
        status = RunOperation(request, owner, context, callback_stream);
        if (status.ok() && request.has_execute() && request.answer_when_computed()) {
          std::vector<uint64_t> outputs;
          for (const BufferIdList& ids : request.execute().outputs()) {
            outputs.insert(outputs.end(), ids.ids().begin(), ids.ids().end());
          }
          status = AnswerWhenComputed(*buffers_, outputs, seq, answers);
          if (status.ok()) {
            if (stream_id != 0) progress_->Advance(stream_id, seq);
            continue;  // answered by the last output's callback
          }
        }
    }
    if (stream_id != 0) progress_->Advance(stream_id, seq);
    if (!status.ok() || request.reply() || request.op_case() == DispatchRequest::kAwaitBuffers) {
      answers->Respond(seq, status);
    }
  }
  // Launches blocked in a host callback can only be answered through this stream.
  if (callback_stream != nullptr) callback_stream->Close();
  answers->Finish(*context);
  return grpc::Status::OK;
}

absl::Status WorkerService::RunOperation(
    const DispatchRequest& request, uint64_t owner, grpc::ServerContext* context,
    const std::shared_ptr<HostCallbacks::Stream>& callback_stream) {
  switch (request.op_case()) {
    case DispatchRequest::kExecute:
      return executor_->Execute(request.execute(), owner, callback_stream,
                                [context] { return context->IsCancelled(); });
    case DispatchRequest::kAssemble:
      return transfers_->Assemble(request.assemble(), owner);
    case DispatchRequest::kAssembleBuffers:
      return transfers_->AssembleAll(request.assemble_buffers(), owner);
    case DispatchRequest::kDeleteBuffers:
      buffers_->Delete({request.delete_buffers().buffer_ids().begin(),
                        request.delete_buffers().buffer_ids().end()});
      return absl::OkStatus();
    case DispatchRequest::kDeleteExecutables:
      executor_->Delete({request.delete_executables().executable_ids().begin(),
                         request.delete_executables().executable_ids().end()});
      return absl::OkStatus();
    case DispatchRequest::kLoadShards:
      if (storage_ == nullptr) return absl::UnimplementedError("this worker has no storage");
      return Guarded("LoadShards", [&] { return storage_->Load(request.load_shards(), owner); });
    case DispatchRequest::kColocatedCall:
      if (colocated_ == nullptr) {
        return absl::UnimplementedError("this worker runs no colocated Python");
      }
      // On the stream thread, as loads are: later operations may read its outputs. A
      // dead proxy's call stops its sidecar, so its stream (and with it the owner's
      // lease) can end.
      return Guarded("ColocatedCall", [&] {
        return colocated_->Run(request.colocated_call(), owner,
                               [context] { return context->IsCancelled(); });
      });
    default:
      return absl::InvalidArgumentError("empty dispatch operation");
  }
}

grpc::Status WorkerService::DescribeProgram(grpc::ServerContext* context,
                                            const DescribeProgramRequest* request,
                                            DescribeProgramResponse* response) {
  auto described =
      Guarded("DescribeProgram", [&] { return executor_->Describe(request->executable_id()); });
  if (!described.ok()) return ToGrpcStatus(described.status());
  *response = *std::move(described);
  return grpc::Status::OK;
}

grpc::Status WorkerService::ReturnHostCallback(grpc::ServerContext* context,
                                               const HostCallbackResult* request,
                                               ReturnHostCallbackResponse* response) {
  if (callbacks_ == nullptr) {
    return ToGrpcStatus(absl::NotFoundError("this worker runs no host callbacks"));
  }
  return ToGrpcStatus(callbacks_->Return(*request));
}

grpc::Status WorkerService::Trace(grpc::ServerContext* context, const TraceRequest* request,
                                  TraceResponse* response) {
  if (request->start()) {
    response->set_window(trace::Begin());
    return grpc::Status::OK;
  }
  int64_t dropped = 0;
  for (trace::Span& span : trace::End(request->window(), request->session(), &dropped)) {
    TraceSpan* out = response->add_spans();
    out->set_name(std::move(span.name));
    out->set_category(std::move(span.category));
    out->set_start_unix_ns(span.start_unix_ns);
    out->set_duration_ns(span.duration_ns);
    out->set_lane(span.lane);
  }
  for (const auto& [lane, name] : trace::LaneNames()) (*response->mutable_lanes())[lane] = name;
  response->set_dropped(dropped);
  return grpc::Status::OK;
}

grpc::Status WorkerService::CancelLaunches(grpc::ServerContext* context,
                                           const CancelLaunchesRequest* request,
                                           CancelLaunchesResponse* response) {
  // The caller's own session only: another owner naming it cancels nothing.
  absl::StatusOr<uint64_t> owner = CheckCaller(*context);
  if (!owner.ok()) return ToGrpcStatus(owner.status());
  executor_->CancelSession(*owner, request->session());
  if (colocated_ != nullptr) colocated_->EndSession(*owner, request->session());
  return grpc::Status::OK;
}

grpc::Status WorkerService::GetStats(grpc::ServerContext* context, const GetStatsRequest* request,
                                     WorkerStats* response) {
  response->set_buffers(buffers_->size());
  response->set_buffer_bytes(buffers_->bytes());
  response->set_executables(executor_->size());
  response->set_executions(executor_->executions());
  executor_->AddStats(response);
  absl::MutexLock lock(&leases_mutex_);
  response->set_owners(leases_.size());
  return grpc::Status::OK;
}

}  // namespace switchyard::worker
