#include "proxy/worker_calls.h"

#include <cstring>

#include <algorithm>
#include <optional>

#include "absl/cleanup/cleanup.h"
#include "absl/random/random.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/bulk_client.h"
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

absl::StatusOr<uint64_t> PutBuffer(WorkerConnection* worker, uint64_t buffer_id, int64_t device,
                                   DType dtype, const std::vector<int64_t>& dims,
                                   absl::string_view data, const std::string& memory_kind) {
  return PutBuffer(
      worker, buffer_id, device, dtype, dims, data.size(), memory_kind,
      [data](int64_t bytes) -> absl::StatusOr<absl::string_view> { return data.substr(0, bytes); });
}

absl::StatusOr<uint64_t> PutBuffer(WorkerConnection* worker, uint64_t buffer_id, int64_t device,
                                   DType dtype, const std::vector<int64_t>& dims, int64_t size,
                                   const std::string& memory_kind, const BytePrefix& prefix) {
  grpc::ClientContext context;
  SetDeadline(&context, kTransferTimeout);
  absl::StatusOr<WorkerConnection::Call> call = worker->PrepareCall(&context);
  if (!call.ok()) return call.status();
  PutBufferResponse response;
  auto writer = call->stub->PutBuffer(&context, &response);
  PutBufferChunk chunk;
  BufferHeader* header = chunk.mutable_header();
  header->set_buffer_id(buffer_id);
  header->set_device_id(device);
  header->set_dtype(dtype);
  header->mutable_dims()->Add(dims.begin(), dims.end());
  header->set_size_bytes(size);
  header->set_memory_kind(memory_kind);
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
    chunk.clear_header();
    offset += n;
  } while (offset < size);
  writer->WritesDone();
  absl::Status status = FromGrpcStatus(writer->Finish());
  if (!status.ok()) return worker->CallFailed(call->epoch, status);
  return call->epoch;
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

// Marks a status after which the read goes again with the bytes inline: the data plane
// did not serve it, and nothing of it was written.
constexpr absl::string_view kInlineAgain = "switchyard.dev/inline-again";

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

ReadCounts& BufferReads() {
  static ReadCounts counts;
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
    filled += bytes.size();
    return absl::OkStatus();
  };
  sink.pull = [&](const std::string& address, const bulk::Ticket& offer) {
    return bulk::Pull(address, offer, absl::MakeSpan(data->data(), data->size()),
                      bulk::StreamsFor(data->size()));
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
  sink.take = [&](absl::string_view bytes) { return into.Append(bytes); };
  // One stream, in order: the client's lookup passes each piece on as it lands.
  sink.pull = [&](const std::string& address, const bulk::Ticket& offer) {
    absl::Status said;
    absl::Status pulled = bulk::PullInOrder(address, offer, into.Space(), [&](uint64_t bytes) {
      if (said.ok()) said = into.Arrived(static_cast<int64_t>(bytes));
    });
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
