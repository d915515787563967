#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compile_cache/compile_cache.h"
#include "compile_cache/digest.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "xla/compile_options.pb.h"

namespace switchyard::compile_cache {
namespace {

// Map fields (env_option_overrides) serialize in hash order unless asked not to.
std::string Deterministic(const google::protobuf::MessageLite& message) {
  std::string out;
  google::protobuf::io::StringOutputStream stream(&out);
  google::protobuf::io::CodedOutputStream coded(&stream);
  coded.SetSerializationDeterministic(true);
  message.SerializeToCodedStream(&coded);
  coded.Trim();
  return out;
}

}  // namespace

absl::StatusOr<PluginIdentity> IdentifyPlugin(const std::string& path,
                                              const std::string& description) {
  absl::StatusOr<std::string> file = Sha256FileHex(path);
  if (!file.ok()) return file.status();
  PluginIdentity identity;
  identity.description = description;
  identity.digest = Sha256().UpdatePart(*file).UpdatePart(description).Hex();
  return identity;
}

absl::StatusOr<Key> MakeKey(absl::string_view format, absl::string_view program,
                            absl::string_view compile_options, const PluginIdentity& plugin,
                            absl::string_view program_name) {
  xla::CompileOptionsProto options;
  if (!options.ParseFromArray(compile_options.data(), static_cast<int>(compile_options.size()))) {
    return absl::InvalidArgumentError("compile options that do not parse have no cache key");
  }
  const xla::DeviceAssignmentProto assignment =
      options.executable_build_options().device_assignment();
  options.mutable_executable_build_options()->clear_device_assignment();

  Key key;
  key.program_digest = Sha256().UpdatePart(format).UpdatePart(program).Hex();
  key.options_digest = Sha256Hex(Deterministic(options));
  key.devices_digest = Sha256Hex(Deterministic(assignment));
  key.plugin_digest = plugin.digest;
  key.id = Sha256()
               .UpdatePart(key.program_digest)
               .UpdatePart(key.options_digest)
               .UpdatePart(key.devices_digest)
               .UpdatePart(key.plugin_digest)
               .Hex();
  key.program_name = std::string(program_name);
  key.plugin_description = plugin.description;
  std::vector<std::string> computations;
  for (const auto& computation : assignment.computation_devices()) {
    computations.push_back(absl::StrJoin(computation.replica_device_ids(), ","));
  }
  key.devices_description =
      absl::StrCat(assignment.replica_count(), " replicas x ", assignment.computation_count(),
                   " partitions on plugin devices [", absl::StrJoin(computations, "; "), "]");
  return key;
}

}  // namespace switchyard::compile_cache
