#include "common/machine_memory.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "common/files.h"

namespace switchyard {
namespace {

// Past this a "limit" is a placeholder for none (v1 writes 2^63 rounded to pages).
constexpr int64_t kNoLimitAbove = int64_t{1} << 60;

std::optional<int64_t> CgroupLimit() {
  for (const char* path :
       {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    absl::StatusOr<std::string> text = ReadWholeFile(path);
    if (text.ok()) return ParseCgroupMemoryLimit(*text);
  }
  return std::nullopt;
}

}  // namespace

int64_t PhysicalMemoryBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? int64_t{pages} * int64_t{page} : 0;
}

int64_t ResidentBytes() {
  long pages_total = 0, pages_resident = 0;
  FILE* statm = std::fopen("/proc/self/statm", "r");
  if (statm == nullptr) return 0;
  const int read = std::fscanf(statm, "%ld %ld", &pages_total, &pages_resident);
  std::fclose(statm);
  return read == 2 ? pages_resident * sysconf(_SC_PAGESIZE) : 0;
}

int64_t MemoryLimitBytes() {
  const int64_t physical = PhysicalMemoryBytes();
  const std::optional<int64_t> cgroup = CgroupLimit();
  if (!cgroup.has_value()) return physical;
  return physical > 0 ? std::min(physical, *cgroup) : *cgroup;
}

std::optional<int64_t> ParseCgroupMemoryLimit(absl::string_view text) {
  int64_t bytes = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(text), &bytes)) return std::nullopt;
  if (bytes <= 0 || bytes > kNoLimitAbove) return std::nullopt;
  return bytes;
}

}  // namespace switchyard
