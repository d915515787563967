#pragma once

// The proxy: serves the IFRT proxy protocol to stock JAX clients
// (`JAX_PLATFORMS=proxy`) over the fleet the resource manager knows. This is the
// component's only public header.

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/limits.h"

namespace switchyard::proxy {

struct ProxyOptions {
  std::string listen_host = "127.0.0.1";
  int port = 29000;  // 0 picks a free port
  // Non-empty: serve on this Unix socket (only this user gets in; JAX_BACKEND_TARGET
  // grpc://unix:<path>) instead of listen_host:port; metrics stay on listen_host.
  std::string unix_socket;
  std::string resource_manager_address = "127.0.0.1:29001";
  int metrics_port = -1;  // Prometheus /metrics on listen_host; -1: off, 0: a free port
  // How many of a session's slices may be down at once before the session itself is
  // failed (Pathways' --num_elastic_slices); -1: any number (each operation that
  // touches a down slice fails with DATA_LOSS, the rest go on).
  int num_elastic_slices = -1;
  // Tenants and their token hashes (TenantTokens); empty: sessions need no token.
  std::string tokens_file;
  // Per-session bound on live arrays (0: none). Past it a request gets RESOURCE_EXHAUSTED.
  int64_t session_max_arrays = 0;
  // Bounds on the bytes of host buffers staged on the proxy, one session's and all
  // together: past them RESOURCE_EXHAUSTED. -1: shares of the memory the host gives the
  // proxy (ResolveHostBufferBounds); 0: none.
  int64_t session_max_host_buffer_bytes = -1;
  int64_t proxy_max_host_buffer_bytes = -1;
  // Pathways' --virtual_slices ("cpu:4,cpu:4"): each session leases slices of these
  // shapes from the RM, waits in its queue until they are free, and sees only them.
  // Empty: sessions see the whole fleet and lease nothing. Start() fails with
  // INVALID_ARGUMENT on a malformed list.
  std::string virtual_slices;
  // A session of the pool that has nothing in flight and sends no request for this
  // long loses its slices (its next request gets UNAVAILABLE with the reason) and
  // ends; zero: never.
  absl::Duration session_idle_timeout = absl::ZeroDuration();
  // See IfrtServiceOptions.
  absl::Duration client_stall_timeout = absl::Milliseconds(limits::kClientStallMs);
  // Where gs:// and s3:// buckets are mounted, for profiles written where asked.
  std::string storage_mount_root;
  // See IfrtServiceOptions; must be a directory when set.
  std::string large_transfer_directory;
  // Workers pull large uploads from the proxy's own data plane (common/bulk_server.h):
  // a Unix socket beside `unix_socket`, else TCP on listen_host at `bulk_port` (0: a
  // free one), offered as `advertise_host` (default: listen_host). Not on TCP where the
  // fleet has TLS (the plane has no encryption), nor on a wildcard listen_host without
  // `advertise_host` (no address workers could be told). Without it uploads go over
  // gRPC; so they do with `bulk_transfers` false.
  bool bulk_transfers = true;
  int bulk_port = 0;
  std::string advertise_host;
};

class ProxyServer {
 public:
  // UNAVAILABLE if the port is taken.
  static absl::StatusOr<std::unique_ptr<ProxyServer>> Start(const ProxyOptions& options);
  virtual ~ProxyServer() = default;

  virtual int port() const = 0;
  // Stops serving; open sessions end and free what they hold. Idempotent.
  virtual void Shutdown() = 0;
};

}  // namespace switchyard::proxy
