#pragma once

// Loading a PJRT plugin (`dlopen` + `GetPjrtApi`) and reading what it says about
// itself. A plugin is loaded once per process and never unloaded: plugins keep
// static state for the life of the process.

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"

struct PJRT_Api;

namespace switchyard::pjrt {

class Client;
class KeyValueStore;

struct PluginInfo {
  std::string path;
  int api_major = 0;
  int api_minor = 0;
  size_t api_struct_size = 0;
  int64_t xla_version = 0;
  std::string stablehlo_current_version;  // "1.20.0", empty if the plugin does not say
  std::string stablehlo_minimum_version;
  // Every plugin attribute, rendered as text, for diagnostics.
  std::vector<std::pair<std::string, std::string>> attributes;
};

// A named option for `PJRT_Client_Create`. Types must match what the plugin expects.
struct ClientOption {
  std::string name;
  std::variant<int64_t, std::string, bool, float, std::vector<int64_t>> value;
};

// What `Plugin::LoadSimulated` is known by (PluginInfo::path).
inline constexpr char kSimulatedPluginPath[] = "(simulated)";

class Plugin {
 public:
  // Loads the plugin at `path`, or returns the one already loaded from it.
  // NOT_FOUND: no such file. INVALID_ARGUMENT: not a shared library, or no
  // `GetPjrtApi`. FAILED_PRECONDITION: a PJRT major version we do not speak, or
  // the plugin's initialization failed.
  static absl::StatusOr<Plugin*> Load(const std::string& path);
  // A plugin with no device behind it, built into Switchyard, for simulated hosts
  // (simulated_plugin.cc): CPU-like devices (client option "cpu_device_count") whose
  // launches take "launch_micros" and compute zeros; it compiles only the metadata of a
  // real compile (common/simulated_program.h). Its attributes say
  // switchyard_simulated=true.
  static absl::StatusOr<Plugin*> LoadSimulated();

  const PluginInfo& info() const { return info_; }
  const PJRT_Api* api() const { return api_; }

  // Creates a client (one per process is the norm). `options` e.g.
  // {"cpu_device_count", int64_t{4}}.
  absl::StatusOr<std::unique_ptr<Client>> CreateClient(const std::vector<ClientOption>& options,
                                                       KeyValueStore* kv_store = nullptr) const;

 private:
  Plugin(std::string path, const PJRT_Api* api) : api_(api) { info_.path = std::move(path); }
  // Initializes the plugin behind `api` and keeps it as the one loaded from `path`.
  static absl::StatusOr<Plugin*> Adopt(const std::string& path, const PJRT_Api* api);
  absl::Status ReadInfo();

  const PJRT_Api* api_;
  PluginInfo info_;
};

}  // namespace switchyard::pjrt
