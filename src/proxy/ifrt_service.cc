#include "proxy/ifrt_service.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/copy_count.h"
#include "common/grpc_server.h"
#include "common/grpc_status.h"
#include "common/host_bytes.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/thread_name.h"
#include "common/trace.h"
#include "common/wire_record.h"
#include "google/protobuf/descriptor.h"
#include "proxy/host_buffer_wire.h"
#include "proxy/ifrt_convert.h"
#include "proxy/large_transfer.h"
#include "proxy/session.h"
#include "proxy/slice_lease.h"
#include "proxy/version.h"

namespace switchyard::proxy {
namespace {

namespace w = ::xla::ifrt::proxy;

constexpr char kSessionMetadataKey[] = "ifrt-proxy-grpc-ifrt-session-metadata-bin";
constexpr char kStoreMetadataKey[] = "ifrt-proxy-grpc-host-buffer-store-metadata-bin";
constexpr size_t kLookupChunkBytes = 1 << 20;

// A failed session's answer to `request`: the reason it failed, but for destructions.
// Those free what the session holds of them and succeed whatever it knew (arrays whose
// making was refused are unknown to it): they cannot fail, and the client batches them,
// logging an error for every one refused.
w::IfrtResponse AnswerFailed(Session& session, const w::IfrtRequest& request,
                             const absl::Status& failed) {
  w::IfrtResponse answer;
  answer.mutable_response_metadata()->set_op_id(request.request_metadata().op_id());
  if (request.has_destruct_array_request()) {
    (void)session.Process(request);
    answer.mutable_destruct_array_response();
  } else if (request.has_loaded_executable_destruct_request()) {
    (void)session.Process(request);
    answer.mutable_loaded_executable_destruct_response();
  } else {
    *answer.mutable_response_metadata()->mutable_status() = ToStatusProto(failed);
  }
  return answer;
}

// The binary metadata value under `key`, parsed into `message`.
template <typename Message>
absl::Status ReadMetadata(const grpc::ServerContext& context, const char* key, Message* message) {
  const auto& metadata = context.client_metadata();
  auto it = metadata.find(key);
  if (it == metadata.end()) {
    return absl::InvalidArgumentError(absl::StrCat("missing gRPC metadata '", key, "'"));
  }
  if (!message->ParseFromArray(it->second.data(), static_cast<int>(it->second.size()))) {
    return absl::InvalidArgumentError(absl::StrCat("malformed gRPC metadata '", key, "'"));
  }
  return absl::OkStatus();
}

using SessionStream = IfrtService::SessionStream;

// The next request of the session: false at the end of the stream, INVALID_ARGUMENT
// for bytes that are not an IfrtRequest (`number` counts the requests, from 1).
absl::StatusOr<bool> ReadRequest(SessionStream* stream, int64_t number, w::IfrtRequest* request) {
  grpc::ByteBuffer bytes;
  if (!stream->Read(&bytes)) return false;
  const size_t size = bytes.Length();
  if (!grpc::SerializationTraits<w::IfrtRequest>::Deserialize(&bytes, request).ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("request ", number, " of the session (", size,
                     " bytes) is not an IfrtRequest protobuf; the session ends"));
  }
  return true;
}

bool WriteResponse(SessionStream* stream, const w::IfrtResponse& response) {
  grpc::ByteBuffer bytes;
  bool own_buffer;
  if (!grpc::SerializationTraits<w::IfrtResponse>::Serialize(response, &bytes, &own_buffer).ok()) {
    return false;
  }
  return stream->Write(bytes);
}

// Ends a session before it starts. jaxlib's client reports a stream that ends before
// it answers Init as a bare CANCELLED; an answer to Init carrying the error reaches the
// user word for word.
grpc::Status Refuse(SessionStream* stream, const absl::Status& status) {
  w::IfrtRequest request;
  absl::StatusOr<bool> read = ReadRequest(stream, 1, &request);
  if (!read.ok()) return ToGrpcStatus(read.status());
  if (*read) {
    w::IfrtResponse refused;
    refused.mutable_response_metadata()->set_op_id(request.request_metadata().op_id());
    *refused.mutable_response_metadata()->mutable_status() = ToStatusProto(status);
    WriteResponse(stream, refused);
  }
  return ToGrpcStatus(status);
}

// The index of `name` in the IFRT proxy service, as gRPC numbers its methods: where
// the generated service keeps it, to serve it with bytes.
int MethodIndex(const char* name) {
  const google::protobuf::ServiceDescriptor* service =
      google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(
          "xla.ifrt.proxy.GrpcIfrtService");
  const google::protobuf::MethodDescriptor* method =
      service == nullptr ? nullptr : service->FindMethodByName(name);
  if (method == nullptr) {
    SY_LOG(Error) << "the IFRT proxy service compiled in has no " << name << " method";
    std::abort();
  }
  return method->index();
}

// The attribute of a session's initialization data naming the slices it asks for
// (GENERATION:TOPOLOGY,...), instead of the proxy's --virtual_slices.
constexpr char kVirtualSlicesAttribute[] = "switchyard_virtual_slices";
// How long a placed session waits for its slices to appear in the proxy's fleet view.
constexpr absl::Duration kSliceViewWait = absl::Seconds(5);

}  // namespace

IfrtService::IfrtService(Fleet* fleet, IfrtServiceOptions options)
    : fleet_(fleet),
      options_(std::move(options)),
      host_buffer_budget_(
          std::make_shared<HostBufferBudget>(options_.proxy_max_host_buffer_bytes)) {
  // The handlers the generated code made parse the messages themselves; these take them
  // as bytes (see ServeSession, ServeStore, ServeLookup). Same methods: a client sees no
  // difference but the errors for bytes that do not parse, and the copies saved.
  using Serve = grpc::Status (IfrtService::*)(grpc::ServerContext*, SessionStream*);
  const std::pair<const char*, Serve> methods[] = {{"IfrtSession", &IfrtService::ServeSession},
                                                   {"HostBufferStore", &IfrtService::ServeStore},
                                                   {"HostBufferLookup", &IfrtService::ServeLookup}};
  for (const auto& method : methods) {
    const Serve serve = method.second;  // a copy: clang 14 captures no structured binding
    MarkMethodStreamed(
        MethodIndex(method.first),
        new grpc::internal::BidiStreamingHandler<IfrtService, grpc::ByteBuffer, grpc::ByteBuffer>(
            [serve](IfrtService* service, grpc::ServerContext* context, SessionStream* stream) {
              return (service->*serve)(context, stream);
            },
            this));
  }
  const bool reap_idle = options_.session_idle_timeout > absl::ZeroDuration();
  const bool end_stalled = options_.client_stall_timeout > absl::ZeroDuration();
  if (reap_idle || end_stalled) {
    reaper_ = std::thread([this, reap_idle, end_stalled] {
      NameThisThread("sy-reaper");
      absl::Duration period = absl::Seconds(1);
      if (reap_idle) period = std::min(period, options_.session_idle_timeout / 4);
      if (end_stalled) period = std::min(period, options_.client_stall_timeout / 4);
      while (!stop_.WaitForNotificationWithTimeout(period)) {
        if (reap_idle) ReapIdle();
        if (end_stalled) EndStalledCalls();
      }
    });
  }
}

IfrtService::~IfrtService() {
  stop_.Notify();
  if (reaper_.joinable()) reaper_.join();
}

void IfrtService::WaitForSlicesInView(const std::set<int>& slices) const {
  // The RM may place a session on a slice that joined a moment ago, before this proxy's
  // fleet watch has shown it: wait (briefly) so that Init lists its devices.
  const absl::Time deadline = absl::Now() + kSliceViewWait;
  while (absl::Now() < deadline) {
    std::set<int> seen;
    for (const DeviceEntry& entry : fleet_->Devices()) seen.insert(entry.info.slice_index());
    if (std::includes(seen.begin(), seen.end(), slices.begin(), slices.end())) return;
    absl::SleepFor(absl::Milliseconds(20));
  }
}

void IfrtService::ReapIdle() {
  std::vector<std::pair<std::shared_ptr<SliceLease>, absl::Duration>> idle;
  const absl::Time now = absl::Now();
  {
    absl::MutexLock lock(&mutex_);
    for (const auto& [id, session] : sessions_) {
      if (session.lease == nullptr) continue;
      const absl::Duration idle_for = session.activity->IdleFor(now);
      if (idle_for >= options_.session_idle_timeout) idle.emplace_back(session.lease, idle_for);
    }
  }
  for (const auto& [lease, idle_for] : idle) {
    lease->Lose(absl::StrCat("idle for ",
                             absl::FormatDuration(absl::Trunc(idle_for, absl::Seconds(1))),
                             "; its slices went back to the pool (--session_idle_timeout=",
                             absl::FormatDuration(options_.session_idle_timeout), ")"));
  }
}

void IfrtService::EndStalledCalls() {
  std::vector<std::pair<uint64_t, std::shared_ptr<proxy::HostBufferStore>>> stores;
  {
    absl::MutexLock lock(&mutex_);
    for (const auto& [id, session] : sessions_) stores.emplace_back(id, session.store);
  }
  const absl::Time now = absl::Now();
  for (const auto& [id, store] : stores) {
    const int ended = store->EndStalledCalls(now, options_.client_stall_timeout);
    if (ended > 0) {
      client_stalls_ += ended;
      SY_LOG(Warning) << "session " << id << ": ended " << ended
                      << " host buffer transfer(s) whose client sent or read nothing for "
                      << absl::FormatDuration(options_.client_stall_timeout)
                      << " (--client_stall_timeout)";
    }
  }
}

grpc::Status IfrtService::GetVersion(grpc::ServerContext* context,
                                     const w::GrpcGetVersionRequest* request,
                                     w::GrpcGetVersionResponse* response) {
  auto chosen = ChooseVersion({request->min_version().protocol_version(),
                               request->min_version().ifrt_serdes_version_number()},
                              {request->max_version().protocol_version(),
                               request->max_version().ifrt_serdes_version_number()});
  if (!chosen.ok()) {
    SY_LOG(Warning) << "refused client " << PeerIdentity(context->peer()) << ": "
                    << chosen.status().message();
    return ToGrpcStatus(chosen.status());
  }
  response->mutable_version()->set_protocol_version(chosen->protocol);
  response->mutable_version()->set_ifrt_serdes_version_number(chosen->serdes);
  return grpc::Status::OK;
}

absl::StatusOr<std::string> IfrtService::Admit(const std::string& client, absl::string_view token) {
  absl::StatusOr<std::string> tenant = options_.tokens.Authenticate(token);
  if (tenant.ok()) return tenant;
  // jaxlib's client retries a refused session every second until its connection
  // timeout: one line per 10 s is enough.
  const int64_t refused_before = sessions_refused_.fetch_add(1);
  const int64_t now_s = absl::ToUnixSeconds(absl::Now());
  int64_t logged_s = last_refusal_logged_s_.load();
  if (now_s - logged_s >= 10 && last_refusal_logged_s_.compare_exchange_strong(logged_s, now_s)) {
    SY_LOG(Warning) << "refused a session from " << client << ": " << tenant.status().message()
                    << " (" << refused_before + 1 << " refused so far)";
  }
  return tenant;
}

grpc::Status IfrtService::ServeSession(grpc::ServerContext* context, SessionStream* stream) {
  w::GrpcIfrtSessionMetadata metadata;
  absl::Status status = ReadMetadata(*context, kSessionMetadataKey, &metadata);
  if (!status.ok()) return ToGrpcStatus(status);
  const Version version{metadata.version().protocol_version(),
                        metadata.version().ifrt_serdes_version_number()};
  if (version.protocol < kProtocolMin || version.protocol > kProtocolMax) {
    return ToGrpcStatus(absl::InvalidArgumentError(
        absl::StrCat("session asks for protocol version ", version.protocol, "; Switchyard speaks ",
                     kProtocolMin, "..", kProtocolMax)));
  }
  std::string token;
  const auto& attributes = metadata.initialization_data().attributes();
  if (auto it = attributes.find(kTokenAttribute); it != attributes.end()) {
    token = it->second.string_value();
  }
  absl::StatusOr<std::string> tenant = Admit(PeerIdentity(context->peer()), token);
  if (!tenant.ok()) return Refuse(stream, tenant.status());
  std::vector<SliceShape> shapes = options_.virtual_slices;
  if (auto it = attributes.find(kVirtualSlicesAttribute); it != attributes.end()) {
    absl::StatusOr<std::vector<SliceShape>> asked =
        ParseSliceShapes(it->second.string_value(), kVirtualSlicesAttribute);
    if (!asked.ok()) return Refuse(stream, asked.status());
    shapes = *std::move(asked);
  }
  auto store = std::make_shared<proxy::HostBufferStore>(options_.session_max_host_buffer_bytes,
                                                        host_buffer_budget_);
  // The client: its host over TCP, its process on a Unix socket (a log's "opened by").
  const std::string client = PeerIdentity(context->peer());
  uint64_t session_id;
  {
    absl::MutexLock lock(&mutex_);
    do {
      session_id = absl::Uniform<uint64_t>(random_, 1, UINT64_MAX);
    } while (sessions_.count(session_id) > 0);
    sessions_[session_id] = OpenSession{store, client};
  }
  // Registered before the first request, so host-buffer RPCs find it at once.
  absl::Cleanup unregister = [&] {
    store->Shutdown();
    {
      absl::MutexLock lock(&mutex_);
      sessions_.erase(session_id);
    }
    sessions_ended_.fetch_add(1);
  };
  SessionPolicy policy;
  policy.label = absl::StrCat(++sessions_opened_, " (", *tenant, ")");
  if (options_.tokens.required()) policy.tenant = *tenant;
  policy.num_elastic_slices = options_.num_elastic_slices;
  policy.max_arrays = options_.session_max_arrays;
  policy.storage_mount_root = options_.storage_mount_root;
  policy.upload_plane = options_.upload_plane;
  SY_LOG(Info) << "session " << policy.label << " opened by " << client << " (protocol "
               << version.protocol << ", SerDes " << version.serdes << ")";
  // A session of the shared pool waits for its slices before it answers Init: the
  // client sees its devices once they are placed.
  std::shared_ptr<SliceLease> lease;
  auto activity = std::make_shared<SessionActivity>();
  absl::Cleanup close_lease = [&lease] {
    if (lease != nullptr) lease->Close();  // before `context` goes: on_lost uses it
  };
  if (!shapes.empty()) {
    lease = std::make_shared<SliceLease>(fleet_->rm_address(), policy.label, *tenant, shapes,
                                         [context] { context->TryCancel(); });
    absl::StatusOr<std::vector<int>> slices =
        lease->WaitPlaced([context] { return context->IsCancelled(); });
    if (!slices.ok()) {
      SY_LOG(Warning) << "session " << policy.label << " got no slices: " << slices.status();
      return Refuse(stream, slices.status());
    }
    policy.slices.emplace(slices->begin(), slices->end());
    WaitForSlicesInView(*policy.slices);
    activity->Touch();
    absl::MutexLock lock(&mutex_);
    sessions_[session_id].lease = lease;
    sessions_[session_id].activity = activity;
  }
  int64_t requests = 0;
  absl::Status ended;  // how the stream ends: OK unless the client sent what does not parse
  {
    // Answers that come later are written from other threads, until the loop ends.
    auto sink = std::make_shared<proxy::ResponseSink>(
        [stream, activity](const w::IfrtResponse& response) {
          activity->Answered();
          return WriteResponse(stream, response);
        },
        [context] { context->TryCancel(); });
    const std::string label = policy.label;
    Session session(
        session_id, version, fleet_, store, [context] { return context->IsCancelled(); }, sink,
        std::move(policy));
    ended = ServeRequests(stream, session, *sink, *activity, lease.get(), label, &requests);
    // The client is done: answers still on their way are dropped, so that a worker's
    // reader thread never blocks writing to a stream nobody reads while the session
    // below waits for that worker.
    sink->Close();
    SY_LOG(Info) << "session " << label << " ended after " << requests << " requests; freeing "
                 << session.arrays() << " arrays";
  }
  return ToGrpcStatus(ended);
}

absl::Status IfrtService::ServeRequests(SessionStream* stream, Session& session, ResponseSink& sink,
                                        SessionActivity& activity, SliceLease* lease,
                                        const std::string& label, int64_t* requests) {
  absl::Status failed;  // set once the session has failed (--num_elastic_slices)
  int64_t failed_requests = 0;
  w::IfrtRequest request;
  while (true) {
    absl::StatusOr<bool> read = ReadRequest(stream, *requests + 1, &request);
    if (!read.ok()) {
      SY_LOG(Warning) << "session " << label << ": " << read.status().message();
      return read.status();
    }
    if (!*read) return absl::OkStatus();
    RecordWire("ifrt_request", request);
    activity.Asked();
    ++*requests;
    ++requests_;
    client_bytes_in_ += static_cast<int64_t>(request.ByteSizeLong());
    if (failed.ok()) failed = session.Health();
    if (failed.ok() && lease != nullptr) failed = lease->Held();
    if (!failed.ok()) {
      // A failed session answers every request with the reason, until the client goes.
      if (failed_requests++ == 0) SY_LOG(Warning) << failed.message();
      if (!sink.Write(AnswerFailed(session, request, failed))) return absl::OkStatus();
      continue;
    }
    std::optional<w::IfrtResponse> response = session.Process(request);
    if (response.has_value() && !sink.Write(*std::move(response))) return absl::OkStatus();
  }
}

absl::StatusOr<std::shared_ptr<proxy::HostBufferStore>> IfrtService::FindStore(
    const grpc::ServerContext& context, uint64_t session_id) const {
  absl::MutexLock lock(&mutex_);
  auto it = sessions_.find(session_id);
  // Only the client that opened the session (its process on a Unix socket, its host
  // over TCP) reaches its host buffers; to anyone else the session does not exist, and
  // the error does not repeat the id.
  if (it == sessions_.end() || it->second.client != PeerIdentity(context.peer())) {
    return absl::NotFoundError("no such session for this client");
  }
  return it->second.store;
}

absl::StatusOr<std::shared_ptr<proxy::HostBufferStore>> IfrtService::FindUploadStore(
    const grpc::ServerContext& context, const w::GrpcHostBufferStoreMetadata& metadata) const {
  SY_ASSIGN_OR_RETURN(auto store, FindStore(context, metadata.session_id()));
  if (metadata.buffer_size() < 0) return absl::InvalidArgumentError("negative buffer_size");
  if (memory_bytes_ > 0 && metadata.buffer_size() > memory_bytes_) {
    return absl::ResourceExhaustedError(absl::StrCat("host buffer of ", metadata.buffer_size(),
                                                     " bytes; this machine has ", memory_bytes_));
  }
  return store;
}

int64_t IfrtService::sessions() const {
  absl::MutexLock lock(&mutex_);
  return sessions_.size();
}

grpc::Status IfrtService::ServeStore(grpc::ServerContext* context, SessionStream* stream) {
  w::GrpcHostBufferStoreMetadata metadata;
  absl::Status status = ReadMetadata(*context, kStoreMetadataKey, &metadata);
  if (!status.ok()) return ToGrpcStatus(status);
  RecordWire("host_buffer_metadata", metadata);
  absl::StatusOr<std::shared_ptr<proxy::HostBufferStore>> store =
      FindUploadStore(*context, metadata);
  if (!store.ok()) return ToGrpcStatus(store.status());
  // Ended with the session, also once a request has taken the buffer out of the store.
  const uint64_t call = (*store)->AddCall([context] { context->TryCancel(); });
  absl::Cleanup forget_call = [&] { (*store)->RemoveCall(call); };
  // Visible to the session at once: an array made from it goes on to its worker while
  // the rest arrives. Read no further ahead of the worker than the window (its reader
  // may stream it on), and only the window charged until a reader needs it whole.
  auto buffer =
      (*store)->Begin(metadata.handle(), metadata.buffer_size(), limits::kHostBufferWindowBytes);
  if (!buffer.ok()) return ToGrpcStatus(buffer.status());
  auto cancelled = [context] { return context->IsCancelled(); };
  absl::Status received;
  grpc::ByteBuffer chunk;
  int64_t arrived = 0;
  while (received.ok()) {
    (*store)->WaitsOnClient(call, absl::Now());
    const bool more = stream->Read(&chunk);
    (*store)->ClientAnswered(call);
    if (!more) break;
    received =
        (*buffer)->WaitRoom(arrived + static_cast<int64_t>(chunk.Length()),
                            absl::Now() + absl::Milliseconds(limits::kUploadRoomWaitMs), cancelled);
    int64_t bytes = 0;
    if (received.ok()) received = proxy::AppendStoreChunk(chunk, **buffer, &bytes);
    arrived += bytes;
    client_bytes_in_ += bytes;
    CountCopied(bytes);  // the kernel's (then Append's)
  }
  (*buffer)->Finish(received);
  absl::Status complete = (*buffer)->Completion();
  if (!complete.ok()) {
    (void)(*store)->Delete(metadata.handle());
    return ToGrpcStatus(
        absl::Status(complete.code(),
                     absl::StrCat("host buffer ", metadata.handle(), ": ", complete.message())));
  }
  grpc::ByteBuffer done;
  bool own_buffer;
  if (!grpc::SerializationTraits<w::GrpcHostBufferStoreResponse>::Serialize(
           w::GrpcHostBufferStoreResponse(), &done, &own_buffer)
           .ok() ||
      !stream->Write(done)) {
    return grpc::Status(grpc::StatusCode::CANCELLED, "client went away");
  }
  return grpc::Status::OK;
}

grpc::Status IfrtService::ServeLookup(grpc::ServerContext* context, SessionStream* stream) {
  w::GrpcHostBufferLookupRequest request;
  grpc::ByteBuffer bytes;
  if (!stream->Read(&bytes)) {
    return ToGrpcStatus(absl::InvalidArgumentError("HostBufferLookup without a request"));
  }
  if (!grpc::SerializationTraits<w::GrpcHostBufferLookupRequest>::Deserialize(&bytes, &request)
           .ok()) {
    return ToGrpcStatus(absl::InvalidArgumentError(
        "the request to /xla.ifrt.proxy.GrpcIfrtService/HostBufferLookup is not a "
        "GrpcHostBufferLookupRequest (truncated or malformed protobuf)"));
  }
  trace::Scoped span("host_buffer_lookup", "request", request.session_id());
  absl::StatusOr<std::shared_ptr<proxy::HostBufferStore>> store =
      FindStore(*context, request.session_id());
  if (!store.ok()) return ToGrpcStatus(store.status());
  // Ended with the session, also while its writes wait on a client that stopped reading.
  const uint64_t call = (*store)->AddCall([context] { context->TryCancel(); });
  if (call == 0) return ToGrpcStatus(absl::CancelledError("the session has ended"));
  absl::Cleanup forget_call = [&] { (*store)->RemoveCall(call); };
  auto buffer = (*store)->Lookup(request.handle(), absl::ZeroDuration());
  if (!buffer.ok()) return ToGrpcStatus(buffer.status());
  // Sent as it arrives: a fetch being streamed from a worker goes on to the client
  // chunk by chunk, each a slice of the buffer's memory.
  const absl::Time deadline = absl::Now() + absl::Minutes(10);
  auto cancelled = [context] { return context->IsCancelled(); };
  const HostBuffer& host = **buffer;
  if (!host.TakeReader()) {
    return ToGrpcStatus(absl::FailedPreconditionError(absl::StrCat(
        "host buffer ", request.handle(),
        " is being read by another lookup: a fetch streamed through the proxy is read once")));
  }
  int64_t offset = 0;
  int64_t arrived = 0;
  do {  // at least one message, even for an empty buffer
    // A buffer sized by its fill (a string array) is known whole only at the end.
    absl::StatusOr<absl::string_view> data =
        host.size() == 0 ? host.WaitAll(deadline, cancelled)
                         : host.StreamFor(offset + kLookupChunkBytes, deadline, cancelled);
    if (!data.ok()) return ToGrpcStatus(data.status());
    arrived = static_cast<int64_t>(data->size());
    const int64_t n = std::min<int64_t>(kLookupChunkBytes, arrived - offset);
    // The last chunk goes out with the call's status: one write fewer (most of a small
    // fetch's lookup).
    const bool last = offset + n >= std::max<int64_t>(arrived, host.size());
    grpc::WriteOptions options;
    if (last) options.set_last_message();
    (*store)->WaitsOnClient(call, absl::Now());
    const bool written =
        stream->Write(proxy::LookupChunk(*buffer, offset, data->substr(offset, n)), options);
    (*store)->ClientAnswered(call);
    if (!written) return grpc::Status(grpc::StatusCode::CANCELLED, "client went away");
    CountCopied(n);  // the kernel's
    client_bytes_out_ += n;
    offset += n;
  } while (offset < arrived || offset < host.size());
  return grpc::Status::OK;
}

grpc::Status IfrtService::HostBufferDelete(grpc::ServerContext* context,
                                           const w::GrpcHostBufferDeleteRequest* request,
                                           w::GrpcHostBufferDeleteResponse* response) {
  trace::Scoped span("host_buffer_delete", "request", request->session_id());
  absl::StatusOr<std::shared_ptr<proxy::HostBufferStore>> store =
      FindStore(*context, request->session_id());
  if (!store.ok()) return ToGrpcStatus(store.status());
  return ToGrpcStatus((*store)->Delete(request->handle()));
}

grpc::Status IfrtService::HostBufferReadFromDisk(
    grpc::ServerContext* context, const w::GrpcHostBufferReadFromDiskRequest* request,
    w::GrpcHostBufferReadFromDiskResponse* response) {
  if (options_.large_transfer_directory.empty()) {
    return ToGrpcStatus(absl::FailedPreconditionError(
        "this proxy takes no host buffers from files (it has no --large_transfer_directory); "
        "unset IFRT_PROXY_GRPC_LARGE_TRANSFER_OPTIMIZATION_DIRECTORY on the client"));
  }
  const w::GrpcHostBufferStoreMetadata& metadata = request->metadata();
  absl::StatusOr<std::shared_ptr<proxy::HostBufferStore>> store =
      FindUploadStore(*context, metadata);
  if (!store.ok()) return ToGrpcStatus(store.status());
  // Checked before anything is allocated for it.
  const std::string path = LargeTransferPath(options_.large_transfer_directory, metadata.handle());
  absl::StatusOr<LargeTransferFile> file = LargeTransferFile::Open(path, metadata.buffer_size());
  if (!file.ok()) return ToGrpcStatus(file.status());
  auto buffer = (*store)->Begin(metadata.handle(), metadata.buffer_size());
  if (!buffer.ok()) return ToGrpcStatus(buffer.status());
  absl::Status read = file->ReadInto(**buffer);
  if (!read.ok()) {
    (void)(*store)->Delete(metadata.handle());
    return ToGrpcStatus(absl::Status(
        read.code(), absl::StrCat("host buffer ", metadata.handle(), ": ", read.message())));
  }
  client_bytes_in_ += metadata.buffer_size();
  return grpc::Status::OK;
}

}  // namespace switchyard::proxy
