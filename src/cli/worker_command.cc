#include <algorithm>
#include <cstdlib>
#include <memory>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "common/logging.h"
#include "common/signals.h"
#include "common/thread_name.h"
#include "worker/worker.h"

ABSL_FLAG(int, slice_index, 0, "Slice this worker belongs to (env SWITCHYARD_SLICE_INDEX)");
ABSL_FLAG(int, host_index, 0, "Index of this host within its slice");
ABSL_FLAG(int, cpu_device_count, 0, "CPU plugin only: number of devices (0: plugin default)");
ABSL_FLAG(int64_t, max_buffer_bytes, -1,
          "The most bytes the buffers held for clients may take; past it, what would make "
          "more is refused with RESOURCE_EXHAUSTED. 0: no bound; -1: on CPU, "
          "--buffer_memory_percent of this host's memory shared by --workers_per_host "
          "workers, otherwise none");
ABSL_FLAG(int, buffer_memory_percent, 80,
          "The share of this host's memory (or its cgroup's) that the default "
          "--max_buffer_bytes of a CPU worker is taken from (switchyard up sets 60: its "
          "proxy is on the same machine)");
ABSL_FLAG(int, workers_per_host, 1,
          "Workers sharing this host's memory (switchyard up sets it): the default "
          "--max_buffer_bytes is one's share");
ABSL_FLAG(int, num_nodes, 1,
          "Hosts of this slice forming one multi-host PJRT client (GPU: one NCCL clique); "
          "this host is node --host_index. They meet through the resource manager.");
ABSL_FLAG(std::string, kv_epoch, "0",
          "With --num_nodes > 1: names this start of the slice (e.g. the job's restart count); "
          "restarting a slice under the same resource manager needs a new one");
ABSL_FLAG(bool, simulate, false,
          "Run simulated hosts: the real worker over a built-in plugin with no device "
          "(docs/scale.md); no --pjrt_plugin needed. Each is a slice of its own, from "
          "--slice_index on, with --cpu_device_count devices (0: 1)");
ABSL_FLAG(int, simulated_hosts, 0,
          "worker --simulate: simulated hosts this process runs (0: 1), on consecutive ports "
          "from --server_port (0: free ones). up: simulated hosts beside --workers, "
          "--simulated_hosts_per_process in each process");
ABSL_FLAG(int64_t, simulated_launch_us, 1000,
          "How long a simulated device takes for one launch, in microseconds");
ABSL_FLAG(int, register_timeout_s, 0,
          "Exit if the resource manager stays unreachable this long (0: retry forever)");

namespace switchyard::cli {

int RunWorker() {
  worker::WorkerOptions options;
  options.slice_index = absl::GetFlag(FLAGS_slice_index);
  if (const char* env = std::getenv("SWITCHYARD_SLICE_INDEX");
      env != nullptr && options.slice_index == 0) {
    options.slice_index = std::atoi(env);
  }
  options.host_index = absl::GetFlag(FLAGS_host_index);
  SetLogProcessName(absl::StrCat("worker s", options.slice_index, "h", options.host_index));
  BlockTerminationSignals();  // before any thread starts

  options.listen_host = absl::GetFlag(FLAGS_listen_host);
  options.unix_socket = absl::GetFlag(FLAGS_unix_socket);
  options.metrics_port = absl::GetFlag(FLAGS_metrics_port);
  options.advertise_host = absl::GetFlag(FLAGS_advertise_host);
  int port = absl::GetFlag(FLAGS_server_port);
  options.port = port < 0 ? 29005 : port;
  options.resource_manager_address = absl::GetFlag(FLAGS_resource_manager_address);
  options.pjrt_plugin = absl::GetFlag(FLAGS_pjrt_plugin);
  options.simulate = absl::GetFlag(FLAGS_simulate);
  options.simulated_launch_us = absl::GetFlag(FLAGS_simulated_launch_us);
  if (options.simulated_launch_us < 0) {
    SY_LOG(Error) << "--simulated_launch_us must be 0 or more";
    return 2;
  }
  if (options.pjrt_plugin.empty() && !options.simulate) {
    const char* env = std::getenv("SWITCHYARD_PJRT_PLUGIN");
    if (env == nullptr || *env == '\0') {
      SY_LOG(Error) << "no PJRT plugin: pass --pjrt_plugin=PATH or set SWITCHYARD_PJRT_PLUGIN";
      return 2;
    }
    options.pjrt_plugin = env;
  }
  options.python = absl::GetFlag(FLAGS_python);  // empty: the worker looks for one
  options.cpu_device_count = absl::GetFlag(FLAGS_cpu_device_count);
  options.max_buffer_bytes = absl::GetFlag(FLAGS_max_buffer_bytes);
  options.workers_per_host = absl::GetFlag(FLAGS_workers_per_host);
  options.buffer_memory_percent = absl::GetFlag(FLAGS_buffer_memory_percent);
  if (options.max_buffer_bytes < -1 || options.workers_per_host < 1 ||
      options.buffer_memory_percent < 1 || options.buffer_memory_percent > 100) {
    SY_LOG(Error) << "--max_buffer_bytes must be -1, 0 or positive, --workers_per_host at least "
                     "1, --buffer_memory_percent 1 to 100";
    return 2;
  }
  options.num_nodes = absl::GetFlag(FLAGS_num_nodes);
  options.kv_epoch = absl::GetFlag(FLAGS_kv_epoch);
  options.register_timeout = absl::Seconds(absl::GetFlag(FLAGS_register_timeout_s));
  absl::StatusOr<std::string> cache = CompilationCacheDirectory();
  if (!cache.ok()) {
    SY_LOG(Error) << "cannot start: " << cache.status().message();
    return 2;
  }
  options.compilation_cache_dir = *cache;
  options.compilation_cache_max_bytes = absl::GetFlag(FLAGS_compilation_cache_max_bytes);
  options.storage_mount_root = absl::GetFlag(FLAGS_storage_mount_root);
  options.sidecar_shm_directory = absl::GetFlag(FLAGS_sidecar_shm_directory);
  options.sidecar_sandbox = absl::GetFlag(FLAGS_sidecar_sandbox);
  options.bulk_transfers = absl::GetFlag(FLAGS_bulk_transfers);
  options.bulk_port = absl::GetFlag(FLAGS_bulk_port);
  options.sidecar_writable_paths = absl::GetFlag(FLAGS_sidecar_writable_paths);
  if (const std::string key = absl::GetFlag(FLAGS_tls_key_file); !key.empty()) {
    options.sidecar_hidden_paths.push_back(key);  // the fleet's identity
  }

  const int hosts = options.simulate ? std::max(absl::GetFlag(FLAGS_simulated_hosts), 1) : 1;
  if (hosts > 1) {
    SetLogProcessName(
        absl::StrCat("sim s", options.slice_index, "-", options.slice_index + hosts - 1));
  }
  std::vector<std::unique_ptr<worker::WorkerServer>> servers;
  for (int h = 0; h < hosts; ++h) {
    worker::WorkerOptions each = options;
    each.slice_index = options.slice_index + h;
    if (h > 0) {
      // One /metrics for the process; the hosts' own ports follow the first.
      each.metrics_port = -1;
      if (options.port > 0) each.port = options.port + h;
      if (!options.unix_socket.empty())
        each.unix_socket = absl::StrCat(options.unix_socket, ".", h);
    }
    auto server = worker::WorkerServer::Start(each);
    if (!server.ok()) {
      SY_LOG(Error) << "cannot start"
                    << (hosts > 1 ? absl::StrCat(" slice ", each.slice_index) : "") << ": "
                    << server.status();
      return 1;
    }
    servers.push_back(*std::move(server));
  }
  std::thread([&servers] {
    NameThisThread("sy-signals");
    int signal = WaitForTerminationSignal();
    SY_LOG(Info) << "signal " << signal << ": shutting down";
    for (auto& server : servers) server->Shutdown();
  }).detach();
  int code = 0;
  for (auto& server : servers) {
    if (absl::Status status = server->Wait(); !status.ok()) {
      SY_LOG(Error) << "stopping: " << status;
      code = 1;
    }
  }
  return code;
}

}  // namespace switchyard::cli
