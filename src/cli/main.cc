// `switchyard <command> [flags]`: thin main; each command wires one component.

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/synchronization/mutex.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "common/grpc_server.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "worker/worker.h"

ABSL_FLAG(int, server_port, -1,
          "Port to serve on (proxy: 29000, rm: 29001, worker: 29005; 0 picks a free one)");
ABSL_FLAG(std::string, listen_host, "127.0.0.1",
          "Address to listen on. Without --tls_* flags, whoever reaches the rm and worker "
          "ports can run programs on the hosts.");
ABSL_FLAG(std::string, unix_socket, "",
          "rm, proxy, worker: serve on this Unix-domain socket instead of TCP (--listen_host, "
          "--server_port). Only this user and root may connect: the directory must not be "
          "writable by others. Dial it as unix:<path> (JAX_BACKEND_TARGET=grpc://unix:<path>)");
ABSL_FLAG(std::string, resource_manager_address, "127.0.0.1:29001",
          "host:port of the resource manager, or unix:<path>");
ABSL_FLAG(int, metrics_port, -1,
          "Serve Prometheus metrics on http://<listen_host>:<port>/metrics (0: a free port; "
          "-1: off)");
ABSL_FLAG(std::string, metrics_port_file, "",
          "rm, proxy, worker: once metrics are served, write their port to this file (how "
          "`up` learns the ports its children chose with --metrics_port=0)");
ABSL_FLAG(std::string, pjrt_plugin, "",
          "Path of the PJRT plugin .so (default: $SWITCHYARD_PJRT_PLUGIN)");
ABSL_FLAG(std::string, python, "",
          "worker: a Python with jaxlib (the clients' newest): workers register its custom-call "
          "kernels (LAPACK for jnp.linalg, ...) and run colocated Python sidecars on it (those "
          "also need jax, cloudpickle and switchyard). Unset: $SWITCHYARD_WORKER_PYTHON, else "
          "python3 next to the switchyard binary, the venv it was built with, python3 on PATH: "
          "the first with jaxlib, said at start-up. 'none': both off");
ABSL_FLAG(std::string, sidecar_shm_directory, "/dev/shm",
          "Where workers and their colocated Python sidecars pass arrays: a memory-backed "
          "directory (in Kubernetes an emptyDir with medium Memory shared by both containers)");
ABSL_FLAG(std::string, advertise_host, "",
          "worker, proxy: host name other processes use to reach this one (default: "
          "--listen_host); the proxy's bulk data plane on a wildcard --listen_host needs it");
ABSL_FLAG(bool, bulk_transfers, true,
          "worker, proxy: large buffers other workers read (from a worker) or workers pull "
          "(uploads, from the proxy) travel on a raw socket of their own (a Unix socket beside "
          "--unix_socket, or a free TCP port when the fleet has no TLS), each read allowed by a "
          "one-time ticket; false: over gRPC (docs/performance.md)");
ABSL_FLAG(int32_t, bulk_port, 0,
          "worker, proxy: the TCP port of the bulk data plane (where the fleet has no TLS and no "
          "--unix_socket); 0: a free one, logged at start. For firewalls between hosts");
ABSL_FLAG(bool, sidecar_sandbox, true,
          "worker: run colocated Python sidecars in a sandbox (their own user, mount and PID "
          "namespaces): the fleet's key, sockets and compilation cache hidden, the file system "
          "read-only but for --sidecar_writable_paths, --storage_mount_root and the sidecar's "
          "own directory. Where the host cannot make one, colocated Python is off (said at "
          "start-up). false: sidecars run unconfined, with the worker's access");
ABSL_FLAG(std::vector<std::string>, sidecar_writable_paths, {},
          "worker: directories colocated Python may write (e.g. where it writes checkpoints), "
          "comma-separated; --storage_mount_root is always one");

ABSL_FLAG(std::string, gcs_scratch_location, "",
          "Shared storage for compiled programs (the persistent compilation cache): a "
          "directory, file://DIR, or gs://BUCKET/DIR or s3://BUCKET/DIR under "
          "--storage_mount_root. Workers use it; rm and proxy check it. Empty: no cache");
ABSL_FLAG(std::string, storage_mount_root, "",
          "Where buckets are mounted (e.g. the gcsfuse CSI mount): gs://b/d is <root>/b/d. "
          "For the compilation cache, checkpoints (persistence) and profiles");

ABSL_FLAG(std::string, tls_ca_file, "",
          "Mutual TLS between rm, proxies, workers and `status`: the fleet's CA certificate "
          "(PEM). With --tls_cert_file and --tls_key_file; empty: plain gRPC");
ABSL_FLAG(std::string, tls_cert_file, "",
          "This process's certificate (PEM), signed by the fleet's CA, naming DNS "
          "'switchyard'");
ABSL_FLAG(std::string, tls_key_file, "", "The private key of --tls_cert_file (PEM)");

namespace {

constexpr char kUsage[] = R"(switchyard: a single-controller runtime for JAX.

usage: switchyard <command> [flags]

commands:
  rm       the resource manager: fleet membership, device ids, health
  proxy    the IFRT proxy a JAX client connects to (JAX_PLATFORMS=proxy)
  worker   one host: a PJRT plugin and its devices
  status   print the fleet as the resource manager sees it
  cache    the compilation cache: `cache ls | stats | prune`
  up       a local cluster (rm + workers + proxy) in one command

`switchyard <command> --help` lists the flags. Flag names take '-' or '_'.)";

// Accept `--devices-per-worker` as well as `--devices_per_worker`.
std::vector<char*> NormalizeFlagNames(int argc, char** argv, std::vector<std::string>* storage) {
  storage->reserve(argc);
  for (int i = 0; i < argc; ++i) {
    std::string arg = argv[i];
    if (i > 0 && arg.rfind("--", 0) == 0) {
      size_t end = arg.find('=');
      for (size_t c = 2; c < std::min(end, arg.size()); ++c) {
        if (arg[c] == '-') arg[c] = '_';
      }
    }
    storage->push_back(std::move(arg));
  }
  std::vector<char*> out;
  for (std::string& arg : *storage) out.push_back(arg.data());
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(kUsage);
  // A channel to a Unix socket whose server restarted reconnects only when something
  // polls it, and between calls only gRPC's backup poller does: every 5 s by default,
  // so a proxy would take seconds to see a restarted worker again (TCP: ~0.1 s). Read
  // once, when gRPC starts; a value set outside wins.
  setenv("GRPC_CLIENT_CHANNEL_BACKUP_POLL_INTERVAL_MS", "100", /*overwrite=*/0);
  // Debian's abseil checks every lock for cycles (about 1% of a busy proxy's CPU):
  // sanitizer builds (the ones CI's end-to-end runs use) abort on a lock-order cycle;
  // release builds rely on them and on the thread-safety annotations.
#ifdef SWITCHYARD_LOCK_CHECKS
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kAbort);
#else
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
#endif
  // Not a user's command: the first process of a colocated Python sidecar's sandbox
  // (its arguments are the sidecar's, not ours to parse).
  if (argc > 2 && std::strcmp(argv[1], switchyard::worker::kSidecarInitCommand) == 0) {
    return switchyard::worker::RunSidecarInit(argc - 2, argv + 2);
  }
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "help") == 0) {
    std::fprintf(argc < 2 ? stderr : stdout, "%s\n", kUsage);
    return argc < 2 ? 2 : 0;
  }
  const std::string command = argv[1];
  if (!switchyard::cli::IsCommand(command)) {
    std::fprintf(stderr, "switchyard: unknown command '%s'\n\n%s\n", command.c_str(), kUsage);
    return 2;
  }
  for (int i = 2; i < argc; ++i) {
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0 ||
        std::strcmp(argv[i], "--helpfull") == 0) {
      switchyard::cli::PrintCommandHelp(command);
      return 0;
    }
  }
  // Drop the command so absl sees `switchyard --flag ...`.
  std::vector<std::string> storage;
  std::vector<char*> args = NormalizeFlagNames(argc, argv, &storage);
  args.erase(args.begin() + 1);
  int args_count = static_cast<int>(args.size());
  std::vector<char*> positional = absl::ParseCommandLine(args_count, args.data());
  switchyard::SetMetricsPortFile(absl::GetFlag(FLAGS_metrics_port_file));
  const std::string ca = absl::GetFlag(FLAGS_tls_ca_file);
  const std::string cert = absl::GetFlag(FLAGS_tls_cert_file);
  const std::string key = absl::GetFlag(FLAGS_tls_key_file);
  if (!ca.empty() || !cert.empty() || !key.empty()) {
    absl::Status tls = ca.empty() || cert.empty() || key.empty()
                           ? absl::InvalidArgumentError(
                                 "--tls_ca_file, --tls_cert_file and --tls_key_file go together")
                           : switchyard::UseFleetTls(ca, cert, key);
    if (!tls.ok()) {
      std::fprintf(stderr, "switchyard %s: %s\n", command.c_str(),
                   std::string(tls.message()).c_str());
      return 2;
    }
  }
  if (command == "cache") {
    return switchyard::cli::RunCache(
        std::vector<std::string>(positional.begin() + 1, positional.end()));
  }
  if (positional.size() > 1) {
    std::fprintf(stderr, "switchyard %s: unexpected argument '%s'\n", command.c_str(),
                 positional[1]);
    return 2;
  }
  if (command == "rm") return switchyard::cli::RunResourceManager();
  if (command == "proxy") return switchyard::cli::RunProxy();
  if (command == "worker") return switchyard::cli::RunWorker();
  if (command == "status") return switchyard::cli::RunStatus();
  return switchyard::cli::RunUp(argv[0]);
}
