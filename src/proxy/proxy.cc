#include "proxy/proxy.h"

#include <malloc.h>

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/bulk_server.h"
#include "common/copy_count.h"
#include "common/grpc_server.h"
#include "common/grpc_status.h"
#include "common/heap_trim.h"
#include "common/host_bytes.h"
#include "common/huge_pages.h"
#include "common/limits.h"
#include "common/logging.h"
#include "common/machine_memory.h"
#include "common/metrics.h"
#include "common/slice_shape.h"
#include "common/status_macros.h"
#include "proxy/access_service.h"
#include "proxy/fleet.h"
#include "proxy/host_buffer_store.h"
#include "proxy/host_callbacks.h"
#include "proxy/ifrt_service.h"
#include "proxy/rm_report.h"
#include "proxy/worker_calls.h"
#include "proxy/worker_connection.h"

namespace switchyard::proxy {
namespace {

class ProxyServerImpl final : public ProxyServer {
 public:
  ProxyServerImpl(std::unique_ptr<HostCallbackService> callbacks, std::unique_ptr<Fleet> fleet,
                  std::unique_ptr<bulk::Server> plane, std::unique_ptr<IfrtService> service,
                  std::unique_ptr<AccessService> access, StartedServer server)
      : callbacks_(std::move(callbacks)),
        fleet_(std::move(fleet)),
        plane_(std::move(plane)),
        service_(std::move(service)),
        access_(std::move(access)),
        server_(std::move(server)),
        // Gives freed heap back once a session has ended and the proxy is idle.
        heap_trimmer_(
            [service = service_.get()] {
              return service->requests() + service->client_bytes_in() + service->client_bytes_out();
            },
            [service = service_.get()] { return service->sessions_ended(); },
            HeapTrimPolicy::Options{}),
        reporter_(std::make_unique<RmReporter>(
            fleet_->rm_address(), fleet_->proxy_id(), server_.address, [service = service_.get()] {
              return ProxyLoad{service->host_buffer_bytes(), service->sessions()};
            })) {}
  ~ProxyServerImpl() override {
    Shutdown();
    // Its results go to the fleet's connections: stop it before they go. The fleet's
    // readers may still hand it calls, which then fail.
    callbacks_->Stop();
  }

  absl::Status StartMetrics(const std::string& host, int port) {
    SY_ASSIGN_OR_RETURN(
        metrics_, MetricsServer::StartIfEnabled(host, port, [this] {
          MetricsText text;
          text.Add("switchyard_proxy_sessions", "gauge", "Open client sessions.",
                   service_->sessions())
              .Add("switchyard_proxy_sessions_total", "counter", "Client sessions opened.",
                   service_->sessions_opened())
              .Add("switchyard_proxy_sessions_refused_total", "counter",
                   "Client sessions refused for want of a valid token.",
                   service_->sessions_refused())
              .Add("switchyard_proxy_requests_total", "counter", "IFRT requests answered.",
                   service_->requests())
              .Add("switchyard_proxy_client_bytes_total", "counter",
                   "Bytes of requests and host buffers from clients.", service_->client_bytes_in(),
                   MetricLabel("direction", "in"))
              .Add("switchyard_proxy_client_bytes_total", "counter",
                   "Bytes of host buffers to clients.", service_->client_bytes_out(),
                   MetricLabel("direction", "out"))
              .Add("switchyard_proxy_worker_bytes_read_total", "counter",
                   "Bytes of buffers read from workers, by path.", BufferReads().bulk_bytes.load(),
                   MetricLabel("path", "bulk"))
              .Add("switchyard_proxy_worker_bytes_read_total", "counter",
                   "Bytes of buffers read from workers, by path.",
                   BufferReads().inline_bytes.load(), MetricLabel("path", "grpc"))
              .Add("switchyard_proxy_bulk_fallbacks_total", "counter",
                   "Data-plane offers read over gRPC instead.", BufferReads().fallbacks.load())
              .Add("switchyard_proxy_worker_bytes_written_total", "counter",
                   "Bytes of buffers put on workers, by path.", BufferWrites().bulk_bytes.load(),
                   MetricLabel("path", "bulk"))
              .Add("switchyard_proxy_worker_bytes_written_total", "counter",
                   "Bytes of buffers put on workers, by path.", BufferWrites().inline_bytes.load(),
                   MetricLabel("path", "grpc"))
              .Add("switchyard_proxy_bulk_put_fallbacks_total", "counter",
                   "Puts offered on the data plane that went over gRPC instead.",
                   BufferWrites().fallbacks.load())
              .Add("switchyard_proxy_bulk_bytes_served_total", "counter",
                   "Bytes workers read from this proxy's data plane.",
                   plane_ == nullptr ? 0 : plane_->stats().bytes_served)
              .Add("switchyard_proxy_bytes_copied_total", "counter",
                   "Bytes of buffer contents copied by this process, the kernel's "
                   "copies for its sockets included.",
                   static_cast<double>(BytesCopied()))
              .Add("switchyard_proxy_host_buffer_bytes", "gauge",
                   "Bytes of host buffers sessions have staged on the proxy "
                   "(uploads on their way to workers, fetches on their way to "
                   "clients).",
                   service_->host_buffer_bytes())
              .Add("switchyard_proxy_host_buffer_waits", "gauge",
                   "Requests waiting for an upload to begin, and readers "
                   "waiting for an upload's bytes still on their way.",
                   CurrentHostBufferWaits().uploads_to_begin, "kind=\"upload_to_begin\"")
              .Add("switchyard_proxy_host_buffer_waits", "gauge",
                   "Requests waiting for an upload to begin, and readers "
                   "waiting for an upload's bytes still on their way.",
                   CurrentHostBufferWaits().bytes_to_arrive, "kind=\"bytes_to_arrive\"")
              .Add("switchyard_proxy_client_stalls_total", "counter",
                   "Uploads and fetches of host buffers ended because their client "
                   "sent or read nothing for --client_stall_timeout.",
                   service_->client_stalls())
              .Add("switchyard_proxy_host_buffer_bytes_max", "gauge",
                   "The most bytes all sessions may stage on the proxy "
                   "(--proxy_max_host_buffer_bytes; 0: no bound).",
                   service_->host_buffer_bytes_max())
              .Add("switchyard_proxy_host_bytes_kept", "gauge",
                   "Memory of freed large host buffers kept for reuse (the "
                   "kernel may reclaim it).",
                   static_cast<int64_t>(HostBytes::KeptBytes()));
          return text.str();
        }));
    return absl::OkStatus();
  }

  int port() const override { return server_.port; }

  void Shutdown() override {
    reporter_.reset();
    if (server_.server == nullptr) return;
    // Sessions are long streams: cancel them rather than wait for clients to hang up.
    server_.Shutdown(std::chrono::system_clock::now());
    server_.server->Wait();
    server_.server.reset();
    if (plane_ != nullptr) plane_->Stop();  // after the sessions: no offers come from now
    metrics_.reset();
  }

 private:
  std::unique_ptr<HostCallbackService> callbacks_;  // outlives the fleet's readers
  std::unique_ptr<Fleet> fleet_;
  std::unique_ptr<bulk::Server> plane_;  // its offers hold uploads; sessions offer on it
  std::unique_ptr<IfrtService> service_;
  std::unique_ptr<AccessService> access_;  // admits through service_
  StartedServer server_;
  HeapTrimmer heap_trimmer_;              // reads service_
  std::unique_ptr<RmReporter> reporter_;  // reads service_
  std::unique_ptr<MetricsServer> metrics_;
};

// The data plane workers pull uploads from (see ProxyOptions); null where there is
// none. An error only for a --bulk_port that cannot be had.
absl::StatusOr<std::unique_ptr<bulk::Server>> StartUploadPlane(const ProxyOptions& options) {
  if (!options.bulk_transfers) return nullptr;
  if (options.unix_socket.empty() && options.advertise_host.empty() &&
      (options.listen_host == "0.0.0.0" || options.listen_host == "::" ||
       options.listen_host == "[::]")) {
    SY_LOG(Info) << "uploads go to workers over gRPC: pass --advertise_host (how workers reach "
                    "this host) to put them on the bulk data plane";
    return nullptr;
  }
  return bulk::StartPlane({options.unix_socket, options.listen_host, options.advertise_host,
                           options.bulk_port, FleetTlsEnabled(), "uploads to workers"});
}

}  // namespace

absl::StatusOr<std::unique_ptr<ProxyServer>> ProxyServer::Start(const ProxyOptions& options) {
  // Before the proxy's threads start: arenas are given out as threads first allocate.
  mallopt(M_ARENA_MAX, limits::kProxyMallocArenas);
  auto callbacks = std::make_unique<HostCallbackService>();
  auto fleet = std::make_unique<Fleet>(
      options.resource_manager_address,
      [callbacks = callbacks.get()](const HostCallbackCall& call, WorkerConnection* worker) {
        callbacks->Deliver(call, [worker](const HostCallbackResult& result) {
          grpc::ClientContext context;
          context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
          SY_ASSIGN_OR_RETURN(WorkerConnection::Call call, worker->PrepareCall(&context));
          ReturnHostCallbackResponse response;
          return FromGrpcStatus(call.stub->ReturnHostCallback(&context, result, &response));
        });
      });
  IfrtServiceOptions service_options;
  service_options.num_elastic_slices = options.num_elastic_slices;
  service_options.session_max_arrays = options.session_max_arrays;
  service_options.storage_mount_root = options.storage_mount_root;
  const HostBufferBounds bounds =
      ResolveHostBufferBounds(options.session_max_host_buffer_bytes,
                              options.proxy_max_host_buffer_bytes, MemoryLimitBytes());
  service_options.session_max_host_buffer_bytes = bounds.session_max_bytes;
  service_options.proxy_max_host_buffer_bytes = bounds.proxy_max_bytes;
  SY_ASSIGN_OR_RETURN(service_options.virtual_slices,
                      ParseSliceShapes(options.virtual_slices, "--virtual_slices"));
  service_options.session_idle_timeout = options.session_idle_timeout;
  service_options.client_stall_timeout = options.client_stall_timeout;
  if (!options.large_transfer_directory.empty()) {
    std::error_code error;
    if (!std::filesystem::is_directory(options.large_transfer_directory, error)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--large_transfer_directory=", options.large_transfer_directory, " is not a directory"));
    }
    service_options.large_transfer_directory = options.large_transfer_directory;
  }
  if (!options.tokens_file.empty()) {
    SY_ASSIGN_OR_RETURN(service_options.tokens, TenantTokens::Load(options.tokens_file));
    SY_LOG(Info) << "sessions need a token of one of " << service_options.tokens.tenants()
                 << " tenants (" << options.tokens_file << ")";
  }
  SY_ASSIGN_OR_RETURN(std::unique_ptr<bulk::Server> plane, StartUploadPlane(options));
  service_options.upload_plane = plane.get();
  auto service = std::make_unique<IfrtService>(fleet.get(), std::move(service_options));
  auto access = std::make_unique<AccessService>(service.get());
  // JAX clients speak plain gRPC here; tokens say who they are.
  SY_ASSIGN_OR_RETURN(
      StartedServer server,
      StartGrpcServer(ServeHost(options.listen_host, options.unix_socket), options.port,
                      {service.get(), access.get(), callbacks.get()}, Audience::kClients));
  SY_LOG(Info) << "proxy listening on " << server.address << " (resource manager "
               << options.resource_manager_address << ")";
  SY_LOG(Info) << "large host buffers: " << HostHugePages().why;
  if (server.port != 0 && options.tokens_file.empty()) {
    SY_LOG(Warning) << "serving JAX clients on " << server.address
                    << " over TCP without --tokens_file: anyone who reaches it, any user of this "
                       "host included, can open a session and run programs (docs/security.md)";
  }
  auto proxy =
      std::make_unique<ProxyServerImpl>(std::move(callbacks), std::move(fleet), std::move(plane),
                                        std::move(service), std::move(access), std::move(server));
  SY_RETURN_IF_ERROR(proxy->StartMetrics(options.listen_host, options.metrics_port));
  return proxy;
}

}  // namespace switchyard::proxy
