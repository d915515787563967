#include "absl/flags/flag.h"
#include "absl/time/time.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "cli/serve.h"
#include "common/logging.h"
#include "common/signals.h"
#include "rm/rm.h"

ABSL_FLAG(std::string, state_file, "",
          "rm: file that keeps device ids and hosts across RM restarts (empty: not kept)");

// Pathways' resource-manager flags, so that its manifests run unchanged.
ABSL_FLAG(std::string, node_type, "resource_manager",
          "rm: Pathways' role flag; only resource_manager is accepted here");
ABSL_FLAG(int, instance_count, 0,
          "rm: the fleet's number of slices; a worker with a higher --slice_index is refused "
          "(0: any)");
ABSL_FLAG(std::string, instance_type, "",
          "rm: every slice's devices as GENERATION:TOPOLOGY (cpu:4, nvidia-h200:8, tpuv5e:4x8): "
          "a worker whose device kind does not contain GENERATION, or that would give its "
          "slice more devices, is refused (empty: any)");

ABSL_FLAG(std::string, tenant_shares, "",
          "rm: the shared pool's shares, TENANT:SHARE,... (alice:1,bob:2): the next session "
          "placed is the earliest of the tenant holding the fewest slices per share, and "
          "workers divide device time between tenants launching on the same devices by them "
          "(empty: first come, first served; an unlisted tenant has share 1)");
ABSL_FLAG(std::string, tenant_priorities, "",
          "rm: TENANT:PRIORITY,... (prod:10,dev:0): a waiting session of a higher priority takes "
          "the slices it needs from sessions of lower ones, whose clients get UNAVAILABLE with "
          "the reason (unlisted: 0)");
ABSL_FLAG(absl::Duration, lease_max_hold, absl::ZeroDuration(),
          "rm: a session holding its slices this long (e.g. 2h) while another waits loses them "
          "(its client gets UNAVAILABLE with the reason); 0: never");

namespace switchyard::cli {

int RunResourceManager() {
  SetLogProcessName("rm");
  BlockTerminationSignals();  // before any thread starts
  rm::RmOptions options = rm::DefaultRmOptions();
  options.listen_host = absl::GetFlag(FLAGS_listen_host);
  options.unix_socket = absl::GetFlag(FLAGS_unix_socket);
  options.metrics_port = absl::GetFlag(FLAGS_metrics_port);
  int port = absl::GetFlag(FLAGS_server_port);
  options.port = port < 0 ? 29001 : port;
  options.state_file = absl::GetFlag(FLAGS_state_file);
  if (absl::GetFlag(FLAGS_node_type) != "resource_manager") {
    SY_LOG(Error) << "--node_type=" << absl::GetFlag(FLAGS_node_type)
                  << ": `switchyard rm` is the resource manager; workers and proxies are "
                     "`switchyard worker` and `switchyard proxy`";
    return 2;
  }
  options.instance_count = absl::GetFlag(FLAGS_instance_count);
  options.instance_type = absl::GetFlag(FLAGS_instance_type);
  options.tenant_shares = absl::GetFlag(FLAGS_tenant_shares);
  options.tenant_priorities = absl::GetFlag(FLAGS_tenant_priorities);
  options.lease_max_hold = absl::GetFlag(FLAGS_lease_max_hold);
  WarnIfCacheLocationUnusable();
  return ServeUntilSignal(rm::ResourceManagerServer::Start(options));
}

}  // namespace switchyard::cli
