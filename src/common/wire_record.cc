#include "common/wire_record.h"

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/files.h"

namespace switchyard {

void RecordWire(absl::string_view kind, const google::protobuf::MessageLite& message) {
  static const char* const directory = std::getenv("SWITCHYARD_RECORD_WIRE");
  if (directory == nullptr || directory[0] == '\0') return;
  const std::string bytes = message.SerializeAsString();
  const std::string folder = absl::StrCat(directory, "/", kind);
  std::error_code ignored;
  std::filesystem::create_directories(folder, ignored);
  // A recording aid: a failed write loses one sample, nothing else.
  (void)WriteFileAtomically(
      absl::StrCat(folder, "/", absl::Hex(std::hash<std::string>()(bytes), absl::kZeroPad16)), bytes);
}

}  // namespace switchyard
