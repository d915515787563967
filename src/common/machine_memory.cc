#include "common/machine_memory.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/files.h"

namespace switchyard {
namespace {

// Past this a "limit" is a placeholder for none (v1 writes 2^63 rounded to pages).
constexpr int64_t kNoLimitAbove = int64_t{1} << 60;

std::optional<int64_t> Lower(std::optional<int64_t> a, std::optional<int64_t> b) {
  if (!a.has_value()) return b;
  if (!b.has_value()) return a;
  return std::min(*a, *b);
}

// The lowest limit in `file` of `mount`/`path` and each directory above it, up to `mount`.
std::optional<int64_t> LowestOnTheWayUp(
    const std::string& mount, absl::string_view path, const char* file,
    const std::function<std::optional<std::string>(const std::string&)>& read) {
  std::vector<std::string> parts;
  for (absl::string_view part : absl::StrSplit(path, '/', absl::SkipEmpty())) {
    if (part == "." || part == "..") return std::nullopt;  // not what the kernel writes
    parts.emplace_back(part);
  }
  std::optional<int64_t> lowest;
  while (true) {
    const std::string dir =
        parts.empty() ? mount : absl::StrCat(mount, "/", absl::StrJoin(parts, "/"));
    std::optional<std::string> text = read(absl::StrCat(dir, "/", file));
    if (text.has_value()) lowest = Lower(lowest, ParseCgroupMemoryLimit(*text));
    if (parts.empty()) return lowest;
    parts.pop_back();
  }
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

std::optional<int64_t> CgroupMemoryLimit(
    absl::string_view proc_self_cgroup,
    const std::function<std::optional<std::string>(const std::string& path)>& read) {
  // Lines "ID:CONTROLLERS:PATH": v2's is "0::PATH"; v1's memory controller names it.
  std::optional<std::string> v2, v1;
  for (absl::string_view line : absl::StrSplit(proc_self_cgroup, '\n', absl::SkipEmpty())) {
    std::vector<absl::string_view> fields = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (fields.size() != 3) continue;
    if (fields[0] == "0" && fields[1].empty()) v2 = std::string(fields[2]);
    for (absl::string_view controller : absl::StrSplit(fields[1], ',')) {
      if (controller == "memory") v1 = std::string(fields[2]);
    }
  }
  // Without /proc/self/cgroup (or a line for memory), the root's files: a container's
  // own namespace shows its cgroup there.
  std::optional<int64_t> limit =
      LowestOnTheWayUp("/sys/fs/cgroup", v2.value_or("/"), "memory.max", read);
  return Lower(limit, LowestOnTheWayUp("/sys/fs/cgroup/memory", v1.value_or("/"),
                                       "memory.limit_in_bytes", read));
}

int64_t MemoryLimitBytes() {
  const int64_t physical = PhysicalMemoryBytes();
  absl::StatusOr<std::string> own = ReadWholeFile("/proc/self/cgroup");
  const std::optional<int64_t> cgroup = CgroupMemoryLimit(
      own.ok() ? *own : "", [](const std::string& path) -> std::optional<std::string> {
        absl::StatusOr<std::string> text = ReadWholeFile(path);
        if (!text.ok()) return std::nullopt;
        return *std::move(text);
      });
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
