#include <cstdint>
#include <string>

#include "absl/flags/flag.h"
#include "absl/time/time.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "cli/serve.h"
#include "common/limits.h"
#include "common/logging.h"
#include "common/signals.h"
#include "proxy/proxy.h"

ABSL_FLAG(int, num_elastic_slices, -1,
          "proxy: how many of a session's slices may be down at once before the session is "
          "failed; -1: any number (what touches a down slice fails with DATA_LOSS)");

ABSL_FLAG(std::string, tokens_file, "",
          "proxy: a file of `<tenant> sha256:<hex>` lines; sessions must then carry one of "
          "those tokens (switchyard.initialize(token=...) or $SWITCHYARD_TOKEN)");
ABSL_FLAG(int64_t, session_max_arrays, switchyard::limits::kSessionArraysDefault,
          "proxy: live arrays one session may hold (0: no bound); past it, RESOURCE_EXHAUSTED");
ABSL_FLAG(int64_t, session_max_host_buffer_bytes, -1,
          "proxy: bytes of host buffers one session may stage on the proxy at once; past it, "
          "RESOURCE_EXHAUSTED. -1: a quarter of the memory the proxy's host (or its cgroup) "
          "gives it; 0: no bound");
ABSL_FLAG(int64_t, proxy_max_host_buffer_bytes, -1,
          "proxy: bytes of host buffers all sessions together may stage on the proxy at once; "
          "past it, RESOURCE_EXHAUSTED. -1: half of the memory the proxy's host (or its "
          "cgroup) gives it; 0: no bound");

ABSL_FLAG(std::string, virtual_slices, "",
          "proxy: the slices each session leases from the pool, GENERATION:TOPOLOGY,... "
          "(cpu:4,cpu:4); a session waits in the RM's queue until they are free and sees only "
          "them. A client may ask for others in its initialization data. Empty: every session "
          "sees the whole fleet and leases nothing");

ABSL_FLAG(absl::Duration, session_idle_timeout, absl::ZeroDuration(),
          "proxy: a session of the pool (--virtual_slices) with nothing in flight that sends no "
          "request for this long (e.g. 30m) gives its slices back and ends; 0: never");

ABSL_FLAG(absl::Duration, client_stall_timeout,
          absl::Milliseconds(switchyard::limits::kClientStallMs),
          "proxy: an upload of a host buffer whose client sends nothing, or a fetch whose "
          "client reads nothing, for this long ends (CANCELLED) and lets go of its bytes; "
          "0: never");

ABSL_FLAG(std::string, large_transfer_directory, "",
          "proxy: a directory on this host where JAX clients of this host may leave large host "
          "buffers for the proxy to take, instead of sending them over gRPC: the clients set "
          "IFRT_PROXY_GRPC_LARGE_TRANSFER_OPTIMIZATION_DIRECTORY to it (and "
          "IFRT_PROXY_GRPC_LARGE_TRANSFER_OPTIMIZATION_THRESHOLD_BYTES). Memory-backed (a "
          "/dev/shm directory), one per client user. Empty: off");

namespace switchyard::cli {

int RunProxy() {
  SetLogProcessName("proxy");
  BlockTerminationSignals();  // before any thread starts
  proxy::ProxyOptions options;
  options.listen_host = absl::GetFlag(FLAGS_listen_host);
  options.unix_socket = absl::GetFlag(FLAGS_unix_socket);
  options.metrics_port = absl::GetFlag(FLAGS_metrics_port);
  int port = absl::GetFlag(FLAGS_server_port);
  options.port = port < 0 ? 29000 : port;
  options.resource_manager_address = absl::GetFlag(FLAGS_resource_manager_address);
  options.num_elastic_slices = absl::GetFlag(FLAGS_num_elastic_slices);
  options.tokens_file = absl::GetFlag(FLAGS_tokens_file);
  options.session_max_arrays = absl::GetFlag(FLAGS_session_max_arrays);
  options.session_max_host_buffer_bytes = absl::GetFlag(FLAGS_session_max_host_buffer_bytes);
  options.proxy_max_host_buffer_bytes = absl::GetFlag(FLAGS_proxy_max_host_buffer_bytes);
  options.virtual_slices = absl::GetFlag(FLAGS_virtual_slices);
  options.session_idle_timeout = absl::GetFlag(FLAGS_session_idle_timeout);
  options.client_stall_timeout = absl::GetFlag(FLAGS_client_stall_timeout);
  options.large_transfer_directory = absl::GetFlag(FLAGS_large_transfer_directory);
  options.storage_mount_root = absl::GetFlag(FLAGS_storage_mount_root);
  options.bulk_transfers = absl::GetFlag(FLAGS_bulk_transfers);
  options.bulk_port = absl::GetFlag(FLAGS_bulk_port);
  options.advertise_host = absl::GetFlag(FLAGS_advertise_host);
  WarnIfCacheLocationUnusable();
  absl::StatusOr<std::unique_ptr<proxy::ProxyServer>> server = proxy::ProxyServer::Start(options);
  // Pathways' wording: deployment scripts and readiness checks wait for this line.
  SY_LOG(Info) << "IFRT proxy server started with status " << server.status();
  return ServeUntilSignal(std::move(server));
}

}  // namespace switchyard::cli
