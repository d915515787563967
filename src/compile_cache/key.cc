#include <algorithm>
#include <vector>
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compile_cache/compile_cache.h"
#include "compile_cache/digest.h"

#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/unknown_field_set.h"
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

// XLA's debug options (ExecutableBuildOptionsProto field 3, which we do not model) hold
// map fields that the client serializes in hash order: the same options come in
// different bytes from one compile to the next. Sorted field by field, they compare.
std::string CanonicalDebugOptions(absl::string_view bytes) {
  google::protobuf::UnknownFieldSet fields;
  if (!fields.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return std::string(bytes);
  }
  std::vector<std::string> each;
  for (int i = 0; i < fields.field_count(); ++i) {
    google::protobuf::UnknownFieldSet one;
    one.AddField(fields.field(i));
    std::string bytes;
    one.SerializeToString(&bytes);
    each.push_back(std::move(bytes));
  }
  std::sort(each.begin(), each.end());
  std::string out;
  for (const std::string& field : each) out += field;
  return out;
}

constexpr int kDebugOptionsField = 3;

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
  auto* build = options.mutable_executable_build_options();
  build->clear_device_assignment();
  // The debug options leave the message, canonical, and are hashed beside it.
  google::protobuf::UnknownFieldSet* unknown = build->GetReflection()->MutableUnknownFields(build);
  Sha256 debug;
  for (int i = unknown->field_count() - 1; i >= 0; --i) {
    const google::protobuf::UnknownField& field = unknown->field(i);
    if (field.number() == kDebugOptionsField &&
        field.type() == google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED) {
      debug.UpdatePart(CanonicalDebugOptions(field.length_delimited()));
      unknown->DeleteSubrange(i, 1);
    }
  }

  Key key;
  key.program_digest = Sha256().UpdatePart(format).UpdatePart(program).Hex();
  key.options_digest = Sha256().UpdatePart(Deterministic(options)).UpdatePart(debug.Hex()).Hex();
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
