#pragma once

// The resource manager: membership, global device ids and health for the fleet.
// This is the component's only public header.

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"

namespace switchyard::rm {

struct RmOptions {
  std::string listen_host = "127.0.0.1";  // "inproc": in-process only, no port
  int port = 29001;  // 0 picks a free port; see `ResourceManagerServer::port()`
  // Non-empty: serve on this Unix socket (only this user gets in) instead of
  // listen_host:port; metrics stay on listen_host.
  std::string unix_socket;
  absl::Duration heartbeat_period;
  int heartbeat_misses_max = 0;
  const Clock* clock = nullptr;  // nullptr: the real clock
  int metrics_port = -1;         // Prometheus /metrics on listen_host; -1: off, 0: a free port
  // Where the device ids and hosts are kept across restarts; empty: nowhere (a
  // restarted RM then numbers devices afresh, in join order).
  std::string state_file;
  // The fleet the operator expects (Pathways' flags): at most `instance_count` slices
  // (0: any), each of `instance_type` ("GEN:AxB", e.g. cpu:4; empty: any). A worker
  // outside it is refused. Start() fails with INVALID_ARGUMENT on a malformed type.
  int instance_count = 0;
  std::string instance_type;
  // The shared pool (sessions of proxies run with --virtual_slices lease slices):
  // "alice:1,bob:2" orders the queue by slices held per share; empty: first come, first
  // served. Start() fails with INVALID_ARGUMENT on a malformed list.
  std::string tenant_shares;
  // "prod:10,dev:0": a session of a higher priority takes the slices it needs from
  // sessions of lower ones (their clients get UNAVAILABLE with the reason); unlisted: 0.
  std::string tenant_priorities;
  // A lease held this long while another session waits is taken back; zero: never.
  absl::Duration lease_max_hold = absl::ZeroDuration();
};

// Fills unset options with the defaults from common/limits.h.
RmOptions DefaultRmOptions();

class ResourceManagerServer {
 public:
  // Starts serving rm.proto and the health sweeper. UNAVAILABLE if the port is taken;
  // INVALID_ARGUMENT for a state file that is not an RM state.
  static absl::StatusOr<std::unique_ptr<ResourceManagerServer>> Start(const RmOptions& options);
  virtual ~ResourceManagerServer() = default;

  virtual int port() const = 0;
  // host:port, or an in-process address (listen_host "inproc", common/grpc_server.h).
  virtual std::string address() const = 0;
  // Stops serving; in-flight calls finish first. Idempotent.
  virtual void Shutdown() = 0;
};

}  // namespace switchyard::rm
