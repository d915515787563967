#include "proxy/worker_calls.h"

#include <cstring>

#include <algorithm>

#include "absl/cleanup/cleanup.h"
#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/grpc_status.h"
#include "common/limits.h"
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

// Worker.GetBuffer of a buffer made by `ticket`: `begin` gets its size from the header,
// then `take` each chunk's bytes in order; a failure of either ends the read with it.
absl::Status ReadBuffer(WorkerConnection* worker, uint64_t buffer_id,
                        const WorkerConnection::Ticket& ticket, CallSet* calls,
                        const std::function<absl::Status(int64_t)>& begin,
                        const std::function<absl::Status(absl::string_view)>& take) {
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
  // Waits on the worker exactly until the operation making it has run.
  request.set_after_stream(ticket.stream);
  request.set_after_seq(ticket.seq);
  auto reader = call->stub->GetBuffer(&context, request);
  GetBufferChunk chunk;
  int64_t size = -1;
  int64_t filled = 0;
  absl::Status bad;
  while (reader->Read(&chunk)) {
    if (chunk.has_header() && size < 0) {
      size = static_cast<int64_t>(chunk.header().size_bytes());
      bad = begin(size);
    }
    if (bad.ok() && (size < 0 || filled + static_cast<int64_t>(chunk.data().size()) > size)) {
      bad = absl::DataLossError(absl::StrCat("worker ", worker->address(), " sent buffer ",
                                             buffer_id, " with more bytes than its header says"));
    }
    if (bad.ok()) bad = take(chunk.data());
    if (!bad.ok()) {
      context.TryCancel();
      break;
    }
    filled += static_cast<int64_t>(chunk.data().size());
  }
  absl::Status status = FromGrpcStatus(reader->Finish());
  if (!bad.ok()) return bad;
  if (!status.ok()) return worker->CallFailed(call->epoch, status);
  if (size < 0 || filled != size) {
    return absl::DataLossError(absl::StrCat("worker ", worker->address(), " sent ", filled,
                                            " bytes of buffer ", buffer_id));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<HostBytes>> GetBuffer(WorkerConnection* worker, uint64_t buffer_id,
                                                     const WorkerConnection::Ticket& ticket,
                                                     CallSet* calls) {
  std::unique_ptr<HostBytes> data;
  size_t filled = 0;
  SY_RETURN_IF_ERROR(ReadBuffer(
      worker, buffer_id, ticket, calls,
      [&](int64_t size) -> absl::Status {
        SY_ASSIGN_OR_RETURN(data, HostBytes::Allocate(size));
        return absl::OkStatus();
      },
      [&](absl::string_view bytes) {
        std::memcpy(data->data() + filled, bytes.data(), bytes.size());
        filled += bytes.size();
        return absl::OkStatus();
      }));
  return data;
}

absl::Status StreamBuffer(WorkerConnection* worker, uint64_t buffer_id,
                          const WorkerConnection::Ticket& ticket, CallSet* calls,
                          HostBuffer& into) {
  return ReadBuffer(
      worker, buffer_id, ticket, calls,
      [&](int64_t size) {
        return size == into.size() ? absl::OkStatus()
                                   : absl::DataLossError(absl::StrCat(
                                         "worker ", worker->address(), " has buffer ", buffer_id,
                                         " of ", size, " bytes, not ", into.size()));
      },
      [&](absl::string_view bytes) { return into.Append(bytes); });
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
