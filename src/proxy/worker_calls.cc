#include "proxy/worker_calls.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include "absl/cleanup/cleanup.h"
#include "absl/random/random.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/bulk_client.h"
#include "common/copy_count.h"
#include "common/grpc_status.h"
#include "common/limits.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace switchyard::proxy {
namespace {

constexpr absl::Duration kTransferTimeout = absl::Minutes(10);
constexpr absl::Duration kCompileTimeout = absl::Minutes(30);

void SetDeadline(grpc::ClientContext* context, absl::Duration timeout) {
  context->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
}

}  // namespace

uint64_t NewWorkerObjectId() {
  // Wholly random: ids of two proxies (or a restarted one) never meet on a worker, and
  // knowing some ids tells nothing about the others (a counter would hand a prober
  // every live object of every session).
  thread_local absl::BitGen random;
  return absl::Uniform<uint64_t>(random, 1, UINT64_MAX);
}

namespace {

// A put's bytes offered on the data plane while they may still be arriving from the
// client: the plane sends each chunk once it is in place. Either `Arrived` says how far
// they are, or, for an upload read straight from its buffer (`streamed`), the buffer
// does, and hears which bytes went on (its window moves with them).
class ArrivingBytes final : public bulk::Source {
 public:
  ArrivingBytes(absl::Span<const char> memory, std::shared_ptr<const void> owner,
                const HostBuffer* streamed, CancelledFn cancelled)
      : memory_(memory),
        owner_(std::move(owner)),
        streamed_(streamed),
        cancelled_(std::move(cancelled)) {}
  int64_t size() const override { return static_cast<int64_t>(memory_.size()); }
  absl::Span<const char> Contiguous() const override { return memory_; }
  absl::Status Read(int64_t offset, absl::Span<char> out) const override {
    SY_RETURN_IF_ERROR(Await(offset + static_cast<int64_t>(out.size())));
    std::memcpy(out.data(), memory_.data() + offset, out.size());
    CountCopied(out.size());
    return absl::OkStatus();
  }
  absl::Status Await(int64_t end) const override ABSL_LOCKS_EXCLUDED(mutex_) {
    if (streamed_ != nullptr) {
      // As long as the puller waits for a byte: past that it has given up.
      absl::StatusOr<absl::string_view> there = streamed_->StreamFor(
          end, absl::Now() + absl::Seconds(limits::kBulkUploadIdleS), [this] { return Stopped(); });
      return there.status();
    }
    absl::MutexLock lock(&mutex_);
    const auto there = [this, end]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
      return arrived_ >= end || !failed_.ok();
    };
    // As long as the puller waits for a byte: past that it has given up.
    if (!mutex_.AwaitWithTimeout(absl::Condition(&there),
                                 absl::Seconds(limits::kBulkUploadIdleS))) {
      return absl::DeadlineExceededError("the put's bytes stopped arriving from the client");
    }
    return arrived_ >= end ? absl::OkStatus() : failed_;
  }
  bool Stopped() const ABSL_LOCKS_EXCLUDED(stop_mutex_) {
    absl::ReaderMutexLock lock(&stop_mutex_);
    return stopped_ || (cancelled_ && cancelled_());
  }
  void Sent(int64_t offset, int64_t end) const override {
    if (streamed_ != nullptr) streamed_->Sent(offset, end);
  }
  void Arrived(int64_t bytes) ABSL_LOCKS_EXCLUDED(mutex_) {
    absl::MutexLock lock(&mutex_);
    arrived_ = bytes;
  }
  void Fail(absl::Status status) ABSL_LOCKS_EXCLUDED(mutex_, stop_mutex_) {
    {
      absl::MutexLock stop(&stop_mutex_);
      stopped_ = true;
    }
    absl::MutexLock lock(&mutex_);
    if (failed_.ok()) failed_ = std::move(status);
  }

 private:
  const absl::Span<const char> memory_;
  const std::shared_ptr<const void> owner_;  // keeps `memory_` while the plane reads it
  const HostBuffer* const streamed_;         // kept by `owner_`
  const CancelledFn cancelled_;
  // Held while `cancelled_` runs: once Fail has returned it is never called again, since
  // it may reach into a session that has ended.
  mutable absl::Mutex stop_mutex_;
  bool stopped_ ABSL_GUARDED_BY(stop_mutex_) = false;
  mutable absl::Mutex mutex_;
  int64_t arrived_ ABSL_GUARDED_BY(mutex_) = 0;
  absl::Status failed_ ABSL_GUARDED_BY(mutex_);
};

BufferHeader PutHeader(uint64_t buffer_id, int64_t device, DType dtype,
                       const std::vector<int64_t>& dims, int64_t size,
                       const std::string& memory_kind) {
  BufferHeader header;
  header.set_buffer_id(buffer_id);
  header.set_device_id(device);
  header.set_dtype(dtype);
  header.mutable_dims()->Add(dims.begin(), dims.end());
  header.set_size_bytes(size);
  header.set_memory_kind(memory_kind);
  return header;
}

// Marks a status after which a read or put goes again with the bytes inline: the data
// plane did not serve it, and nothing of it was written or stored.
constexpr absl::string_view kInlineAgain = "switchyard.dev/inline-again";

// The put, offered on the data plane: the worker pulls the bytes while this hands the
// offer the client's bytes as they arrive. A status carrying kInlineAgain: the worker
// stored nothing, and the bytes may go inline.
absl::StatusOr<uint64_t> PutOffered(WorkerConnection* worker, const BufferHeader& header,
                                    const BytePrefix& prefix, const PutPlane& plane) {
  // Arrays the client freed go first: the worker may need their room for this one.
  worker->SendDeletes();
  const int64_t size = static_cast<int64_t>(header.size_bytes());
  int64_t arrived = std::min<int64_t>(limits::kBulkChunkBytes, size);
  SY_ASSIGN_OR_RETURN(absl::string_view first, prefix(arrived));
  auto source = std::make_shared<ArrivingBytes>(absl::MakeConstSpan(first.data(), size),
                                                plane.owner, plane.streamed, plane.cancelled);
  source->Arrived(arrived);
  absl::StatusOr<bulk::Ticket> ticket = plane.server->Offer(source);
  if (!ticket.ok()) {
    absl::Status inline_again = ticket.status();
    inline_again.SetPayload(kInlineAgain, absl::Cord("1"));
    return inline_again;
  }
  // Whatever happens below, the offer ends with the put, and with it what it holds.
  absl::Cleanup withdraw = [&] {
    source->Fail(absl::CancelledError("the put ended"));
    plane.server->Withdraw(*ticket);
  };

  grpc::ClientContext context;
  SetDeadline(&context, kTransferTimeout);
  absl::StatusOr<WorkerConnection::Call> call = worker->PrepareCall(&context);
  if (!call.ok()) return call.status();
  PutBufferResponse response;
  auto writer = call->stub->PutBuffer(&context, &response);
  PutBufferChunk chunk;
  *chunk.mutable_header() = header;
  chunk.mutable_offer()->set_ticket(std::string(bulk::TicketBytes(*ticket)));
  chunk.mutable_offer()->set_address(plane.server->address());
  if (writer->Write(chunk)) writer->WritesDone();  // else the status below says why
  // A streamed upload's bytes reach the plane by themselves; others are handed on here.
  while (plane.streamed == nullptr && arrived < size) {
    const int64_t next = std::min<int64_t>(arrived + limits::kBulkChunkBytes, size);
    absl::StatusOr<absl::string_view> there = prefix(next);
    if (!there.ok()) {
      // The client's bytes will not come: the worker's pull breaks and it stores nothing.
      source->Fail(there.status());
      context.TryCancel();
      (void)writer->Finish();
      return there.status();
    }
    source->Arrived(arrived = next);
  }
  absl::Status status = FromGrpcStatus(writer->Finish());
  if (!status.ok() && plane.cancelled && plane.cancelled()) {
    // The pull broke because the session ended: the worker is not at fault.
    return absl::CancelledError("the session ended while its upload was arriving");
  }
  if (!status.ok() && plane.streamed != nullptr) {
    // The client's upload failed (or its session ended): the worker is not at fault.
    if (absl::Status upload = plane.streamed->Completion();
        !upload.ok() && !absl::IsUnavailable(upload)) {
      return upload;
    }
  }
  if (!status.ok()) return worker->CallFailed(call->epoch, status);
  if (response.send_inline() && plane.streamed != nullptr && plane.streamed->dropped_any()) {
    return absl::DataLossError(
        "the worker took part of a streamed upload over the data plane and then asked for "
        "it over gRPC; the proxy no longer holds its start");
  }
  if (response.send_inline()) {
    if (response.unreachable() && worker->MarkPutsUnreachable()) {
      SY_LOG(Warning) << "puts to worker " << worker->address()
                      << " go over gRPC: it cannot reach this proxy's data plane at "
                      << plane.server->address();
    }
    absl::Status inline_again = absl::UnavailableError("the worker did not pull the put");
    inline_again.SetPayload(kInlineAgain, absl::Cord("1"));
    return inline_again;
  }
  BufferWrites().bulk_bytes += size;
  return call->epoch;
}

// The put over gRPC, each chunk sent once it is there.
absl::StatusOr<uint64_t> PutInline(WorkerConnection* worker, const BufferHeader& header,
                                   const BytePrefix& prefix, const HostBuffer* streamed) {
  // Arrays the client freed go first: the worker may need their room for this one.
  worker->SendDeletes();
  const int64_t size = static_cast<int64_t>(header.size_bytes());
  grpc::ClientContext context;
  SetDeadline(&context, kTransferTimeout);
  absl::StatusOr<WorkerConnection::Call> call = worker->PrepareCall(&context);
  if (!call.ok()) return call.status();
  PutBufferResponse response;
  auto writer = call->stub->PutBuffer(&context, &response);
  PutBufferChunk chunk;
  *chunk.mutable_header() = header;
  int64_t offset = 0;
  do {
    const int64_t n = std::min<int64_t>(limits::kBufferChunkBytes, size - offset);
    absl::StatusOr<absl::string_view> arrived = prefix(offset + n);
    if (!arrived.ok()) {
      context.TryCancel();  // the worker drops the partial buffer
      (void)writer->Finish();
      return arrived.status();
    }
    chunk.set_data(arrived->data() + offset, n);
    if (!writer->Write(chunk)) break;  // the status below says why
    CountCopied(n, 3);                 // into the message, serialized, the kernel's
    if (streamed != nullptr) streamed->Sent(offset, offset + n);  // the message has a copy
    chunk.clear_header();
    offset += n;
  } while (offset < size);
  writer->WritesDone();
  absl::Status status = FromGrpcStatus(writer->Finish());
  if (!status.ok()) return worker->CallFailed(call->epoch, status);
  BufferWrites().inline_bytes += size;
  return call->epoch;
}

}  // namespace

PathCounts& BufferWrites() {
  static PathCounts counts;
  return counts;
}

absl::StatusOr<uint64_t> PutBuffer(WorkerConnection* worker, uint64_t buffer_id, int64_t device,
                                   DType dtype, const std::vector<int64_t>& dims,
                                   absl::string_view data, const std::string& memory_kind,
                                   const PutPlane& plane) {
  return PutBuffer(
      worker, buffer_id, device, dtype, dims, data.size(), memory_kind,
      [data](int64_t bytes) -> absl::StatusOr<absl::string_view> { return data.substr(0, bytes); },
      plane);
}

absl::StatusOr<uint64_t> PutBuffer(WorkerConnection* worker, uint64_t buffer_id, int64_t device,
                                   DType dtype, const std::vector<int64_t>& dims, int64_t size,
                                   const std::string& memory_kind, const BytePrefix& prefix,
                                   const PutPlane& plane) {
  const BufferHeader header = PutHeader(buffer_id, device, dtype, dims, size, memory_kind);
  if (plane.server != nullptr && plane.owner != nullptr && dtype != STRING &&
      size >= limits::kBulkMinBytes && worker->PullsPuts()) {
    absl::StatusOr<uint64_t> epoch = PutOffered(worker, header, prefix, plane);
    if (epoch.ok() || !epoch.status().GetPayload(kInlineAgain).has_value()) return epoch;
    ++BufferWrites().fallbacks;
  }
  return PutInline(worker, header, prefix, plane.streamed);
}

namespace {

// How a read takes a buffer's bytes: `begin` gets its size from the header, then `take`
// each chunk's bytes in order, or, when the worker offers them on its data plane,
// `pull` reads them all from there (no `pull`: the bytes come inline).
struct BufferSink {
  std::function<absl::Status(int64_t)> begin;
  std::function<absl::Status(absl::string_view)> take;
  std::function<absl::Status(const std::string& address, const bulk::Ticket&)> pull;
};

// One Worker.GetBuffer of a buffer made by `ticket`; a failure of the sink ends the
// read with it.
absl::Status ReadBufferOnce(WorkerConnection* worker, uint64_t buffer_id,
                            const WorkerConnection::Ticket& ticket, CallSet* calls,
                            const BufferSink& sink, bool bulk) {
  grpc::ClientContext context;
  SetDeadline(&context, kTransferTimeout);
  absl::StatusOr<WorkerConnection::Call> call = worker->PrepareCall(&context);
  if (!call.ok()) return call.status();
  if (call->epoch != ticket.epoch) return worker->CheckEpoch(ticket.epoch);
  if (calls != nullptr && !calls->Add(&context)) {
    calls->Remove(&context);
    return absl::CancelledError("the session ended");
  }
  absl::Cleanup unregister = [&] {
    if (calls != nullptr) calls->Remove(&context);
  };
  GetBufferRequest request;
  request.set_buffer_id(buffer_id);
  request.set_bulk(bulk);
  // Waits on the worker exactly until the operation making it has run.
  request.set_after_stream(ticket.stream);
  request.set_after_seq(ticket.seq);
  auto reader = call->stub->GetBuffer(&context, request);
  GetBufferChunk chunk;
  std::optional<BulkOffer> offer;
  int64_t size = -1;
  int64_t filled = 0;
  absl::Status bad;
  while (reader->Read(&chunk)) {
    if (chunk.has_header() && size < 0) {
      size = static_cast<int64_t>(chunk.header().size_bytes());
      bad = sink.begin(size);
      if (bad.ok() && chunk.has_offer()) {
        offer = chunk.offer();  // the bytes come on the data plane; the stream ends
        continue;
      }
    }
    if (bad.ok() && (size < 0 || offer.has_value() ||
                     filled + static_cast<int64_t>(chunk.data().size()) > size)) {
      bad = absl::DataLossError(absl::StrCat("worker ", worker->address(), " sent buffer ",
                                             buffer_id, " with more bytes than its header says"));
    }
    if (bad.ok()) bad = sink.take(chunk.data());
    if (!bad.ok()) {
      context.TryCancel();
      break;
    }
    filled += static_cast<int64_t>(chunk.data().size());
  }
  absl::Status status = FromGrpcStatus(reader->Finish());
  if (!bad.ok()) return bad;
  if (!status.ok()) return worker->CallFailed(call->epoch, status);
  if (offer.has_value()) {
    if (!bulk) {
      return absl::DataLossError(
          absl::StrCat("worker ", worker->address(), " offered buffer ", buffer_id, " unasked"));
    }
    absl::StatusOr<bulk::Ticket> bulk_ticket = bulk::TicketFromBytes(offer->ticket());
    if (!bulk_ticket.ok()) return absl::DataLossError(bulk_ticket.status().message());
    status = sink.pull(offer->address(), *bulk_ticket);
    if (status.ok()) {
      BufferReads().bulk_bytes += size;
      return absl::OkStatus();
    }
    if (absl::IsCancelled(status)) return status;  // the session ended: no one to tell
    const bulk::PullFailure failure = bulk::ClassifyFailure(status);
    if (failure == bulk::PullFailure::kUnreachable && worker->MarkBulkUnreachable()) {
      SY_LOG(Warning) << "buffers of worker " << worker->address()
                      << " come over gRPC: its data plane is out of reach: " << status.message();
    }
    if (failure != bulk::PullFailure::kBroken) {
      ++BufferReads().fallbacks;
      status.SetPayload(kInlineAgain, absl::Cord("1"));
      return status;
    }
    return absl::DataLossError(absl::StrCat("reading buffer ", buffer_id, " from worker ",
                                            worker->address(),
                                            " on its data plane: ", status.message()));
  }
  if (size < 0 || filled != size) {
    return absl::DataLossError(absl::StrCat("worker ", worker->address(), " sent ", filled,
                                            " bytes of buffer ", buffer_id));
  }
  BufferReads().inline_bytes += size;
  return absl::OkStatus();
}

// For a data-plane read: whether the session that asked has ended (none: never).
bulk::Cancelled SessionEnded(CallSet* calls) {
  if (calls == nullptr) return nullptr;
  return [calls] { return calls->cancelled(); };
}

// The read, on the data plane where the worker offers it and it can be reached; inline
// otherwise.
absl::Status ReadBuffer(WorkerConnection* worker, uint64_t buffer_id,
                        const WorkerConnection::Ticket& ticket, CallSet* calls,
                        const BufferSink& sink) {
  const bool bulk = sink.pull != nullptr && worker->BulkReachable();
  absl::Status status = ReadBufferOnce(worker, buffer_id, ticket, calls, sink, bulk);
  if (bulk && status.GetPayload(kInlineAgain).has_value()) {
    status = ReadBufferOnce(worker, buffer_id, ticket, calls, sink, /*bulk=*/false);
  }
  return status;
}

}  // namespace

PathCounts& BufferReads() {
  static PathCounts counts;
  return counts;
}

absl::StatusOr<std::unique_ptr<HostBytes>> GetBuffer(WorkerConnection* worker, uint64_t buffer_id,
                                                     const WorkerConnection::Ticket& ticket,
                                                     CallSet* calls) {
  std::unique_ptr<HostBytes> data;
  size_t filled = 0;
  BufferSink sink;
  sink.begin = [&](int64_t size) -> absl::Status {
    SY_ASSIGN_OR_RETURN(data, HostBytes::Allocate(size));
    filled = 0;
    return absl::OkStatus();
  };
  sink.take = [&](absl::string_view bytes) {
    std::memcpy(data->data() + filled, bytes.data(), bytes.size());
    CountCopied(bytes.size(), 3);  // the kernel's, protobuf's parse, then ours
    filled += bytes.size();
    return absl::OkStatus();
  };
  sink.pull = [&](const std::string& address, const bulk::Ticket& offer) {
    return bulk::Pull(address, offer, absl::MakeSpan(data->data(), data->size()),
                      bulk::StreamsFor(data->size()), SessionEnded(calls));
  };
  SY_RETURN_IF_ERROR(ReadBuffer(worker, buffer_id, ticket, calls, sink));
  return data;
}

absl::Status StreamBuffer(WorkerConnection* worker, uint64_t buffer_id,
                          const WorkerConnection::Ticket& ticket, CallSet* calls,
                          HostBuffer& into) {
  BufferSink sink;
  sink.begin = [&](int64_t size) {
    return size == into.size() ? absl::OkStatus()
                               : absl::DataLossError(absl::StrCat(
                                     "worker ", worker->address(), " has buffer ", buffer_id,
                                     " of ", size, " bytes, not ", into.size()));
  };
  // A windowed `into` (HostBuffer::SetWindow) is written only as far as the client's
  // lookup let go of what came before.
  const CancelledFn ended = SessionEnded(calls);
  auto room = [&](int64_t end) {
    return into.WaitRoom(end, absl::Now() + absl::Milliseconds(limits::kUploadRoomWaitMs), ended);
  };
  int64_t taken = 0;
  sink.take = [&](absl::string_view bytes) {
    taken += static_cast<int64_t>(bytes.size());
    SY_RETURN_IF_ERROR(room(taken));
    return into.Append(bytes);
  };
  // One stream, in order: the client's lookup passes each piece on as it lands.
  sink.pull = [&](const std::string& address, const bulk::Ticket& offer) {
    absl::Status said = room(limits::kBulkChunkBytes);  // PullInOrder's first read
    if (!said.ok()) return said;
    absl::Status pulled = bulk::PullInOrder(
        address, offer, into.Space(),
        [&](uint64_t bytes) {
          if (said.ok()) said = into.Arrived(static_cast<int64_t>(bytes));
          if (said.ok()) said = room(static_cast<int64_t>(bytes) + limits::kBulkChunkBytes);
        },
        absl::Seconds(limits::kBulkIdleS), [&] { return !said.ok() || ended(); });
    return pulled.ok() ? said : pulled;
  };
  return ReadBuffer(worker, buffer_id, ticket, calls, sink);
}

void CancelLaunches(WorkerConnection* worker, uint64_t session) {
  grpc::ClientContext context;
  SetDeadline(&context, absl::Seconds(2));
  absl::StatusOr<WorkerConnection::Call> call = worker->PrepareCall(&context);
  if (!call.ok()) return;
  CancelLaunchesRequest request;
  request.set_session(session);
  CancelLaunchesResponse response;
  (void)call->stub->CancelLaunches(&context, request, &response);
}

absl::StatusOr<DescribeProgramResponse> DescribeProgram(WorkerConnection* worker,
                                                        uint64_t executable_id, uint64_t epoch) {
  grpc::ClientContext context;
  SetDeadline(&context, absl::Minutes(2));  // the first call loads jaxlib there
  absl::StatusOr<WorkerConnection::Call> call = worker->PrepareCall(&context);
  if (!call.ok()) return call.status();
  if (call->epoch != epoch) return worker->CheckEpoch(epoch);
  DescribeProgramRequest request;
  request.set_executable_id(executable_id);
  DescribeProgramResponse response;
  absl::Status status = FromGrpcStatus(call->stub->DescribeProgram(&context, request, &response));
  if (!status.ok()) return worker->CallFailed(call->epoch, status);
  return response;
}

absl::StatusOr<TraceResponse> Trace(WorkerConnection* worker, const TraceRequest& request) {
  grpc::ClientContext context;
  SetDeadline(&context, absl::Seconds(10));
  absl::StatusOr<WorkerConnection::Call> call = worker->PrepareCall(&context);
  if (!call.ok()) return call.status();
  TraceResponse response;
  absl::Status status = FromGrpcStatus(call->stub->Trace(&context, request, &response));
  if (!status.ok()) return worker->CallFailed(call->epoch, status);
  return response;
}

absl::StatusOr<Compiled> Compile(WorkerConnection* worker, const CompileRequest& request,
                                 CallSet* calls) {
  grpc::ClientContext context;
  SetDeadline(&context, kCompileTimeout);
  absl::StatusOr<WorkerConnection::Call> call = worker->PrepareCall(&context);
  if (!call.ok()) return call.status();
  if (calls != nullptr && !calls->Add(&context)) {
    calls->Remove(&context);
    return absl::CancelledError("the session ended");
  }
  absl::Cleanup unregister = [&] {
    if (calls != nullptr) calls->Remove(&context);
  };
  Compiled compiled;
  compiled.epoch = call->epoch;
  absl::Status status = FromGrpcStatus(call->stub->Compile(&context, request, &compiled.response));
  if (!status.ok()) return worker->CallFailed(call->epoch, status);
  return compiled;
}

}  // namespace switchyard::proxy
