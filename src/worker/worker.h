#pragma once

// A worker: one host's PJRT plugin and devices, served over worker.proto, and
// kept registered with the resource manager. This is the component's only public
// header.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/limits.h"

namespace switchyard::worker {

struct WorkerOptions {
  std::string listen_host = "127.0.0.1";  // "inproc": in-process only, no port
  int port = 29005;                       // 0 picks a free port
  // Non-empty: serve on this Unix socket (only this user gets in) instead of
  // listen_host:port, and register as unix:<path>; metrics stay on listen_host.
  std::string unix_socket;
  // Buffers other workers read travel on the bulk data plane (common/bulk_server.h).
  bool bulk_transfers = true;
  // Its TCP port (no Unix socket, no TLS); 0: a free one. A port that cannot be had
  // stops the worker from starting: the operator asked for it.
  int bulk_port = 0;
  // Host name other processes use to reach this worker; defaults to `listen_host`.
  std::string advertise_host;
  std::string resource_manager_address = "127.0.0.1:29001";
  int slice_index = 0;
  int host_index = 0;
  std::string pjrt_plugin;
  // A simulated host: the built-in plugin with no device behind it (pjrt::Plugin::
  // LoadSimulated) instead of `pjrt_plugin`; `cpu_device_count` devices (0: 1) whose
  // launches take `simulated_launch_us` after their inputs. No Python, kernels or cache.
  bool simulate = false;
  int64_t simulated_launch_us = 1000;
  // A Python executable with jaxlib whose custom-call kernels (LAPACK, ...) the plugin
  // gets, and which runs colocated Python sidecars (with jax, cloudpickle and
  // switchyard). Empty: the worker looks for one (--python unset) and logs which it
  // took; "none": neither feature, and programs calling the kernels fail to compile.
  std::string python = "none";
  int cpu_device_count = 0;  // 0: the plugin's default; only for the CPU plugin
  // The most bytes the buffers held for clients may take: past it, what would make more
  // is refused with RESOURCE_EXHAUSTED. 0: no bound; -1: on CPU, whose device memory is
  // the host's, `buffer_memory_percent` of the host's memory over `workers_per_host`;
  // otherwise none.
  int64_t max_buffer_bytes = -1;
  int workers_per_host = 1;  // sharing the host's memory: -1 above is one's share
  int buffer_memory_percent = limits::kHostBufferMemoryPercent;
  // More than 1: this worker is node `host_index` of a multi-host PJRT client formed
  // by `num_nodes` hosts of its slice (GPU: one NCCL clique across them), which find
  // each other through the RM's key-value store. Creating the client waits for all.
  int num_nodes = 1;
  // Names this start of a multi-host slice in the RM's key-value store (e.g. a job's
  // restart count). Keys outlive a run; a slice restarted under the same RM needs a new
  // epoch, or its hosts could read the previous run's bootstrap values.
  std::string kv_epoch = "0";
  int metrics_port = -1;  // Prometheus /metrics on listen_host; -1: off, 0: a free port
  // The persistent compilation cache's directory (shared by the fleet); empty: none.
  // One that cannot be created or read leaves the worker compiling everything (logged).
  std::string compilation_cache_dir;
  int64_t compilation_cache_max_bytes = 0;  // 0: no cap
  // Where gs:// and s3:// buckets are mounted, for checkpoint locations (gs://bucket/dir
  // is <root>/bucket/dir); empty: only directories.
  std::string storage_mount_root;
  // Where arrays pass between this worker and its colocated Python sidecars (which run
  // on `python`): a memory-backed directory.
  std::string sidecar_shm_directory = "/dev/shm";
  // Sidecars run in a sandbox (docs/security.md): the file system read-only but for
  // `sidecar_writable_paths`, `storage_mount_root` and their own directory; the fleet's
  // secrets hidden: `sidecar_hidden_paths` (the CLI gives the TLS key), this worker's and
  // the RM's socket directories, the compilation cache. false: unconfined, as this worker.
  bool sidecar_sandbox = true;
  std::vector<std::string> sidecar_hidden_paths;
  std::vector<std::string> sidecar_writable_paths;
  // Give up (and stop the worker) if the RM cannot be reached for this long;
  // zero retries forever.
  absl::Duration register_timeout = absl::ZeroDuration();
};

// The first process of a sandboxed colocated Python sidecar (`switchyard sidecar-init
// PROGRAM ARGS...`): runs the sidecar as its child and reaps whatever else ends in the
// sandbox's PID namespace, so that the sidecar is an ordinary process there (a signal it
// sends itself works; its children's zombies are reaped). Exits as the sidecar did; a
// sidecar killed by signal N makes it exit with 128 + N (the first process of a PID
// namespace cannot die of its own signal).
inline constexpr char kSidecarInitCommand[] = "sidecar-init";
int RunSidecarInit(int argc, char** argv);

class WorkerServer {
 public:
  // Loads the plugin, creates the client, starts serving and starts registering
  // with the RM in the background. Fails (NOT_FOUND, INVALID_ARGUMENT,
  // FAILED_PRECONDITION from the plugin; UNAVAILABLE for a taken port) without
  // leaving anything running.
  static absl::StatusOr<std::unique_ptr<WorkerServer>> Start(const WorkerOptions& options);
  virtual ~WorkerServer() = default;

  virtual int port() const = 0;
  // What the RM and proxies are told: host:port, or an in-process address.
  virtual std::string address() const = 0;
  // Blocks until the worker stops: after `Shutdown`, or by itself when the RM
  // refused it or stayed unreachable past `register_timeout` (that error is returned).
  virtual absl::Status Wait() = 0;
  // Idempotent; safe from any thread.
  virtual void Shutdown() = 0;
};

}  // namespace switchyard::worker
