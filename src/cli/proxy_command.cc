#include "absl/flags/flag.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "common/logging.h"
#include "cli/serve.h"
#include "common/signals.h"
#include "proxy/proxy.h"

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
  return ServeUntilSignal(proxy::ProxyServer::Start(options));
}

}  // namespace switchyard::cli
