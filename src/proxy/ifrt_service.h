#pragma once

// gRPC adapter for xla.ifrt.proxy.GrpcIfrtService: version negotiation, the
// session stream (metadata, session map, request pump) and the host-buffer RPCs.
// Request semantics live in `Session`.

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/random/random.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/bulk_server.h"
#include "common/limits.h"
#include "common/machine_memory.h"
#include "common/slice_shape.h"
#include "ifrt/grpc_ifrt_service.grpc.pb.h"
#include "proxy/fleet.h"
#include "proxy/host_buffer_store.h"
#include "proxy/slice_lease.h"
#include "proxy/tenants.h"

namespace switchyard::proxy {

class ResponseSink;
class Session;

struct IfrtServiceOptions {
  int num_elastic_slices = -1;                // see SessionPolicy
  TenantTokens tokens;                        // none: every session is let in
  int64_t session_max_arrays = 0;             // see SessionPolicy; 0: no bound
  std::string storage_mount_root;             // see SessionPolicy
  int64_t session_max_host_buffer_bytes = 0;  // see HostBufferStore; 0: no bound
  int64_t proxy_max_host_buffer_bytes = 0;    // see HostBufferBudget; 0: no bound
  // Each session leases slices of these shapes (SliceLease) unless it asks for others;
  // empty: sessions that ask for none see the whole fleet.
  std::vector<SliceShape> virtual_slices;
  // A session holding leased slices that has nothing in flight and sends no request for
  // this long loses them (SliceLease::Lose) and then ends; zero: never.
  absl::Duration session_idle_timeout = absl::ZeroDuration();
  // An upload or a fetch's lookup waiting this long on its client ends (CANCELLED, its
  // bytes let go; HostBufferStore::EndStalledCalls); zero: never.
  absl::Duration client_stall_timeout = absl::Milliseconds(limits::kClientStallMs);
  // Where clients on this host may leave large host buffers for the proxy to take
  // (proxy/large_transfer.h); empty: they may not.
  std::string large_transfer_directory;
  // See SessionPolicy; outlives the service.
  bulk::Server* upload_plane = nullptr;
};

// Whether a session is idle: requests answered, none for a while. Thread-safe.
class SessionActivity {
 public:
  void Asked() {
    asked_.fetch_add(1);
    last_ns_.store(absl::GetCurrentTimeNanos());
  }
  void Answered() {
    answered_.fetch_add(1);
    last_ns_.store(absl::GetCurrentTimeNanos());
  }
  // Starts the idle clock now (a session placed after a long wait in the queue).
  void Touch() { last_ns_.store(absl::GetCurrentTimeNanos()); }
  // How long nothing happened; zero while a request is unanswered.
  absl::Duration IdleFor(absl::Time now) const {
    if (answered_.load() < asked_.load()) return absl::ZeroDuration();
    return now - absl::FromUnixNanos(last_ns_.load());
  }

 private:
  std::atomic<int64_t> asked_{0};
  std::atomic<int64_t> answered_{0};
  std::atomic<int64_t> last_ns_{absl::GetCurrentTimeNanos()};
};

class IfrtService final : public ::xla::ifrt::proxy::GrpcIfrtService::Service {
 public:
  // The session stream as it is served: bytes, parsed here (see ServeSession); the
  // host-buffer calls are served as such streams too.
  using SessionStream = grpc::ServerReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>;

  IfrtService(Fleet* fleet, IfrtServiceOptions options);
  ~IfrtService() override;

  grpc::Status GetVersion(grpc::ServerContext* context,
                          const ::xla::ifrt::proxy::GrpcGetVersionRequest* request,
                          ::xla::ifrt::proxy::GrpcGetVersionResponse* response) override;
  // Serves the IfrtSession method. It takes the requests as bytes and parses them
  // itself: gRPC's own parse ends a stream whose message does not parse as if the
  // client had closed it (status OK); here it ends with INVALID_ARGUMENT saying which.
  grpc::Status ServeSession(grpc::ServerContext* context, SessionStream* stream);
  // Reads the session's requests and answers them (a failed session with its reason)
  // until the client is done or its stream breaks, counting them in `requests`. Returns
  // how the stream ends: OK unless the client sent what does not parse.
  absl::Status ServeRequests(SessionStream* stream, Session& session, ResponseSink& sink,
                             SessionActivity& activity, SliceLease* lease, const std::string& label,
                             int64_t* requests);
  // Serve HostBufferStore and HostBufferLookup: their messages as bytes, read into and
  // sent from the host buffer's own memory (proxy/host_buffer_wire.h).
  grpc::Status ServeStore(grpc::ServerContext* context, SessionStream* stream);
  grpc::Status ServeLookup(grpc::ServerContext* context, SessionStream* stream);
  grpc::Status HostBufferDelete(
      grpc::ServerContext* context, const ::xla::ifrt::proxy::GrpcHostBufferDeleteRequest* request,
      ::xla::ifrt::proxy::GrpcHostBufferDeleteResponse* response) override;
  grpc::Status HostBufferReadFromDisk(
      grpc::ServerContext* context,
      const ::xla::ifrt::proxy::GrpcHostBufferReadFromDiskRequest* request,
      ::xla::ifrt::proxy::GrpcHostBufferReadFromDiskResponse* response) override;

  // The tenant `token` names, for a session (or a client asking before it opens one)
  // from `client`; UNAUTHENTICATED, counted and logged, if it opens none here.
  absl::StatusOr<std::string> Admit(const std::string& client, absl::string_view token);

  int64_t sessions() const ABSL_LOCKS_EXCLUDED(mutex_);
  // Bytes of host buffers all sessions hold on the proxy now.
  int64_t host_buffer_bytes() const { return host_buffer_budget_->held(); }
  int64_t host_buffer_bytes_max() const { return host_buffer_budget_->max_bytes(); }
  int64_t requests() const { return requests_.load(); }
  // Bytes of requests and host buffers from clients, and of host buffers to them: what
  // passes through the proxy (checkpoints written by the workers add nothing).
  int64_t client_bytes_in() const { return client_bytes_in_.load(); }
  int64_t client_bytes_out() const { return client_bytes_out_.load(); }
  // Uploads and fetches ended for a client that stalled (--client_stall_timeout).
  int64_t client_stalls() const { return client_stalls_.load(); }
  int64_t sessions_opened() const { return sessions_opened_.load(); }
  int64_t sessions_ended() const { return sessions_ended_.load(); }
  int64_t sessions_refused() const { return sessions_refused_.load(); }

 private:
  // The session's store, if the call comes from the host that opened the session.
  // Host-buffer RPCs carry nothing but the session id (a random 64-bit secret of the
  // client's, never logged), and jaxlib's client sends them on a channel of their own,
  // so the connection cannot be matched; the host can, and a leaked id is no use
  // elsewhere. NOT_FOUND otherwise.
  absl::StatusOr<std::shared_ptr<proxy::HostBufferStore>> FindStore(
      const grpc::ServerContext& context, uint64_t session_id) const ABSL_LOCKS_EXCLUDED(mutex_);
  // The store an upload described by `metadata` goes to, once its size is one this
  // machine could hold.
  absl::StatusOr<std::shared_ptr<proxy::HostBufferStore>> FindUploadStore(
      const grpc::ServerContext& context,
      const ::xla::ifrt::proxy::GrpcHostBufferStoreMetadata& metadata) const
      ABSL_LOCKS_EXCLUDED(mutex_);

  struct OpenSession {
    std::shared_ptr<proxy::HostBufferStore> store;
    std::string client;                 // PeerIdentity of the session's connection
    std::shared_ptr<SliceLease> lease;  // of the shared pool, once placed
    std::shared_ptr<SessionActivity> activity;
  };
  // Takes the slices back from sessions idle past --session_idle_timeout.
  void ReapIdle() ABSL_LOCKS_EXCLUDED(mutex_);
  // Ends the host buffer transfers stalled on their client (--client_stall_timeout).
  void EndStalledCalls() ABSL_LOCKS_EXCLUDED(mutex_);
  void WaitForSlicesInView(const std::set<int>& slices) const;

  Fleet* fleet_;
  const IfrtServiceOptions options_;
  // All sessions' host buffers together (--proxy_max_host_buffer_bytes).
  const std::shared_ptr<HostBufferBudget> host_buffer_budget_;
  // The memory the host gives the proxy (read once: it is files under /sys and /proc).
  const int64_t memory_bytes_ = MemoryLimitBytes();
  std::atomic<int64_t> requests_{0};
  std::atomic<int64_t> client_bytes_in_{0};
  std::atomic<int64_t> client_bytes_out_{0};
  std::atomic<int64_t> client_stalls_{0};
  std::atomic<int64_t> sessions_opened_{0};
  std::atomic<int64_t> sessions_ended_{0};    // of those opened
  std::atomic<int64_t> sessions_refused_{0};  // no valid token (also asked before a session)
  std::atomic<int64_t> last_refusal_logged_s_{0};
  mutable absl::Mutex mutex_;
  // Session ids are random: the host-buffer RPCs carry only an id and a handle.
  absl::BitGen random_ ABSL_GUARDED_BY(mutex_);
  std::map<uint64_t, OpenSession> sessions_ ABSL_GUARDED_BY(mutex_);
  absl::Notification stop_;
  std::thread reaper_;
};

}  // namespace switchyard::proxy
