// `switchyard up`: rm + N workers + proxy as child processes of this one. Children
// die with us (PR_SET_PDEATHSIG); one that dies is restarted with backoff; SIGINT or
// SIGTERM stops them all in order.

#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/flags/flag.h"
#include "absl/random/random.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "common/files.h"
#include "common/grpc_server.h"
#include "common/limits.h"
#include "common/logging.h"
#include "common/machine_memory.h"
#include "switchyard/rm.grpc.pb.h"

ABSL_FLAG(int, workers, 2, "up: number of workers");
ABSL_FLAG(int, devices_per_worker, 4, "up: CPU devices per worker");
ABSL_DECLARE_FLAG(int64_t, max_buffer_bytes);
ABSL_FLAG(int, hosts_per_slice, 1, "up: workers per slice (worker i is host i % n of slice i / n)");
ABSL_DECLARE_FLAG(int, simulated_hosts);
ABSL_FLAG(int, simulated_hosts_per_process, 50,
          "up: simulated hosts (--simulated_hosts) run by each of their processes");
ABSL_DECLARE_FLAG(int64_t, simulated_launch_us);
// By default every process of `up` serves on a Unix socket in a directory only this user
// can enter: no other user of the host reaches any of them. A port puts that process on
// TCP (at --listen_host) instead.
ABSL_FLAG(int, rm_port, -1,
          "up: serve the resource manager on TCP at --listen_host:PORT (-1: a private Unix "
          "socket)");
ABSL_FLAG(int, proxy_port, -1,
          "up: serve JAX clients on TCP at --listen_host:PORT (-1: a private Unix socket, "
          "JAX_BACKEND_TARGET=grpc://unix:PATH); where others can reach the port, add "
          "--tokens_file");
ABSL_FLAG(int, worker_port, -1,
          "up: serve the workers on TCP from --listen_host:PORT, +1 each (0: free ports; -1: "
          "private Unix sockets)");
ABSL_FLAG(int, startup_timeout_s, 120, "up: how long to wait for the cluster to come up");
ABSL_DECLARE_FLAG(int, num_elastic_slices);
ABSL_DECLARE_FLAG(std::string, tokens_file);
ABSL_DECLARE_FLAG(int64_t, session_max_arrays);
ABSL_DECLARE_FLAG(int64_t, session_max_host_buffer_bytes);
ABSL_DECLARE_FLAG(int64_t, proxy_max_host_buffer_bytes);
ABSL_DECLARE_FLAG(std::string, virtual_slices);
ABSL_DECLARE_FLAG(absl::Duration, session_idle_timeout);
ABSL_DECLARE_FLAG(absl::Duration, client_stall_timeout);
ABSL_DECLARE_FLAG(std::string, large_transfer_directory);
ABSL_DECLARE_FLAG(std::string, tenant_shares);
ABSL_DECLARE_FLAG(std::string, tenant_priorities);
ABSL_DECLARE_FLAG(absl::Duration, lease_max_hold);

namespace switchyard::cli {
namespace {

// Where one process serves: the flags that say so, and the address others dial.
struct Endpoint {
  std::vector<std::string> flags;  // two
  std::string address;
};

sigset_t HandledSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGCHLD);
  return set;
}

// The child's pid; -1 if fork failed (out of memory or processes).
pid_t Spawn(const std::string& self, const std::vector<std::string>& args) {
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid != 0) return pid;
  // Child: die with the parent, even if it is killed with SIGKILL.
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != parent) _exit(1);
  sigset_t set = HandledSignals();
  sigprocmask(SIG_UNBLOCK, &set, nullptr);
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(self.c_str()));
  for (const std::string& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  execv(self.c_str(), argv.data());
  std::perror("switchyard up: exec");
  _exit(127);
}

// The file where the child `name` writes its metrics port.
std::string MetricsPortFile(const std::string& state_dir, const std::string& name) {
  return absl::StrCat(state_dir, "/", absl::StrReplaceAll(name, {{" ", "-"}}), ".metrics-port");
}

// The port in a child's metrics port file; 0 if it has written none (yet).
int ReadMetricsPort(const std::string& port_file) {
  absl::StatusOr<std::string> text = ReadWholeFile(port_file);
  int port = 0;
  if (!text.ok() || !absl::SimpleAtoi(absl::StripAsciiWhitespace(*text), &port)) return 0;
  return port;
}

// With its metrics port written, a child that chose one keeps it when restarted.
void KeepMetricsPort(std::vector<std::string>& args) {
  std::string port_file;
  for (const std::string& arg : args) {
    if (absl::StartsWith(arg, "--metrics_port_file=")) {
      port_file = arg.substr(std::strlen("--metrics_port_file="));
    }
  }
  if (port_file.empty()) return;
  const int port = ReadMetricsPort(port_file);
  if (port == 0) return;
  for (std::string& arg : args) {
    if (arg == "--metrics_port=0") arg = absl::StrCat("--metrics_port=", port);
  }
}

// The children, each restarted with backoff when it dies (while `supervising`):
// a crashed process never takes the others down, and `up` stops only when told to.
class Cluster {
 public:
  explicit Cluster(std::string self) : self_(std::move(self)) {}

  // False if the process could not be started.
  bool Start(const std::string& name, const std::vector<std::string>& args) {
    Child& child = children_[name];
    child.args = args;
    child.started = absl::Now();
    child.pid = Spawn(self_, args);
    if (child.pid < 0) {
      SY_LOG(Error) << "cannot start " << name << ": fork: " << std::strerror(errno);
      child.pid = 0;
      return false;
    }
    pids_[child.pid] = name;
    return true;
  }

  // Reaps exited children and schedules restarts; returns the names of those that
  // exited.
  std::vector<std::string> Reap() {
    std::vector<std::string> exited;
    int status = 0;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
      auto it = pids_.find(pid);
      if (it == pids_.end()) continue;
      Child& child = children_[it->second];
      const std::string how = WIFEXITED(status) ? absl::StrCat("status ", WEXITSTATUS(status))
                                                : absl::StrCat("signal ", WTERMSIG(status));
      child.pid = 0;
      if (supervising_) {
        // Quick restarts for a process that ran a while; backoff for one that keeps dying.
        child.backoff = absl::Now() - child.started > kStableRun
                            ? kRestartBackoffMin
                            : std::min(child.backoff * 2, kRestartBackoffMax);
        child.restart_at = absl::Now() + child.backoff;
        ++child.restarts;
        SY_LOG(Warning) << it->second << " (pid " << pid << ") exited: " << how
                        << "; restarting it in " << absl::FormatDuration(child.backoff)
                        << " (restart " << child.restarts << ")";
      } else {
        SY_LOG(Warning) << it->second << " (pid " << pid << ") exited: " << how;
      }
      exited.push_back(it->second);
      pids_.erase(it);
    }
    return exited;
  }

  // Starts the children whose backoff is over; returns how long until the next one.
  absl::Duration RestartDue() {
    absl::Duration next = absl::InfiniteDuration();
    for (auto& [name, child] : children_) {
      if (child.pid != 0 || !supervising_) continue;
      const absl::Duration left = child.restart_at - absl::Now();
      if (left > absl::ZeroDuration()) {
        next = std::min(next, left);
        continue;
      }
      child.started = absl::Now();
      KeepMetricsPort(child.args);
      child.pid = Spawn(self_, child.args);
      if (child.pid < 0) {  // try again after the next backoff
        SY_LOG(Error) << "cannot restart " << name << ": fork: " << std::strerror(errno);
        child.pid = 0;
        child.backoff = std::min(child.backoff * 2, kRestartBackoffMax);
        child.restart_at = absl::Now() + child.backoff;
        next = std::min(next, child.backoff);
        continue;
      }
      pids_[child.pid] = name;
      SY_LOG(Info) << "restarted " << name << " (pid " << child.pid << ")";
    }
    return next;
  }

  bool Running(const std::string& name) const {
    auto it = children_.find(name);
    return it != children_.end() && it->second.pid != 0;
  }

  void Supervise() { supervising_ = true; }

  // SIGTERM to all, then SIGKILL whatever is left after `grace`.
  void Stop(absl::Duration grace) {
    supervising_ = false;
    for (const auto& [pid, name] : pids_) kill(pid, SIGTERM);
    absl::Time deadline = absl::Now() + grace;
    while (!pids_.empty() && absl::Now() < deadline) {
      Reap();
      absl::SleepFor(absl::Milliseconds(20));
    }
    for (const auto& [pid, name] : pids_) {
      SY_LOG(Warning) << name << " did not stop; killing it";
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
    pids_.clear();
  }

 private:
  static constexpr absl::Duration kRestartBackoffMin = absl::Milliseconds(250);
  static constexpr absl::Duration kRestartBackoffMax = absl::Seconds(10);
  static constexpr absl::Duration kStableRun = absl::Seconds(30);
  struct Child {
    std::vector<std::string> args;
    pid_t pid = 0;  // 0 while waiting to be restarted
    absl::Time started;
    absl::Time restart_at;
    absl::Duration backoff = kRestartBackoffMin / 2;
    int restarts = 0;
  };

  std::string self_;
  bool supervising_ = false;
  std::map<std::string, Child> children_;
  std::map<pid_t, std::string> pids_;
};

// Polls the RM until `workers` hosts are healthy, the RM or `newest` dies, or time
// runs out.
bool WaitForFleet(Cluster* cluster, const std::string& rm_address, int workers,
                  const std::string& newest, absl::Time deadline) {
  auto stub = ResourceManager::NewStub(CreateChannel(rm_address));
  while (absl::Now() < deadline) {
    cluster->Reap();
    if (!cluster->Running("rm") || !cluster->Running(newest)) return false;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(1));
    Fleet fleet;
    if (stub->GetFleet(&context, GetFleetRequest(), &fleet).ok()) {
      int healthy = 0;
      for (const SliceStatus& slice : fleet.slices()) {
        for (const HostStatus& host : slice.hosts()) healthy += host.healthy();
      }
      if (healthy >= workers) return true;
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
  return false;
}

// Waits until something accepts connections at `address`, or `name` exits.
bool WaitForServer(Cluster* cluster, const std::string& name, const std::string& address,
                   absl::Time deadline) {
  auto channel = CreateChannel(address, Audience::kClients);
  while (absl::Now() < deadline) {
    cluster->Reap();
    if (!cluster->Running(name)) return false;
    if (channel->WaitForConnected(absl::ToChronoTime(absl::Now() + absl::Milliseconds(200)))) {
      return true;
    }
  }
  return false;
}

// The plugin the workers load: --pjrt_plugin, else $SWITCHYARD_PJRT_PLUGIN; empty (and
// said why) if there is none readable.
std::string ReadablePlugin() {
  std::string plugin = absl::GetFlag(FLAGS_pjrt_plugin);
  if (plugin.empty() && std::getenv("SWITCHYARD_PJRT_PLUGIN") != nullptr) {
    plugin = std::getenv("SWITCHYARD_PJRT_PLUGIN");
  }
  if (plugin.empty() || access(plugin.c_str(), R_OK) != 0) {
    SY_LOG(Error) << "no readable PJRT plugin ('" << plugin
                  << "'): pass --pjrt_plugin=PATH or set SWITCHYARD_PJRT_PLUGIN";
    return "";
  }
  return plugin;
}

// The cluster's own directory (0700): the RM's state file, which keeps device ids so
// that an RM restarted under a running session gives every device the id the client
// holds, and the Unix sockets. Lower case: jaxlib lower-cases JAX_BACKEND_TARGET,
// socket path included.
absl::StatusOr<std::string> MakeClusterDirectory() {
  absl::BitGen random;
  for (int attempt = 0;; ++attempt) {
    std::string candidate = absl::StrCat(
        "/tmp/switchyard-up-", absl::Hex(absl::Uniform<uint64_t>(random), absl::kZeroPad16));
    if (mkdir(candidate.c_str(), 0700) == 0) return candidate;
    if (errno != EEXIST || attempt > 100) {
      return absl::InternalError(
          absl::StrCat("cannot create the cluster's directory: ", std::strerror(errno)));
    }
  }
}

// Every process gets the storage and the fleet's TLS flags.
std::vector<std::string> WithSharedFlags(std::vector<std::string> args) {
  for (std::string flag :
       {absl::StrCat("--gcs_scratch_location=", absl::GetFlag(FLAGS_gcs_scratch_location)),
        absl::StrCat("--storage_mount_root=", absl::GetFlag(FLAGS_storage_mount_root)),
        absl::StrCat("--compilation_cache_max_bytes=",
                     absl::GetFlag(FLAGS_compilation_cache_max_bytes)),
        absl::StrCat("--tls_ca_file=", absl::GetFlag(FLAGS_tls_ca_file)),
        absl::StrCat("--tls_cert_file=", absl::GetFlag(FLAGS_tls_cert_file)),
        absl::StrCat("--tls_key_file=", absl::GetFlag(FLAGS_tls_key_file))}) {
    args.push_back(std::move(flag));
  }
  return args;
}

// --metrics_port=P: the proxy serves metrics on P, the rm on P+1, worker i on P+2+i.
// 0: each takes a free port (no race with other processes for one) and writes it to
// `port_file`; `up` prints them once the cluster is ready, and a child restarted keeps
// its port.
std::vector<std::string> MetricsFlags(int offset, const std::string& port_file) {
  const int port = absl::GetFlag(FLAGS_metrics_port);
  return {absl::StrCat("--metrics_port=", port > 0 ? port + offset : port),
          absl::StrCat("--metrics_port_file=", port == 0 ? port_file : "")};
}

// With --metrics_port=0, a line "  metrics: proxy=http://HOST:PORT/metrics rm=...
// worker-0=..." of the ports the children wrote (each waited for until `deadline`; "?"
// for one that never came).
void PrintMetricsUrls(const std::string& state_dir, int workers, const std::string& host,
                      absl::Time deadline) {
  if (absl::GetFlag(FLAGS_metrics_port) != 0) return;
  std::vector<std::string> names = {"proxy", "rm"};
  for (int i = 0; i < workers; ++i) names.push_back(absl::StrCat("worker ", i));
  std::string urls;
  for (const std::string& name : names) {
    const std::string port_file = MetricsPortFile(state_dir, name);
    int port = ReadMetricsPort(port_file);
    while (port == 0 && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(20));
      port = ReadMetricsPort(port_file);
    }
    absl::StrAppend(&urls, " ", absl::StrReplaceAll(name, {{" ", "-"}}), "=",
                    port == 0 ? "?" : absl::StrCat("http://", host, ":", port, "/metrics"));
  }
  std::printf("  metrics:%s\n", urls.c_str());
}

// Appends `more` to `args`.
std::vector<std::string> With(std::vector<std::string> args, std::vector<std::string> more) {
  args.insert(args.end(), std::make_move_iterator(more.begin()),
              std::make_move_iterator(more.end()));
  return args;
}

std::vector<std::string> RmArgs(const Endpoint& rm, const std::string& state_dir) {
  return With(
      WithSharedFlags({"rm", rm.flags[0], rm.flags[1],
                       absl::StrCat("--state_file=", state_dir, "/rm-state"),
                       absl::StrCat("--tenant_shares=", absl::GetFlag(FLAGS_tenant_shares)),
                       absl::StrCat("--tenant_priorities=", absl::GetFlag(FLAGS_tenant_priorities)),
                       absl::StrCat("--lease_max_hold=",
                                    absl::FormatDuration(absl::GetFlag(FLAGS_lease_max_hold)))}),
      MetricsFlags(1, MetricsPortFile(state_dir, "rm")));
}

// Worker `i` of `workers`, each on a host of its own: slices of --hosts_per_slice.
std::vector<std::string> WorkerArgs(int i, int workers, const Endpoint& worker,
                                    const std::string& rm_address, const std::string& plugin,
                                    const std::string& metrics_port_file) {
  const int hosts_per_slice = absl::GetFlag(FLAGS_hosts_per_slice);
  return With(
      WithSharedFlags(
          {"worker", absl::StrCat("--resource_manager_address=", rm_address), worker.flags[0],
           worker.flags[1], absl::StrCat("--slice_index=", i / hosts_per_slice),
           absl::StrCat("--host_index=", i % hosts_per_slice),
           absl::StrCat("--pjrt_plugin=", plugin),
           // Empty: each worker finds one (and says which).
           absl::StrCat("--python=", absl::GetFlag(FLAGS_python)),
           absl::StrCat("--sidecar_shm_directory=", absl::GetFlag(FLAGS_sidecar_shm_directory)),
           absl::StrCat("--sidecar_sandbox=", absl::GetFlag(FLAGS_sidecar_sandbox)),
           absl::StrCat("--bulk_transfers=", absl::GetFlag(FLAGS_bulk_transfers)),
           absl::StrCat("--sidecar_writable_paths=",
                        absl::StrJoin(absl::GetFlag(FLAGS_sidecar_writable_paths), ",")),
           absl::StrCat("--cpu_device_count=", absl::GetFlag(FLAGS_devices_per_worker)),
           absl::StrCat("--max_buffer_bytes=", absl::GetFlag(FLAGS_max_buffer_bytes)),
           absl::StrCat("--workers_per_host=", workers),
           absl::StrCat("--buffer_memory_percent=", limits::kUpWorkerBufferMemoryPercent)}),
      MetricsFlags(2 + i, metrics_port_file));
}

// A process of `count` simulated hosts, slices `first_slice` on, each with
// --devices_per_worker devices.
std::vector<std::string> SimulatedHostArgs(int first_slice, int count, const Endpoint& endpoint,
                                           const std::string& rm_address) {
  return WithSharedFlags(
      {"worker", "--simulate", absl::StrCat("--simulated_hosts=", count),
       absl::StrCat("--simulated_launch_us=", absl::GetFlag(FLAGS_simulated_launch_us)),
       absl::StrCat("--resource_manager_address=", rm_address), "--metrics_port=-1",
       endpoint.flags[0], endpoint.flags[1], absl::StrCat("--slice_index=", first_slice),
       absl::StrCat("--bulk_transfers=", absl::GetFlag(FLAGS_bulk_transfers)),
       absl::StrCat("--cpu_device_count=", absl::GetFlag(FLAGS_devices_per_worker))});
}

// The proxy shares the machine with the workers: its default bound is a smaller share.
int64_t UpProxyHostBufferBytes() {
  const int64_t flag = absl::GetFlag(FLAGS_proxy_max_host_buffer_bytes);
  if (flag >= 0) return flag;
  return MemoryLimitBytes() / 100 * limits::kUpProxyHostBufferMemoryPercent;
}

std::vector<std::string> ProxyArgs(const Endpoint& proxy, const std::string& rm_address,
                                   const std::string& metrics_port_file) {
  return With(WithSharedFlags(
                  {"proxy", proxy.flags[0], proxy.flags[1],
                   absl::StrCat("--resource_manager_address=", rm_address),
                   absl::StrCat("--num_elastic_slices=", absl::GetFlag(FLAGS_num_elastic_slices)),
                   absl::StrCat("--tokens_file=", absl::GetFlag(FLAGS_tokens_file)),
                   absl::StrCat("--session_max_arrays=", absl::GetFlag(FLAGS_session_max_arrays)),
                   absl::StrCat("--session_max_host_buffer_bytes=",
                                absl::GetFlag(FLAGS_session_max_host_buffer_bytes)),
                   absl::StrCat("--proxy_max_host_buffer_bytes=", UpProxyHostBufferBytes()),
                   absl::StrCat("--virtual_slices=", absl::GetFlag(FLAGS_virtual_slices)),
                   absl::StrCat("--session_idle_timeout=",
                                absl::FormatDuration(absl::GetFlag(FLAGS_session_idle_timeout))),
                   absl::StrCat("--client_stall_timeout=",
                                absl::FormatDuration(absl::GetFlag(FLAGS_client_stall_timeout))),
                   absl::StrCat("--large_transfer_directory=",
                                absl::GetFlag(FLAGS_large_transfer_directory)),
                   absl::StrCat("--bulk_transfers=", absl::GetFlag(FLAGS_bulk_transfers))}),
              MetricsFlags(0, metrics_port_file));
}

// Restarts a child that dies until SIGINT or SIGTERM comes.
void Supervise(Cluster& cluster, const sigset_t& signals) {
  cluster.Supervise();
  for (;;) {
    cluster.Reap();
    const absl::Duration wait = std::min(cluster.RestartDue(), absl::Seconds(1));
    const timespec timeout = absl::ToTimespec(wait);
    const int signal = sigtimedwait(&signals, nullptr, &timeout);
    if (signal == SIGINT || signal == SIGTERM) {
      SY_LOG(Info) << "signal " << signal << ": stopping the cluster";
      return;
    }
  }
}

}  // namespace

int RunUp(const char* argv0) {
  SetLogProcessName("up");
  // We fork while gRPC threads run; the children exec at once, so gRPC's fork
  // handlers (which stall fork for seconds) are not needed.
  setenv("GRPC_ENABLE_FORK_SUPPORT", "0", 1);
  sigset_t signals = HandledSignals();
  sigprocmask(SIG_BLOCK, &signals, nullptr);

  const int workers = absl::GetFlag(FLAGS_workers);
  const int devices = absl::GetFlag(FLAGS_devices_per_worker);
  const int hosts_per_slice = absl::GetFlag(FLAGS_hosts_per_slice);
  const int simulated = absl::GetFlag(FLAGS_simulated_hosts);
  const int per_process = absl::GetFlag(FLAGS_simulated_hosts_per_process);
  if (workers < 1 || devices < 1 || hosts_per_slice < 1 || simulated < 0 || per_process < 1) {
    SY_LOG(Error) << "--workers, --devices_per_worker, --hosts_per_slice and "
                     "--simulated_hosts_per_process must be at least 1, --simulated_hosts 0 or "
                     "more";
    return 2;
  }
  const std::string plugin = ReadablePlugin();
  if (plugin.empty()) return 2;
  const std::string host = absl::GetFlag(FLAGS_listen_host);
  const int rm_port = absl::GetFlag(FLAGS_rm_port);
  const int proxy_port = absl::GetFlag(FLAGS_proxy_port);
  const int worker_port = absl::GetFlag(FLAGS_worker_port);
  if (rm_port == 0 || proxy_port == 0) {
    // The others must be told where these are before they start.
    SY_LOG(Error) << "--rm_port and --proxy_port need a port number (or -1: a Unix socket)";
    return 2;
  }
  // /proc/self/exe survives a relative argv[0] and a changed working directory.
  char self[4096] = {};
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  std::string self_path = n > 0 ? std::string(self, n) : std::string(argv0);

  absl::StatusOr<std::string> made = MakeClusterDirectory();
  if (!made.ok()) {
    SY_LOG(Error) << made.status().message();
    return 1;
  }
  const std::string state_dir = *std::move(made);
  absl::Cleanup remove_state = [&] {
    std::error_code ignored;  // with the state, any temporary a killed RM left
    std::filesystem::remove_all(state_dir, ignored);
  };
  // The flags that put a process on a Unix socket or on TCP, and the address to dial.
  auto endpoint = [&](bool tcp, const std::string& socket_name, int port) {
    return tcp ? Endpoint{{absl::StrCat("--server_port=", port),
                           absl::StrCat("--listen_host=", host)},
                          absl::StrCat(host, ":", port)}
               : Endpoint{{absl::StrCat("--unix_socket=", state_dir, "/", socket_name),
                           absl::StrCat("--listen_host=", host)},
                          absl::StrCat(kUnixScheme, state_dir, "/", socket_name)};
  };
  const Endpoint rm = endpoint(rm_port >= 0, "rm.sock", rm_port);
  const std::string& rm_address = rm.address;

  // The compilation cache: checked here first (a bad location stops `up` with the
  // reason), then passed on to every process, as Pathways does.
  if (absl::StatusOr<std::string> cache = CompilationCacheDirectory(); !cache.ok()) {
    SY_LOG(Error) << cache.status().message();
    return 2;
  }

  Cluster cluster(self_path);
  cluster.Start("rm", RmArgs(rm, state_dir));
  // One at a time, so global device ids follow (slice, host) order: the RM assigns
  // them in join order.
  absl::Time deadline = absl::Now() + absl::Seconds(absl::GetFlag(FLAGS_startup_timeout_s));
  for (int i = 0; i < workers; ++i) {
    const Endpoint worker = endpoint(worker_port >= 0, absl::StrCat("worker-", i, ".sock"),
                                     worker_port == 0 ? 0 : worker_port + i);
    const std::string name = absl::StrCat("worker ", i);
    cluster.Start(
        name, WorkerArgs(i, workers, worker, rm_address, plugin, MetricsPortFile(state_dir, name)));
    if (!WaitForFleet(&cluster, rm_address, i + 1, name, deadline)) {
      SY_LOG(Error) << "the cluster did not come up; stopping it";
      cluster.Stop(absl::Seconds(5));
      return 1;
    }
  }
  // Simulated hosts after the real ones, a process per --simulated_hosts_per_process.
  const int first_simulated = (workers + hosts_per_slice - 1) / hosts_per_slice;
  for (int h = 0; h < simulated; h += per_process) {
    const int count = std::min(per_process, simulated - h);
    const Endpoint hosts = endpoint(worker_port >= 0, absl::StrCat("sim-", h, ".sock"),
                                    worker_port == 0 ? 0 : worker_port + workers + h);
    const std::string name = absl::StrCat("simulated hosts ", h, "-", h + count - 1);
    cluster.Start(name, SimulatedHostArgs(first_simulated + h, count, hosts, rm_address));
    if (!WaitForFleet(&cluster, rm_address, workers + h + count, name, deadline)) {
      SY_LOG(Error) << "the simulated hosts did not come up; stopping the cluster";
      cluster.Stop(absl::Seconds(5));
      return 1;
    }
  }
  const Endpoint proxy = endpoint(proxy_port >= 0, "proxy.sock", proxy_port);
  cluster.Start("proxy", ProxyArgs(proxy, rm_address, MetricsPortFile(state_dir, "proxy")));
  if (!WaitForServer(&cluster, "proxy", proxy.address, deadline)) {
    SY_LOG(Error) << "the proxy did not come up; stopping the cluster";
    cluster.Stop(absl::Seconds(5));
    return 1;
  }
  std::printf(
      "switchyard: local cluster ready: resource manager %s, %d workers (%d slices)%s, %d "
      "devices each\n"
      "  JAX_PLATFORMS=proxy JAX_BACKEND_TARGET=grpc://%s "
      "IFRT_PROXY_USE_INSECURE_GRPC_CREDENTIALS=true python your_program.py\n"
      "  switchyard status --resource_manager_address=%s\n",
      rm_address.c_str(), workers, first_simulated,
      simulated > 0 ? absl::StrCat(" and ", simulated, " simulated hosts").c_str() : "", devices,
      proxy.address.c_str(), rm_address.c_str());
  PrintMetricsUrls(state_dir, workers, host, deadline);
  std::fflush(stdout);

  // From here on a child that dies is restarted; `up` itself stops only on a signal.
  Supervise(cluster, signals);
  cluster.Stop(absl::Seconds(10));
  SY_LOG(Info) << "stopped";
  return 0;
}

}  // namespace switchyard::cli
