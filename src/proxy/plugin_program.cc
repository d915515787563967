#include "proxy/plugin_program.h"

#include <google/protobuf/util/json_util.h>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/limits.h"
#include "common/status_macros.h"
#include "common/wire_numbers.h"
#include "proxy/sharding.h"
#include "switchyard/plugin_program.pb.h"

namespace switchyard::proxy {
namespace {

namespace pb = ::switchyard::plugin;

constexpr char kPrefix[] = "__serialized_plugin_program ";

absl::Status Bad(absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("Bad PluginProgram: ", why));
}

absl::StatusOr<std::string> Base64(const std::string& text, absl::string_view what) {
  std::string decoded;
  if (!absl::Base64Unescape(text, &decoded)) return Bad(absl::StrCat(what, " is not base64"));
  return decoded;
}

absl::StatusOr<switchyard::xla::OpSharding> DecodeSharding(const std::string& b64) {
  SY_ASSIGN_OR_RETURN(std::string bytes, Base64(b64, "the HLO sharding"));
  switchyard::xla::OpSharding op;
  if (!op.ParseFromString(bytes)) return Bad("the HLO sharding is not a serialized OpSharding");
  absl::StatusOr<switchyard::xla::OpSharding> tiled = ToTileForm(op);
  if (!tiled.ok()) return Bad(tiled.status().message());
  return *tiled;
}

absl::StatusOr<std::vector<int64_t>> Devices(const pb::DeviceList& list) {
  if (list.device_ids().empty()) return Bad("no devices named");
  if (list.device_ids_size() > limits::kDevicesMax) return Bad("too many devices");
  return std::vector<int64_t>(list.device_ids().begin(), list.device_ids().end());
}

absl::Duration Timeout(const pb::Timeout& timeout) {
  if (timeout.seconds() <= 0 && timeout.nanos() <= 0) return absl::InfiniteDuration();
  return absl::Seconds(timeout.seconds()) + absl::Nanoseconds(timeout.nanos());
}

// The name becomes a directory under the location: one component, nothing that
// climbs out of it.
absl::Status CheckName(const std::string& name) {
  if (name.empty() || name == "." || name == ".." || absl::StrContains(name, '/') ||
      absl::StrContains(name, '\0') || name.size() > 255) {
    return Bad(absl::StrCat("array name '", absl::CEscape(name.substr(0, 64)),
                            "' is not a single path component"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int64_t>> Shape(const google::protobuf::RepeatedField<int64_t>& dims) {
  if (dims.size() > limits::kArrayRankMax) return Bad("too many dimensions");
  std::vector<int64_t> shape(dims.begin(), dims.end());
  if (absl::Status checked = CheckedElements(shape, "shape").status(); !checked.ok()) {
    return Bad(checked.message());
  }
  return shape;
}

template <typename Request>
absl::StatusOr<PersistedArray> Common(const Request& request) {
  PersistedArray array;
  SY_ASSIGN_OR_RETURN(array.location, Base64(request.b64_location(), "the location"));
  SY_ASSIGN_OR_RETURN(array.name, Base64(request.b64_name(), "the name"));
  if (array.location.empty()) return Bad("no location");
  SY_RETURN_IF_ERROR(CheckName(array.name));
  SY_ASSIGN_OR_RETURN(array.sharding, DecodeSharding(request.b64_hlo_sharding_string()));
  SY_ASSIGN_OR_RETURN(array.devices, Devices(request.devices()));
  array.timeout = Timeout(request.timeout());
  return array;
}

absl::StatusOr<PersistedArray> Write(const pb::PersistenceWrite& request) {
  SY_ASSIGN_OR_RETURN(PersistedArray array, Common(request));
  SY_ASSIGN_OR_RETURN(array.shape, Shape(request.shape()));
  return array;
}

absl::StatusOr<PersistedArray> Read(const pb::PersistenceRead& request) {
  SY_ASSIGN_OR_RETURN(PersistedArray array, Common(request));
  SY_ASSIGN_OR_RETURN(array.shape, Shape(request.shape().dimensions()));
  const std::string& type = request.shape().xla_primitive_type_str();
  DType dtype;
  if (!DType_Parse(type, &dtype) || dtype == DTYPE_INVALID || dtype == TOKEN) {
    return Bad(absl::StrCat("unknown element type '", absl::CEscape(type.substr(0, 32)), "'"));
  }
  array.dtype = dtype;
  return array;
}

absl::StatusOr<ReshardTarget> Target(const pb::ReshardSharding& sharding) {
  ReshardTarget target;
  SY_ASSIGN_OR_RETURN(target.devices, Devices(sharding.devices()));
  SY_ASSIGN_OR_RETURN(target.sharding, DecodeSharding(sharding.xla_hlo_sharding()));
  target.memory_kind = sharding.memory_kind();
  return target;
}

}  // namespace

absl::StatusOr<PluginRequest> ParsePluginProgram(absl::string_view serialized) {
  absl::string_view json = serialized;
  if (!absl::ConsumePrefix(&json, kPrefix)) {
    return Bad(absl::StrCat("does not begin with '", kPrefix, "'"));
  }
  pb::PluginProgram program;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;
  auto parsed = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(json.data(), json.size()), &program, options);
  if (!parsed.ok()) return Bad(absl::StrCat("not the JSON expected: ", parsed.ToString()));
  const int given =
      program.has_persistence_write_request() + program.has_bulk_persistence_write_request() +
      program.has_persistence_read_request() + program.has_bulk_persistence_read_request() +
      program.has_profile_request() + program.has_reshard_request();
  if (given != 1) {
    return Bad(given == 0 ? "names none of the requests Switchyard serves (persistence write or "
                            "read, profile, reshard)"
                          : "names more than one request");
  }
  if (program.has_persistence_write_request() || program.has_bulk_persistence_write_request()) {
    PersistenceWrite write;
    if (program.has_persistence_write_request()) {
      SY_ASSIGN_OR_RETURN(PersistedArray array, Write(program.persistence_write_request()));
      write.arrays.push_back(std::move(array));
    }
    for (const auto& each : program.bulk_persistence_write_request().write_requests()) {
      SY_ASSIGN_OR_RETURN(PersistedArray array, Write(each));
      write.arrays.push_back(std::move(array));
    }
    if (write.arrays.empty()) return Bad("a write of no arrays");
    return write;
  }
  if (program.has_persistence_read_request() || program.has_bulk_persistence_read_request()) {
    PersistenceRead read;
    if (program.has_persistence_read_request()) {
      SY_ASSIGN_OR_RETURN(PersistedArray array, Read(program.persistence_read_request()));
      read.arrays.push_back(std::move(array));
    }
    for (const auto& each : program.bulk_persistence_read_request().read_requests()) {
      SY_ASSIGN_OR_RETURN(PersistedArray array, Read(each));
      read.arrays.push_back(std::move(array));
    }
    if (read.arrays.empty()) return Bad("a read of no arrays");
    return read;
  }
  if (program.has_profile_request()) {
    const pb::ProfileRequest& request = program.profile_request();
    ProfileRequest profile;
    profile.location = request.trace_location();
    if (request.has_xprof_trace_options()) {
      profile.wants_output = true;
      profile.session_name = request.xprof_trace_options().trace_session_name();
      if (profile.location.empty())
        profile.location = request.xprof_trace_options().trace_directory();
    }
    if (profile.location.empty()) return Bad("a profile request names no trace location");
    if (request.max_duration_secs() > 0 && request.max_duration_secs() < 1e7) {
      profile.max_duration = absl::Seconds(request.max_duration_secs());
    }
    return profile;
  }
  const pb::ReshardRequest& request = program.reshard_request();
  if (request.in_sharding_size() != request.out_sharding_size()) {
    return Bad("a reshard with different numbers of input and output shardings");
  }
  ReshardRequest reshard;
  reshard.donate = request.donate_input();
  for (int i = 0; i < request.in_sharding_size(); ++i) {
    SY_ASSIGN_OR_RETURN(ReshardTarget in, Target(request.in_sharding(i)));
    SY_ASSIGN_OR_RETURN(ReshardTarget out, Target(request.out_sharding(i)));
    reshard.inputs.push_back(std::move(in));
    reshard.outputs.push_back(std::move(out));
  }
  return reshard;
}

std::string PluginRequestName(const PluginRequest& request) {
  struct Name {
    std::string operator()(const PersistenceWrite&) const { return "persistence write"; }
    std::string operator()(const PersistenceRead&) const { return "persistence read"; }
    std::string operator()(const ProfileRequest&) const { return "profile"; }
    std::string operator()(const ReshardRequest&) const { return "reshard"; }
  };
  return std::visit(Name{}, request);
}

}  // namespace switchyard::proxy
