#pragma once

// Small whole-file reads and writes for state that must survive a restart. A write
// is atomic: a reader (or a process started after a crash) sees the old contents or
// the new, never a mix.

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace switchyard {

// NOT_FOUND if there is no such file; UNAVAILABLE for other I/O errors.
absl::StatusOr<std::string> ReadWholeFile(const std::string& path);

// Reads the whole file into `out`, which must be exactly its size: NOT_FOUND if there is
// no such file; OUT_OF_RANGE, naming both sizes, if its size differs; UNAVAILABLE for
// other I/O errors. For large files: no copy, no reallocation.
absl::Status ReadFileInto(const std::string& path, absl::Span<char> out);

// Creates `dir` and its missing parents (mode 0755). UNAVAILABLE with the reason.
absl::Status MakeDirectories(const std::string& dir);

// Writes `contents` gzip-compressed, atomically as WriteFileAtomically.
absl::Status WriteGzipFile(const std::string& path, absl::string_view contents);

// Writes a temporary file beside `path` (named for this host, process and call, so
// that concurrent writers never share one), syncs it and renames it over `path`: the
// last rename wins. UNAVAILABLE with the reason on failure (the old contents stay).
absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents);

}  // namespace switchyard
