#pragma once

// Small whole-file reads and writes for state that must survive a restart. A write
// is atomic: a reader (or a process started after a crash) sees the old contents or
// the new, never a mix.

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace switchyard {

// NOT_FOUND if there is no such file; UNAVAILABLE for other I/O errors.
absl::StatusOr<std::string> ReadWholeFile(const std::string& path);

// Writes a temporary file beside `path` (named for this host, process and call, so
// that concurrent writers never share one), syncs it and renames it over `path`: the
// last rename wins. UNAVAILABLE with the reason on failure (the old contents stay).
absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents);

}  // namespace switchyard
