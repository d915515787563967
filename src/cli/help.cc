// `switchyard <command> --help`: the flags that command reads, with their defaults.
// absl's own --help filters flags by file name, which matches none of ours; each
// command's list lives here so that one table answers "what does this command take".

#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/reflection.h"
#include "cli/commands.h"

namespace switchyard::cli {
namespace {

struct CommandHelp {
  const char* name;
  const char* summary;
  std::vector<const char*> flags;
};

const std::vector<CommandHelp>& Commands() {
  static const auto* commands = new std::vector<CommandHelp>{
      {"rm",
       "The resource manager: fleet membership, global device ids, health. One per fleet.",
       {"server_port", "listen_host", "unix_socket", "metrics_port", "metrics_port_file",
        "state_file", "instance_count", "instance_type", "tenant_shares", "tenant_priorities",
        "lease_max_hold", "node_type", "gcs_scratch_location", "storage_mount_root", "tls_ca_file",
        "tls_cert_file", "tls_key_file"}},
      {"proxy",
       "The IFRT proxy a JAX client connects to (JAX_PLATFORMS=proxy, "
       "JAX_BACKEND_TARGET=grpc://HOST:PORT or grpc://unix:PATH).",
       {"server_port",
        "listen_host",
        "unix_socket",
        "advertise_host",
        "resource_manager_address",
        "bulk_transfers",
        "bulk_port",
        "num_elastic_slices",
        "tokens_file",
        "session_max_arrays",
        "session_max_host_buffer_bytes",
        "proxy_max_host_buffer_bytes",
        "virtual_slices",
        "session_idle_timeout",
        "client_stall_timeout",
        "large_transfer_directory",
        "metrics_port",
        "metrics_port_file",
        "gcs_scratch_location",
        "storage_mount_root",
        "tls_ca_file",
        "tls_cert_file",
        "tls_key_file"}},
      {"worker",
       "One host of a slice: loads a PJRT plugin and serves its devices.",
       {"server_port",
        "listen_host",
        "unix_socket",
        "advertise_host",
        "resource_manager_address",
        "slice_index",
        "host_index",
        "num_nodes",
        "kv_epoch",
        "pjrt_plugin",
        "cpu_device_count",
        "max_buffer_bytes",
        "workers_per_host",
        "buffer_memory_percent",
        "python",
        "sidecar_shm_directory",
        "sidecar_sandbox",
        "bulk_transfers",
        "bulk_port",
        "sidecar_writable_paths",
        "register_timeout_s",
        "metrics_port",
        "metrics_port_file",
        "gcs_scratch_location",
        "storage_mount_root",
        "compilation_cache_max_bytes",
        "tls_ca_file",
        "tls_cert_file",
        "tls_key_file"}},
      {"status",
       "Print the fleet as the resource manager sees it.",
       {"resource_manager_address", "json", "tls_ca_file", "tls_cert_file", "tls_key_file"}},
      {"cache",
       "The compilation cache: `switchyard cache ls | stats | prune`.",
       {"gcs_scratch_location", "storage_mount_root", "compilation_cache_max_bytes"}},
      {"up",
       "A local cluster (rm + workers + proxy) as child processes, stopped together.",
       {"workers",
        "devices_per_worker",
        "hosts_per_slice",
        "rm_port",
        "worker_port",
        "proxy_port",
        "listen_host",
        "pjrt_plugin",
        "python",
        "sidecar_shm_directory",
        "sidecar_sandbox",
        "bulk_transfers",
        "sidecar_writable_paths",
        "max_buffer_bytes",
        "num_elastic_slices",
        "tokens_file",
        "session_max_arrays",
        "session_max_host_buffer_bytes",
        "proxy_max_host_buffer_bytes",
        "virtual_slices",
        "session_idle_timeout",
        "client_stall_timeout",
        "large_transfer_directory",
        "tenant_shares",
        "tenant_priorities",
        "lease_max_hold",
        "startup_timeout_s",
        "gcs_scratch_location",
        "storage_mount_root",
        "compilation_cache_max_bytes",
        "metrics_port",
        "tls_ca_file",
        "tls_cert_file",
        "tls_key_file"}},
  };
  return *commands;
}

}  // namespace

bool IsCommand(const std::string& command) {
  for (const CommandHelp& help : Commands()) {
    if (command == help.name) return true;
  }
  return false;
}

bool PrintCommandHelp(const std::string& command) {
  for (const CommandHelp& help : Commands()) {
    if (command != help.name) continue;
    std::printf("usage: switchyard %s [flags]\n\n%s\n\nflags (`-` or `_` in names):\n", help.name,
                help.summary);
    for (const char* name : help.flags) {
      const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
      if (flag == nullptr) continue;  // a table typo shows as a missing line in the test
      std::printf("  --%s (default: %s)\n      %s\n", name,
                  flag->DefaultValue().empty() ? "\"\"" : flag->DefaultValue().c_str(),
                  flag->Help().c_str());
    }
    return true;
  }
  return false;
}

}  // namespace switchyard::cli
