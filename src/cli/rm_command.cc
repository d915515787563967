#include "absl/flags/flag.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "cli/serve.h"
#include "common/logging.h"
#include "common/signals.h"
#include "rm/rm.h"

ABSL_FLAG(std::string, state_file, "",
          "rm: file that keeps device ids and hosts across RM restarts (empty: not kept)");

namespace switchyard::cli {

int RunResourceManager() {
  SetLogProcessName("rm");
  BlockTerminationSignals();  // before any thread starts
  rm::RmOptions options = rm::DefaultRmOptions();
  options.listen_host = absl::GetFlag(FLAGS_listen_host);
  options.metrics_port = absl::GetFlag(FLAGS_metrics_port);
  int port = absl::GetFlag(FLAGS_server_port);
  options.port = port < 0 ? 29001 : port;
  options.state_file = absl::GetFlag(FLAGS_state_file);
  WarnIfCacheLocationUnusable();
  return ServeUntilSignal(rm::ResourceManagerServer::Start(options));
}

}  // namespace switchyard::cli
