#include <algorithm>
#include <cstdio>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "common/grpc_server.h"
#include "common/limits.h"
#include "google/protobuf/util/json_util.h"
#include "switchyard/rm.grpc.pb.h"

ABSL_FLAG(bool, json, false, "status: print the fleet as JSON");

namespace switchyard::cli {
namespace {

std::string DeviceIds(const HostStatus& host) {
  std::vector<int64_t> ids;
  for (const DeviceInfo& device : host.devices()) ids.push_back(device.global_id());
  return absl::StrJoin(ids, ",");
}

// "45s", "12m", "3h", "2d".
std::string Age(int64_t ms) {
  const int64_t s = ms / 1000;
  if (s < 120) return absl::StrCat(s, "s");
  if (s < 2 * 3600) return absl::StrCat(s / 60, "m");
  if (s < 2 * 86400) return absl::StrCat(s / 3600, "h");
  return absl::StrCat(s / 86400, "d");
}

// "0", "812M", "3.2G": memory as its heartbeat reported it ("-" before the first).
std::string Memory(int64_t bytes, bool reported) {
  if (!reported) return "-";
  const double mib = static_cast<double>(bytes) / (1 << 20);
  if (mib < 1024) return absl::StrFormat("%.0fM", mib);
  return absl::StrFormat("%.1fG", mib / 1024);
}

void PrintTable(const Fleet& fleet) {
  int hosts = 0, devices = 0, healthy_hosts = 0;
  for (const SliceStatus& slice : fleet.slices()) {
    for (const HostStatus& host : slice.hosts()) {
      ++hosts;
      devices += host.devices_size();
      healthy_hosts += host.healthy();
    }
  }
  std::printf("%d slices, %d hosts (%d healthy), %d devices\n", fleet.slices_size(), hosts,
              healthy_hosts, devices);
  // Unix-socket addresses are long: the column fits the longest.
  int address_width = 22;
  for (const SliceStatus& slice : fleet.slices()) {
    for (const HostStatus& host : slice.hosts()) {
      address_width = std::max(address_width, static_cast<int>(host.address().size()));
    }
  }
  std::printf("%-6s %-5s %-*s %-10s %-8s %-7s %-8s %-14s %-30s %s\n", "SLICE", "HOST",
              address_width, "ADDRESS", "HEALTH", "PID", "RSS", "BUFFERS", "RESTARTS", "PLUGIN",
              "DEVICES");
  for (const SliceStatus& slice : fleet.slices()) {
    for (const HostStatus& host : slice.hosts()) {
      const PluginInfo& plugin = host.plugin();
      std::string plugin_text =
          absl::StrCat(plugin.platform_name(), " PJRT ", plugin.pjrt_api_major(), ".",
                       plugin.pjrt_api_minor(), " StableHLO ", plugin.stablehlo_current_version());
      std::string health = host.healthy()
                               ? "healthy"
                               : absl::StrCat("DOWN ", host.last_heartbeat_age_ms() / 1000, "s");
      // How often, and how lately: a host restarted within a heartbeat never shows DOWN.
      const std::string restarts =
          host.restarts() == 0
              ? "0"
              : absl::StrCat(host.restarts(), " (", Age(host.last_restart_age_ms()), " ago)");
      // A worker's resident memory is never 0 once it has reported.
      const bool reported = host.resident_bytes() > 0;
      std::printf("%-6d %-5d %-*s %-10s %-8lld %-7s %-8s %-14s %-30s %s\n", slice.slice_index(),
                  host.host_index(), address_width, host.address().c_str(), health.c_str(),
                  static_cast<long long>(host.pid()),
                  Memory(host.resident_bytes(), reported).c_str(),
                  Memory(host.buffer_bytes(), reported).c_str(), restarts.c_str(),
                  plugin_text.c_str(), DeviceIds(host).c_str());
    }
  }
}

// Owners and tenants come from the network: no escape sequence reaches the terminal.
std::string Printable(const std::string& text) {
  std::string out = text.substr(0, 80);
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  }
  return out;
}

// The RM itself and the proxies that reported lately (an older RM lists neither): what
// each holds, so that an operator sees where the memory went.
void PrintProcesses(const Fleet& fleet, const std::string& rm_address) {
  if (fleet.rm_pid() == 0 && fleet.proxies_size() == 0) return;
  int address_width = std::max<int>(22, rm_address.size());
  for (const ProxyStatus& proxy : fleet.proxies()) {
    address_width = std::max<int>(address_width, std::min<size_t>(proxy.address().size(), 80));
  }
  std::printf("\n%-17s %-*s %-8s %-7s %-8s %-8s %s\n", "PROCESS", address_width, "ADDRESS", "PID",
              "RSS", "STAGED", "SESSIONS", "REPORTED");
  if (fleet.rm_pid() != 0) {
    std::printf("%-17s %-*s %-8lld %-7s %-8s %-8s %s\n", "resource-manager", address_width,
                rm_address.c_str(), static_cast<long long>(fleet.rm_pid()),
                Memory(fleet.rm_resident_bytes(), fleet.rm_resident_bytes() > 0).c_str(), "-", "-",
                "now");
  }
  for (const ProxyStatus& proxy : fleet.proxies()) {
    std::printf("%-17s %-*s %-8lld %-7s %-8s %-8lld %s\n", "proxy", address_width,
                Printable(proxy.address()).c_str(), static_cast<long long>(proxy.pid()),
                Memory(proxy.resident_bytes(), proxy.resident_bytes() > 0).c_str(),
                Memory(proxy.host_buffer_bytes(), true).c_str(),
                static_cast<long long>(proxy.sessions()),
                absl::StrCat(Age(proxy.last_report_age_ms()), " ago").c_str());
  }
}

std::string Shapes(const LeaseInfo& lease) {
  std::vector<std::string> shapes;
  for (const LeaseShape& shape : lease.slices()) {
    shapes.push_back(
        absl::StrCat(shape.kind().empty() ? "any" : shape.kind(), ":", shape.devices()));
  }
  return absl::StrJoin(shapes, ",");
}

void PrintLeases(const LeaseTable& leases) {
  if (leases.held_size() + leases.queued_size() == 0) return;
  std::printf("\n%d leases held, %d queued\n", leases.held_size(), leases.queued_size());
  std::printf("%-6s %-8s %-12s %-14s %-10s %-8s %s\n", "LEASE", "STATE", "TENANT", "ASKED",
              "SLICES", "AGE", "OWNER");
  auto row = [](const LeaseInfo& lease, const std::string& state) {
    std::printf("%-6llu %-8s %-12s %-14s %-10s %-8s %s\n",
                static_cast<unsigned long long>(lease.lease_id()), state.c_str(),
                Printable(lease.tenant()).c_str(), Printable(Shapes(lease)).c_str(),
                absl::StrJoin(lease.slice_indices(), ",").c_str(),
                absl::StrCat(lease.age_ms() / 1000, "s").c_str(), Printable(lease.owner()).c_str());
  };
  for (const LeaseInfo& lease : leases.held()) row(lease, "held");
  int position = 0;
  for (const LeaseInfo& lease : leases.queued()) row(lease, absl::StrCat("queued#", ++position));
}

std::string Json(const google::protobuf::Message& message) {
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  (void)google::protobuf::util::MessageToJsonString(message, &json, options);
  return json;
}

}  // namespace

int RunStatus() {
  const std::string address = absl::GetFlag(FLAGS_resource_manager_address);
  auto stub = ResourceManager::NewStub(CreateChannel(address));
  const auto deadline =
      std::chrono::system_clock::now() + std::chrono::milliseconds(limits::kStatusCallMs);
  Fleet fleet;
  grpc::Status status;
  // On a loaded host a connection can fail once (a TLS handshake cut short) while the RM
  // is fine: ask again before saying it cannot be reached.
  for (int attempt = 1;; ++attempt) {
    grpc::ClientContext context;
    context.set_deadline(deadline);
    status = stub->GetFleet(&context, GetFleetRequest(), &fleet);
    if (status.error_code() != grpc::StatusCode::UNAVAILABLE ||
        attempt == limits::kStatusAttempts) {
      break;
    }
    absl::SleepFor(absl::Milliseconds(limits::kStatusRetryMs));
  }
  if (!status.ok()) {
    std::fprintf(stderr, "switchyard status: cannot reach the resource manager at %s: %s\n",
                 address.c_str(), status.error_message().c_str());
    return 1;
  }
  // The shared pool's leases; an RM that predates them answers UNIMPLEMENTED.
  LeaseTable leases;
  grpc::ClientContext leases_context;
  leases_context.set_deadline(deadline);
  (void)stub->GetLeases(&leases_context, GetLeasesRequest(), &leases);
  if (absl::GetFlag(FLAGS_json)) {
    // The fleet's fields, and the leases under "leases".
    std::string json = Json(fleet);
    const size_t end = json.rfind('}');
    if (end != std::string::npos) {
      json = absl::StrCat(json.substr(0, end), ",\n \"leases\": ", Json(leases), "}\n");
    }
    std::printf("%s", json.c_str());
  } else {
    PrintTable(fleet);
    PrintProcesses(fleet, address);
    PrintLeases(leases);
  }
  return 0;
}

}  // namespace switchyard::cli
