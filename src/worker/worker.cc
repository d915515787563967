#include "worker/worker.h"

#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "absl/algorithm/container.h"
#include "absl/random/random.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/bulk_server.h"
#include "common/copy_count.h"
#include "common/grpc_server.h"
#include "common/heap_trim.h"
#include "common/host_bytes.h"
#include "common/huge_pages.h"
#include "common/limits.h"
#include "common/logging.h"
#include "common/machine_memory.h"
#include "common/metrics.h"
#include "common/shared_memory.h"
#include "common/status_macros.h"
#include "common/thread_name.h"
#include "pjrt/pjrt.h"
#include "switchyard/rm.pb.h"
#include "worker/buffer_store.h"
#include "worker/colocated_calls.h"
#include "worker/device_map.h"
#include "worker/embedded_jaxlib.h"
#include "worker/executor.h"
#include "worker/host_callbacks.h"
#include "worker/rm_kv_store.h"
#include "worker/rm_link.h"
#include "worker/sidecar_sandbox.h"
#include "worker/stream_progress.h"
#include "worker/transfers.h"
#include "worker/worker_python.h"
#include "worker/worker_service.h"

namespace switchyard::worker {
namespace {

PluginInfo ToProto(const pjrt::Plugin& plugin, const pjrt::Client& client) {
  PluginInfo info;
  info.set_path(plugin.info().path);
  info.set_platform_name(client.platform_name());
  info.set_platform_version(client.platform_version());
  info.set_pjrt_api_major(plugin.info().api_major);
  info.set_pjrt_api_minor(plugin.info().api_minor);
  info.set_xla_version(plugin.info().xla_version);
  info.set_stablehlo_current_version(plugin.info().stablehlo_current_version);
  info.set_stablehlo_minimum_version(plugin.info().stablehlo_minimum_version);
  for (const auto& [name, value] : plugin.info().attributes) {
    if (name == "switchyard_simulated") info.set_simulated(value == "true");
  }
  return info;
}

std::string Hostname() {
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  return name;
}

// jaxlib's kernels in the plugin. A worker without them still serves every other
// program, so a failure is logged, not fatal.
void RegisterKernels(const pjrt::Plugin& plugin, const std::string& platform,
                     const std::string& python) {
  auto ffi = pjrt::Ffi::Of(plugin);
  if (!ffi.ok()) {
    SY_LOG(Warning) << "no custom-call kernels: " << ffi.status();
    return;
  }
  if (python.empty()) return;  // said at start-up (FindWorkerPython)
  auto kernels = RegisterJaxKernels(*ffi, python, platform);
  if (!kernels.ok()) {
    SY_LOG(Warning) << "jaxlib's kernels (jnp.linalg, ...) are not registered: "
                    << kernels.status();
    return;
  }
  SY_LOG(Info) << "registered " << kernels->targets.size() << " kernels of jaxlib "
               << kernels->jaxlib_version << " from " << python;
  for (const std::string& skipped : kernels->skipped) SY_LOG(Info) << "not registered: " << skipped;
}

// The directory of a Unix-socket address ("unix:/run/sy/rm.sock" -> "/run/sy"); empty
// for any other address.
std::string SocketDirectory(const std::string& address) {
  if (!absl::StartsWith(address, kUnixScheme)) return "";
  const std::string path = address.substr(std::strlen(kUnixScheme));
  const size_t slash = path.rfind('/');
  return slash == std::string::npos || slash == 0 ? "" : path.substr(0, slash);
}

// How colocated Python runs here: on which Python, and in which sandbox; said at start.
ColocatedOptions ColocatedSetup(const WorkerOptions& options, const WorkerPython& python) {
  ColocatedOptions colocated;
  colocated.python = python.colocated_off.empty() ? python.path : "";
  colocated.off_reason = python.colocated_off;
  colocated.shm_directory = options.sidecar_shm_directory;
  colocated.sandbox = options.sidecar_sandbox;
  if (colocated.python.empty()) return colocated;
  ColocatedCalls::RemoveStaleDirectories(colocated.shm_directory);
  if (!options.sidecar_sandbox) {
    SY_LOG(Warning) << "--sidecar_sandbox=off: colocated Python runs as this worker, with its "
                       "access to its keys, sockets and files (docs/security.md)";
    return colocated;
  }
  absl::StatusOr<SandboxedProcess> check = CheckSandbox();
  if (!check.ok()) {
    colocated.python.clear();
    colocated.off_reason = absl::StrCat(
        "its sandbox cannot be made on this host (", check.status().message(),
        "); --sidecar_sandbox=off runs sidecars unconfined, with this worker's access");
    SY_LOG(Warning) << "colocated Python is off: " << colocated.off_reason;
    return colocated;
  }
  if (!check->own_proc) {
    // The sandbox shares this host's /proc: keep this process from being read through it.
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  }
  // What a tenant's code must not see: the fleet's key, the control plane's sockets, the
  // compiled programs of every tenant.
  colocated.hidden = options.sidecar_hidden_paths;
  for (const std::string& path :
       {SocketDirectory(absl::StrCat(kUnixScheme, options.unix_socket)),
        SocketDirectory(options.resource_manager_address), options.compilation_cache_dir}) {
    if (!path.empty() && absl::c_find(colocated.hidden, path) == colocated.hidden.end()) {
      colocated.hidden.push_back(path);
    }
  }
  colocated.writable = options.sidecar_writable_paths;
  if (!options.storage_mount_root.empty()) colocated.writable.push_back(options.storage_mount_root);
  SY_LOG(Info) << "colocated Python runs sandboxed: read-only but for "
               << (colocated.writable.empty()
                       ? std::string("its own directory")
                       : absl::StrCat("its own directory and ",
                                      absl::StrJoin(colocated.writable, ", ")))
               << "; hidden: " << absl::StrJoin(colocated.hidden, ", ");
  return colocated;
}

// The bound on the buffers' bytes: the operator's, else on CPU (whose device memory is
// the host's) a share of the memory the host (or the cgroup) gives the worker, else none
// (a GPU plugin refuses what does not fit its device itself).
int64_t MaxBufferBytes(const WorkerOptions& options, const std::string& platform) {
  if (options.max_buffer_bytes >= 0) return options.max_buffer_bytes;
  if (platform != "cpu") return 0;
  return MemoryLimitBytes() / 100 * std::clamp(options.buffer_memory_percent, 1, 100) /
         std::max(options.workers_per_host, 1);
}

class WorkerServerImpl final : public WorkerServer {
 public:
  ~WorkerServerImpl() override {
    Shutdown();
    Teardown();
  }

  absl::Status Init(const WorkerOptions& options) {
    SY_ASSIGN_OR_RETURN(pjrt::Plugin * plugin, options.simulate
                                                   ? pjrt::Plugin::LoadSimulated()
                                                   : pjrt::Plugin::Load(options.pjrt_plugin));
    std::vector<pjrt::ClientOption> client_options;
    if (options.cpu_device_count > 0) {
      client_options.push_back({"cpu_device_count", int64_t{options.cpu_device_count}});
    }
    if (options.simulate) {
      client_options.push_back({"launch_micros", int64_t{options.simulated_launch_us}});
    }
    if (options.num_nodes > 1) {
      if (options.host_index < 0 || options.host_index >= options.num_nodes) {
        return absl::InvalidArgumentError(absl::StrCat("host index ", options.host_index,
                                                       " is not a node of a ", options.num_nodes,
                                                       "-host client"));
      }
      client_options.push_back({"num_nodes", int64_t{options.num_nodes}});
      client_options.push_back({"node_id", int64_t{options.host_index}});
      kv_store_ = std::make_unique<RmKeyValueStore>(options.resource_manager_address,
                                                    options.slice_index, options.kv_epoch);
      SY_LOG(Info) << "creating node " << options.host_index << " of a " << options.num_nodes
                   << "-host client; waiting for the other hosts of slice " << options.slice_index;
    }
    auto client = plugin->CreateClient(client_options, kv_store_.get());
    if (!client.ok() && options.num_nodes > 1) {
      return absl::Status(client.status().code(),
                          absl::StrCat("the plugin could not form a ", options.num_nodes,
                                       "-host client (does it support multi-host clients?): ",
                                       client.status().message()));
    }
    SY_ASSIGN_OR_RETURN(client_, std::move(client));
    // A simulated host runs no Python and no kernels: nothing it launches computes.
    const WorkerPython python = options.simulate
                                    ? WorkerPython{.colocated_off = "it is a simulated host"}
                                    : FindWorkerPython(options.python);
    if (!options.simulate) {
      SY_LOG(Info) << python.summary;
      RegisterKernels(*plugin, client_->platform_name(), python.path);
    }
    devices_ = std::make_unique<DeviceMap>(client_.get());
    const int64_t max_buffer_bytes = MaxBufferBytes(options, client_->platform_name());
    buffers_ = std::make_unique<BufferStore>(max_buffer_bytes);
    if (max_buffer_bytes > 0) {
      SY_LOG(Info) << "buffers may take up to " << max_buffer_bytes
                   << " bytes (--max_buffer_bytes)";
    }
    SY_LOG(Info) << "large host buffers: " << HostHugePages().why;
    if (options.simulate) {
      // no host callbacks
    } else if (auto callbacks = HostCallbacks::Create(*plugin, client_->platform_name());
               callbacks.ok()) {
      callbacks_ = std::move(callbacks).value();
    } else {
      SY_LOG(Info) << "no host callbacks (jax.debug.print, pure_callback): " << callbacks.status();
    }
    executor_ =
        std::make_unique<Executor>(client_.get(), devices_.get(), buffers_.get(), callbacks_.get());
    if (!options.simulate) OpenCompileCache(options, *plugin);
    transfers_ =
        std::make_unique<Transfers>(client_.get(), devices_.get(), buffers_.get(), &progress_);
    storage_ = std::make_unique<ShardStorage>(client_.get(), devices_.get(), buffers_.get(),
                                              options.storage_mount_root);
    if (python.path.empty() && !options.simulate) {
      executor_->ExplainMissingKernels(
          "this worker registered no jaxlib kernels: start it with --python=<a Python with "
          "jaxlib> (its start-up log says why it found none)");
    }
    colocated_ = std::make_unique<ColocatedCalls>(client_.get(), devices_.get(), buffers_.get(),
                                                  ColocatedSetup(options, python));

    WorkerIdentity identity;
    identity.slice_index = options.slice_index;
    identity.host_index = options.host_index;
    identity.plugin = ToProto(*plugin, *client_);
    identity.plugin.set_num_nodes(std::max(options.num_nodes, 1));
    identity.plugin.set_node_id(options.num_nodes > 1 ? options.host_index : 0);
    absl::BitGen random;
    identity.boot_id = absl::StrCat(absl::Hex(absl::Uniform<uint64_t>(random), absl::kZeroPad16),
                                    absl::Hex(absl::Uniform<uint64_t>(random), absl::kZeroPad16));
    executor_->AskGangVoids(
        GangVoidsAsker(options.resource_manager_address, options.slice_index, options.host_index));
    service_ = std::make_unique<WorkerService>(
        identity, client_.get(), devices_.get(), buffers_.get(), executor_.get(), transfers_.get(),
        &progress_, callbacks_.get(), storage_.get(), colocated_.get());
    // Frees what dead proxies made (their leases ran out).
    lease_sweeper_ = std::thread([this] {
      NameThisThread("sy-lease-sweep");
      while (!stopping_.WaitForNotificationWithTimeout(
          absl::Milliseconds(limits::kOwnerLeaseGraceMs / 4))) {
        service_->ReleaseExpiredOwners();
      }
    });
    StartHeapTrimmer();
    SY_RETURN_IF_ERROR(StartBulkServer(options));
    SY_ASSIGN_OR_RETURN(
        server_, StartGrpcServer(ServeHost(options.listen_host, options.unix_socket), options.port,
                                 {service_.get()}));
    address_ = options.advertise_host.empty() || !options.unix_socket.empty()
                   ? server_.address
                   : absl::StrCat(options.advertise_host, ":", server_.port);
    service_->SetAddress(address_);
    transfers_->SetOwnAddress(address_);
    SY_LOG(Info) << "worker serving on " << address_ << " with " << client_->devices().size() << " "
                 << (options.simulate ? "simulated " : "") << client_->platform_name()
                 << " devices (PJRT " << plugin->info().api_major << "." << plugin->info().api_minor
                 << ", StableHLO " << plugin->info().stablehlo_current_version << ")";

    StartRmLink(options, identity);
    SY_ASSIGN_OR_RETURN(metrics_,
                        MetricsServer::StartIfEnabled(options.listen_host, options.metrics_port,
                                                      [this] { return RenderMetrics(); }));
    return absl::OkStatus();
  }

  // Gives freed heap back once a burst of deletions (a session's end) is over, or a
  // compile: one frees its working heap when done (hundreds of MiB for a large
  // program), so it counts as many deletions.
  void StartHeapTrimmer() {
    heap_trimmer_ = std::make_unique<HeapTrimmer>(
        [this] { return executor_->executions() + executor_->compilations() + buffers_->size(); },
        [this] {
          return buffers_->deleted() +
                 executor_->compilations() * limits::kHeapTrimAfterDeletedBuffers;
        },
        HeapTrimPolicy::Options{.min_freed = limits::kHeapTrimAfterDeletedBuffers});
  }

  // Registers with the resource manager and keeps it told (heartbeats), on its thread.
  void StartRmLink(const WorkerOptions& options, const WorkerIdentity& identity) {
    RegisterWorkerRequest request;
    request.set_protocol_version(WORKER_PROTOCOL_STREAM_READS);
    request.set_address(address_);
    request.set_slice_index(options.slice_index);
    request.set_host_index(options.host_index);
    *request.mutable_plugin() = identity.plugin;
    for (DeviceInfo& device : devices_->LocalDevices()) *request.add_devices() = device;
    request.set_hostname(Hostname());
    request.set_pid(getpid());
    request.set_boot_id(identity.boot_id);
    rm_link_ = std::make_unique<RmLink>(
        options.resource_manager_address, std::move(request), devices_.get(),
        options.register_timeout, [this](absl::Status status) { Stop(std::move(status)); },
        RmLink::Reports{
            .buffer_bytes = [this] { return buffers_->bytes(); },
            .gang_passed = [this] { return executor_->GangPassed(); },
            .gang_start = [this](uint64_t sequencer,
                                 uint64_t first) { executor_->StartGangs(sequencer, first); }});
    rm_link_->Start();
  }

  // The bulk data plane for reads of large buffers by other workers: on a Unix socket
  // beside this worker's own, or on TCP where the fleet has no TLS (the data plane has
  // no encryption; a TLS fleet's bytes stay on gRPC). Without one, bytes go over gRPC.
  // An error only for a --bulk_port that cannot be had.
  absl::Status StartBulkServer(const WorkerOptions& options) {
    if (!options.bulk_transfers || options.listen_host == kInProcessHost) {
      return absl::OkStatus();
    }
    SY_ASSIGN_OR_RETURN(
        bulk_, bulk::StartPlane({options.unix_socket, options.listen_host, options.advertise_host,
                                 options.bulk_port, FleetTlsEnabled(), "buffers between workers"}));
    if (bulk_ != nullptr) service_->SetBulkServer(bulk_.get());
    return absl::OkStatus();
  }

  void OpenCompileCache(const WorkerOptions& options, const pjrt::Plugin& plugin) {
    if (options.compilation_cache_dir.empty()) return;
    const std::string description = absl::StrCat(
        client_->platform_name(), " ", client_->platform_version(), " (PJRT ",
        plugin.info().api_major, ".", plugin.info().api_minor, ", XLA ", plugin.info().xla_version,
        ", StableHLO ", plugin.info().stablehlo_current_version, ")");
    absl::StatusOr<compile_cache::PluginIdentity> identity =
        compile_cache::IdentifyPlugin(options.pjrt_plugin, description);
    absl::StatusOr<std::unique_ptr<compile_cache::CompileCache>> cache =
        identity.ok() ? compile_cache::CompileCache::Open(options.compilation_cache_dir,
                                                          options.compilation_cache_max_bytes)
                      : identity.status();
    if (!cache.ok()) {
      SY_LOG(Error) << "no compilation cache (every program is compiled): "
                    << cache.status().message();
      return;
    }
    compile_cache_ = *std::move(cache);
    executor_->UseCompileCache(compile_cache_.get(), *std::move(identity));
    if (compile_cache_->writable()) {
      SY_LOG(Info) << "compilation cache in " << compile_cache_->directory();
    } else {
      SY_LOG(Warning) << "compilation cache in " << compile_cache_->directory()
                      << " is read-only here: hits load, new programs are not stored";
    }
  }

  int port() const override { return server_.port; }
  std::string address() const override { return address_; }

  std::string RenderMetrics() const {
    MetricsText text;
    text.Add("switchyard_worker_buffers", "gauge", "Buffers held for clients.", buffers_->size())
        .Add("switchyard_worker_buffer_bytes", "gauge", "Bytes of the buffers held.",
             buffers_->bytes())
        .Add("switchyard_worker_buffer_bytes_max", "gauge",
             "The most bytes the buffers may take (--max_buffer_bytes; 0: no bound).",
             buffers_->max_bytes())
        .Add("switchyard_worker_executables", "gauge", "Loaded executables.", executor_->size())
        .Add("switchyard_worker_executions_total", "counter", "Launches started.",
             executor_->executions())
        .Add("switchyard_worker_registered", "gauge", "1 once the resource manager admitted us.",
             devices_->registered() ? 1 : 0);
    if (bulk_ != nullptr) {
      const bulk::Server::Stats served = bulk_->stats();
      text.Add("switchyard_worker_bulk_bytes_served_total", "counter",
               "Buffer bytes other workers read from this one's data plane.", served.bytes_served)
          .Add("switchyard_worker_bulk_connections_total", "counter",
               "Connections to this worker's data plane.", served.connections)
          .Add("switchyard_worker_bulk_failures_total", "counter",
               "Data-plane connections refused (bad request or ticket, too many) or broken.",
               served.failed);
    }
    text.Add("switchyard_worker_bulk_bytes_pulled_total", "counter",
             "Buffer bytes this worker read from other workers' data planes.",
             transfers_->bulk_bytes_pulled())
        .Add("switchyard_worker_bulk_fallbacks_total", "counter",
             "Reads that went over gRPC because a peer's data plane could not be reached.",
             transfers_->bulk_fallbacks())
        .Add("switchyard_worker_batched_transfers_total", "counter",
             "Buffers made by batches of transfers (assemble_buffers: many arrays moved at once).",
             transfers_->batched())
        .Add("switchyard_worker_offered_at_once_total", "counter",
             "Of those, buffers pulled with offers asked for in one call a peer (OfferBuffers).",
             transfers_->offered_at_once())
        .Add("switchyard_worker_stream_reads_total", "counter",
             "Small buffers read for a proxy over its operation stream (read_buffer).",
             service_->stream_reads())
        .Add("switchyard_worker_bulk_put_bytes_total", "counter",
             "Bytes of puts (uploads) this worker read from the proxy's data plane.",
             service_->put_bytes_pulled())
        .Add("switchyard_worker_bulk_put_fallbacks_total", "counter",
             "Puts offered on a data plane that were not served there (sent inline instead).",
             service_->put_fallbacks())
        .Add("switchyard_worker_bytes_copied_total", "counter",
             "Bytes of buffer contents copied by this process, the kernel's copies for its "
             "sockets included.",
             static_cast<double>(BytesCopied()))
        .Add("switchyard_worker_host_bytes_kept", "gauge",
             "Memory of freed large host buffers kept for reuse (the kernel may reclaim it).",
             static_cast<int64_t>(HostBytes::KeptBytes()))
        .Add("switchyard_worker_sidecar_files_kept", "gauge",
             "Memory of colocated calls' shared files kept for their sidecars' next calls.",
             SharedMemoryPool::KeptBytesInProcess());
    WorkerStats stats;
    executor_->AddStats(&stats);
    for (const auto& [tenant, seconds] : stats.device_seconds()) {
      text.Add("switchyard_worker_device_seconds_total", "counter",
               "Device time of finished launches, by tenant (\"\": sessions without one).", seconds,
               MetricLabel("tenant", tenant));
    }
    for (const auto& [device, seconds] : stats.device_busy_seconds()) {
      text.Add("switchyard_worker_device_busy_seconds_total", "counter",
               "Time each device (global id) was busy with finished launches.", seconds,
               MetricLabel("device", absl::StrCat(device)));
    }
    if (compile_cache_ != nullptr) {
      const compile_cache::Counters c = compile_cache_->counters();
      text.Add("switchyard_compile_cache_hits_total", "counter",
               "Programs loaded from the compilation cache.", c.hits)
          .Add("switchyard_compile_cache_misses_total", "counter",
               "Programs compiled: not in the cache, or a corrupt entry.", c.misses)
          .Add("switchyard_compile_cache_stores_total", "counter", "Entries written.", c.stores)
          .Add("switchyard_compile_cache_store_failures_total", "counter",
               "Entries that could not be written.", c.store_failures)
          .Add("switchyard_compile_cache_corrupt_total", "counter",
               "Entries found corrupt or refused by the plugin (removed).", c.corrupt)
          .Add("switchyard_compile_cache_evictions_total", "counter",
               "Entries removed to stay under the size cap.", c.evictions)
          .Add("switchyard_compile_cache_read_bytes_total", "counter", "Bytes of hits read.",
               c.bytes_read)
          .Add("switchyard_compile_cache_written_bytes_total", "counter",
               "Bytes of entries written.", c.bytes_written)
          .Add("switchyard_compile_cache_load_seconds_total", "counter",
               "Time spent reading and loading hits.", c.load_seconds)
          .Add("switchyard_compile_cache_compile_seconds_saved_total", "counter",
               "Compile time of the hits' programs, less the time loading them.",
               c.compile_seconds_saved);
    }
    return text.str();
  }

  absl::Status Wait() override {
    stopping_.WaitForNotification();
    Teardown();
    absl::MutexLock lock(&mutex_);
    return exit_status_;
  }

  void Shutdown() override { Stop(absl::OkStatus()); }

 private:
  void Stop(absl::Status status) {
    absl::MutexLock lock(&mutex_);
    if (stopping_.HasBeenNotified()) return;
    exit_status_ = std::move(status);
    stopping_.Notify();
  }

  void Teardown() {
    absl::MutexLock lock(&teardown_mutex_);
    if (rm_link_ != nullptr) rm_link_->Stop();
    if (lease_sweeper_.joinable()) lease_sweeper_.join();  // stopping_ is notified by now
    heap_trimmer_.reset();
    if (server_.server != nullptr && !served_) {
      server_.name = InProcessName();  // new in-process channels find nothing from now
      // Proxies' operation streams stay open for as long as they live: cancel what is
      // still running after a moment rather than wait for them.
      server_.Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
      server_.server->Wait();
      // The server object stays until we go: in-process channels to it (tests) must
      // find a server that refuses calls, not freed memory.
      served_ = true;
      if (bulk_ != nullptr) bulk_->Stop();  // after the server: no offers come from now
      SY_LOG(Info) << "worker " << address_ << " stopped";
    }
  }

  std::unique_ptr<RmKeyValueStore> kv_store_;  // outlives the client, which calls it
  std::unique_ptr<pjrt::Client> client_;
  std::unique_ptr<DeviceMap> devices_;
  std::unique_ptr<BufferStore> buffers_;
  StreamProgress progress_;
  std::unique_ptr<HostCallbacks> callbacks_;                    // outlives the executor's launches
  std::unique_ptr<compile_cache::CompileCache> compile_cache_;  // outlives the executor
  std::unique_ptr<Executor> executor_;
  std::unique_ptr<Transfers> transfers_;
  std::unique_ptr<ShardStorage> storage_;      // its writers finish before the buffers go
  std::unique_ptr<ColocatedCalls> colocated_;  // its sidecars stop before the buffers go
  std::unique_ptr<WorkerService> service_;
  std::unique_ptr<bulk::Server> bulk_;  // its offers hold buffers: goes before the client
  StartedServer server_;
  std::string address_;
  std::unique_ptr<RmLink> rm_link_;
  std::thread lease_sweeper_;
  std::unique_ptr<HeapTrimmer> heap_trimmer_;  // reads the executor and the buffers
  std::unique_ptr<MetricsServer> metrics_;
  absl::Mutex mutex_;
  absl::Notification stopping_;
  absl::Status exit_status_ ABSL_GUARDED_BY(mutex_);
  absl::Mutex teardown_mutex_;
  bool served_ ABSL_GUARDED_BY(teardown_mutex_) = false;
};

}  // namespace

absl::StatusOr<std::unique_ptr<WorkerServer>> WorkerServer::Start(const WorkerOptions& options) {
  auto worker = std::make_unique<WorkerServerImpl>();
  SY_RETURN_IF_ERROR(worker->Init(options));
  return worker;
}

}  // namespace switchyard::worker
