#include "rm/rm.h"

#include "absl/strings/str_cat.h"
#include "common/grpc_server.h"
#include "common/limits.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "common/status_macros.h"
#include "rm/dashboard.h"
#include "rm/rm_service.h"

namespace switchyard::rm {
namespace {

class ResourceManagerImpl final : public ResourceManagerServer {
 public:
  ResourceManagerImpl(std::unique_ptr<RealClock> own_clock, std::unique_ptr<RmService> service,
                      StartedServer server)
      : own_clock_(std::move(own_clock)),
        service_(std::move(service)),
        server_(std::move(server)) {}

  absl::Status StartMetrics(const std::string& host, int port) {
    std::vector<HttpPage> pages = {
        {"/", "text/html; charset=utf-8", [] { return DashboardHtml(); }},
        {"/api/status", "application/json", [this] { return service_->RenderStatusJson(); }}};
    SY_ASSIGN_OR_RETURN(
        metrics_, MetricsServer::StartIfEnabled(
                      host, port, [this] { return service_->RenderMetrics(); }, std::move(pages)));
    if (metrics_ != nullptr) {
      SY_LOG(Info) << "dashboard on http://" << host << ":" << metrics_->port() << "/";
    }
    return absl::OkStatus();
  }
  ~ResourceManagerImpl() override { Shutdown(); }

  int port() const override { return server_.port; }
  std::string address() const override { return server_.address; }

  void Shutdown() override {
    if (server_.server == nullptr) return;
    service_->Stop();  // ends the fleet watches, which would hold up the shutdown
    server_.Shutdown(std::chrono::system_clock::time_point::max());
    server_.server->Wait();
    server_.server.reset();
    metrics_.reset();
  }

 private:
  std::unique_ptr<RealClock> own_clock_;
  std::unique_ptr<RmService> service_;
  StartedServer server_;
  std::unique_ptr<MetricsServer> metrics_;
};

}  // namespace

RmOptions DefaultRmOptions() {
  RmOptions options;
  options.heartbeat_period = absl::Milliseconds(limits::kHeartbeatPeriodMs);
  options.heartbeat_misses_max = limits::kHeartbeatMissesMax;
  return options;
}

absl::StatusOr<std::unique_ptr<ResourceManagerServer>> ResourceManagerServer::Start(
    const RmOptions& options) {
  std::unique_ptr<RealClock> own_clock;
  const Clock* clock = options.clock;
  if (clock == nullptr) {
    own_clock = std::make_unique<RealClock>();
    clock = own_clock.get();
  }
  RmOptions defaults = DefaultRmOptions();
  absl::Duration period = options.heartbeat_period > absl::ZeroDuration()
                              ? options.heartbeat_period
                              : defaults.heartbeat_period;
  int misses = options.heartbeat_misses_max > 0 ? options.heartbeat_misses_max
                                                : defaults.heartbeat_misses_max;
  MembershipOptions membership;
  membership.heartbeat_timeout = period * misses;
  membership.forget_after = absl::Milliseconds(limits::kHostForgetAfterMs);
  membership.rejoin_grace = absl::Milliseconds(limits::kRejoinGraceMs);
  // The sweeper looks every half period; a gap of half the timeout is the RM's own stall.
  membership.stall_after = membership.heartbeat_timeout / 2;
  membership.confirm_window = period * limits::kHeartbeatConfirmPeriods;
  if (options.instance_count < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--instance_count must not be negative (", options.instance_count, ")"));
  }
  membership.expected.slices = options.instance_count;
  SY_RETURN_IF_ERROR(ParseInstanceType(options.instance_type, &membership.expected));
  LeaseOptions leases;
  SY_ASSIGN_OR_RETURN(leases.tenant_shares, ParseTenantShares(options.tenant_shares));
  SY_ASSIGN_OR_RETURN(leases.tenant_priorities, ParseTenantPriorities(options.tenant_priorities));
  leases.max_hold = options.lease_max_hold;
  auto service =
      std::make_unique<RmService>(clock, period, membership, std::move(leases), options.state_file);
  SY_RETURN_IF_ERROR(service->Start());
  SY_ASSIGN_OR_RETURN(StartedServer server,
                      StartGrpcServer(ServeHost(options.listen_host, options.unix_socket),
                                      options.port, {service.get()}));
  SY_LOG(Info) << "resource manager listening on " << server.address;
  auto rm = std::make_unique<ResourceManagerImpl>(std::move(own_clock), std::move(service),
                                                  std::move(server));
  SY_RETURN_IF_ERROR(rm->StartMetrics(options.listen_host, options.metrics_port));
  return rm;
}

}  // namespace switchyard::rm
