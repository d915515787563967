#include "common/wire_record.h"

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "common/files.h"

namespace switchyard {

namespace {

const char* Directory() {
  static const char* const directory = std::getenv("SWITCHYARD_RECORD_WIRE");
  return directory != nullptr && directory[0] != '\0' ? directory : nullptr;
}

}  // namespace

void RecordWire(absl::string_view kind, const google::protobuf::MessageLite& message) {
  if (Directory() != nullptr) RecordWireBytes(kind, message.SerializeAsString());
}

void RecordWireBytes(absl::string_view kind, absl::string_view bytes) {
  if (Directory() == nullptr) return;
  const std::string folder = absl::StrCat(Directory(), "/", kind);
  std::error_code ignored;
  std::filesystem::create_directories(folder, ignored);
  // A recording aid: a failed write loses one sample, nothing else.
  (void)WriteFileAtomically(
      absl::StrCat(
          folder, "/",
          absl::Hex(std::hash<std::string_view>()(std::string_view(bytes.data(), bytes.size())),
                    absl::kZeroPad16)),
      bytes);
}

}  // namespace switchyard
