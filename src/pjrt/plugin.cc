#include "pjrt/plugin.h"

#include <dlfcn.h>
#include <sys/stat.h>

#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"
#include "pjrt/c_api.h"
#include "pjrt/client.h"

namespace switchyard::pjrt {
namespace {

std::string NamedValueText(const PJRT_NamedValue& value) {
  switch (value.type) {
    case PJRT_NamedValue_kString:
      return std::string(value.string_value, value.value_size);
    case PJRT_NamedValue_kInt64:
      return absl::StrCat(value.int64_value);
    case PJRT_NamedValue_kInt64List:
      return absl::StrJoin(value.int64_array_value, value.int64_array_value + value.value_size,
                           ".");
    case PJRT_NamedValue_kFloat:
      return absl::StrCat(value.float_value);
    case PJRT_NamedValue_kBool:
      return value.bool_value ? "true" : "false";
  }
  return "?";
}

}  // namespace

namespace {

absl::Mutex loaded_mutex(absl::kConstInit);

// Plugins by path, for the life of the process.
std::map<std::string, Plugin*>& Loaded() ABSL_EXCLUSIVE_LOCKS_REQUIRED(loaded_mutex) {
  static auto* loaded = new std::map<std::string, Plugin*>();
  return *loaded;
}

}  // namespace

absl::StatusOr<Plugin*> Plugin::Load(const std::string& path) {
  {
    absl::MutexLock lock(&loaded_mutex);
    if (auto it = Loaded().find(path); it != Loaded().end()) return it->second;
  }
  struct stat st;
  if (path.empty() || stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat("PJRT plugin '", path, "' does not exist"));
  }
  // RTLD_LOCAL keeps the plugin's bundled LLVM/absl/protobuf symbols to itself.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", path, "' is not a loadable shared library: ", dlerror()));
  }
  using GetPjrtApiFn = const PJRT_Api* (*)();
  auto get_api = reinterpret_cast<GetPjrtApiFn>(dlsym(handle, "GetPjrtApi"));
  if (get_api == nullptr) {
    dlclose(handle);
    return absl::InvalidArgumentError(
        absl::StrCat("'", path, "' is not a PJRT plugin: it has no GetPjrtApi symbol"));
  }
  return Adopt(path, get_api());
}

absl::StatusOr<Plugin*> Plugin::Adopt(const std::string& path, const PJRT_Api* api) {
  absl::MutexLock lock(&loaded_mutex);
  if (auto it = Loaded().find(path); it != Loaded().end()) return it->second;
  if (api == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("GetPjrtApi of '", path, "' returned null"));
  }
  if (api->pjrt_api_version.major_version != PJRT_API_MAJOR) {
    return absl::FailedPreconditionError(absl::StrCat(
        "PJRT plugin '", path, "' has API version ", api->pjrt_api_version.major_version, ".",
        api->pjrt_api_version.minor_version, "; Switchyard speaks major version ", PJRT_API_MAJOR));
  }
  auto plugin = std::unique_ptr<Plugin>(new Plugin(path, api));
  Args<PJRT_Plugin_Initialize_Args> init;
  absl::Status status = SY_PJRT_CALL(api, Plugin_Initialize, init.get());
  if (!status.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("PJRT plugin '", path, "' failed to initialize: ", status.ToString()));
  }
  SY_RETURN_IF_ERROR(plugin->ReadInfo());
  Plugin* raw = plugin.release();  // lives as long as the process, like the library
  Loaded()[path] = raw;
  return raw;
}

absl::Status Plugin::ReadInfo() {
  info_.api_major = api_->pjrt_api_version.major_version;
  info_.api_minor = api_->pjrt_api_version.minor_version;
  info_.api_struct_size = api_->struct_size;
  Args<PJRT_Plugin_Attributes_Args> args;
  absl::Status status = SY_PJRT_CALL(api_, Plugin_Attributes, args.get());
  if (absl::IsUnimplemented(status)) return absl::OkStatus();
  SY_RETURN_IF_ERROR(status);
  for (size_t i = 0; i < args->num_attributes; ++i) {
    const PJRT_NamedValue& value = args->attributes[i];
    std::string name(value.name, value.name_size);
    std::string text = NamedValueText(value);
    if (name == "xla_version" && value.type == PJRT_NamedValue_kInt64) {
      info_.xla_version = value.int64_value;
    } else if (name == "stablehlo_current_version") {
      info_.stablehlo_current_version = text;
    } else if (name == "stablehlo_minimum_version") {
      info_.stablehlo_minimum_version = text;
    }
    info_.attributes.emplace_back(std::move(name), std::move(text));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Client>> Plugin::CreateClient(
    const std::vector<ClientOption>& options, KeyValueStore* kv_store) const {
  return Client::Create(this, options, kv_store);
}

}  // namespace switchyard::pjrt
