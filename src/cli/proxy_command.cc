#include "absl/flags/flag.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "cli/serve.h"
#include "common/logging.h"
#include "common/signals.h"
#include "proxy/proxy.h"

ABSL_FLAG(int, num_elastic_slices, -1,
          "proxy: how many of a session's slices may be down at once before the session is "
          "failed; -1: any number (what touches a down slice fails with DATA_LOSS)");

namespace switchyard::cli {

int RunProxy() {
  SetLogProcessName("proxy");
  BlockTerminationSignals();  // before any thread starts
  proxy::ProxyOptions options;
  options.listen_host = absl::GetFlag(FLAGS_listen_host);
  options.metrics_port = absl::GetFlag(FLAGS_metrics_port);
  int port = absl::GetFlag(FLAGS_server_port);
  options.port = port < 0 ? 29000 : port;
  options.resource_manager_address = absl::GetFlag(FLAGS_resource_manager_address);
  options.num_elastic_slices = absl::GetFlag(FLAGS_num_elastic_slices);
  WarnIfCacheLocationUnusable();
  absl::StatusOr<std::unique_ptr<proxy::ProxyServer>> server = proxy::ProxyServer::Start(options);
  // Pathways' wording: deployment scripts and readiness checks wait for this line.
  SY_LOG(Info) << "IFRT proxy server started with status " << server.status();
  return ServeUntilSignal(std::move(server));
}

}  // namespace switchyard::cli
