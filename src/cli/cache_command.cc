// `switchyard cache ls | stats | prune`: the compilation cache under
// --gcs_scratch_location, read and pruned directly (no server involved).

#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "common/limits.h"
#include "common/logging.h"
#include "compile_cache/compile_cache.h"

ABSL_FLAG(int64_t, compilation_cache_max_bytes, switchyard::limits::kCompilationCacheBytesDefault,
          "Size cap of the compilation cache (least recently used entries go first); "
          "`switchyard cache prune` prunes to it. 0: no cap");

namespace switchyard::cli {

absl::StatusOr<std::string> CompilationCacheDirectory() {
  const std::string location = absl::GetFlag(FLAGS_gcs_scratch_location);
  if (location.empty()) return std::string();
  absl::StatusOr<std::string> resolved =
      compile_cache::ResolveLocation(location, absl::GetFlag(FLAGS_storage_mount_root));
  if (!resolved.ok()) return resolved.status();
  return compile_cache::CacheDirectory(*resolved);
}

void WarnIfCacheLocationUnusable() {
  if (absl::StatusOr<std::string> directory = CompilationCacheDirectory(); !directory.ok()) {
    SY_LOG(Warning) << "--gcs_scratch_location: " << directory.status().message()
                    << " (workers given the same flag will not start)";
  }
}

namespace {

std::string Size(int64_t bytes) {
  if (bytes >= (int64_t{1} << 30)) return absl::StrFormat("%.1f GiB", bytes / 1073741824.0);
  if (bytes >= (1 << 20)) return absl::StrFormat("%.1f MiB", bytes / 1048576.0);
  if (bytes >= (1 << 10)) return absl::StrFormat("%.1f KiB", bytes / 1024.0);
  return absl::StrFormat("%d B", bytes);
}

std::string Ago(absl::Time time) {
  const double seconds = absl::ToDoubleSeconds(absl::Now() - time);
  if (seconds < 120) return absl::StrFormat("%.0fs ago", seconds);
  if (seconds < 7200) return absl::StrFormat("%.0fm ago", seconds / 60);
  if (seconds < 172800) return absl::StrFormat("%.0fh ago", seconds / 3600);
  return absl::StrFormat("%.0fd ago", seconds / 86400);
}

}  // namespace

int RunCache(const std::vector<std::string>& args) {
  SetLogProcessName("cache");
  const std::string verb = args.empty() ? "" : args[0];
  if (args.size() != 1 || (verb != "ls" && verb != "stats" && verb != "prune")) {
    std::fprintf(stderr,
                 "usage: switchyard cache ls | stats | prune --gcs_scratch_location=LOCATION "
                 "[--storage_mount_root=DIR] [--compilation_cache_max_bytes=N]\n");
    return 2;
  }
  absl::StatusOr<std::string> directory = CompilationCacheDirectory();
  if (!directory.ok()) {
    SY_LOG(Error) << directory.status().message();
    return 1;
  }
  if (directory->empty()) {
    SY_LOG(Error) << "no --gcs_scratch_location: where is the cache?";
    return 2;
  }
  absl::StatusOr<std::vector<compile_cache::EntryInfo>> entries =
      compile_cache::ListEntries(*directory);
  if (!entries.ok() && verb != "prune") {
    SY_LOG(Error) << entries.status().message();
    return 1;
  }
  if (verb == "ls") {
    std::printf("%-10s %10s %10s  %-24s %s\n", "USED", "SIZE", "COMPILE", "PROGRAM",
                "PLUGIN / DEVICES / KEY");
    for (const compile_cache::EntryInfo& entry : *entries) {
      std::printf("%-10s %10s %9.2fs  %-24s %s / %s / %s\n", Ago(entry.last_used).c_str(),
                  Size(entry.bytes).c_str(), entry.compile_seconds, entry.program_name.c_str(),
                  entry.plugin_description.c_str(), entry.devices_description.c_str(),
                  entry.key.substr(0, 16).c_str());
    }
    return 0;
  }
  if (verb == "stats") {
    int64_t bytes = 0;
    double compile_seconds = 0;
    for (const compile_cache::EntryInfo& entry : *entries) {
      bytes += entry.bytes;
      compile_seconds += entry.compile_seconds;
    }
    std::printf("directory: %s\nentries: %zu\nbytes: %lld (%s)\n", directory->c_str(),
                entries->size(), static_cast<long long>(bytes), Size(bytes).c_str());
    std::printf("compile time stored: %.2fs\n", compile_seconds);
    if (!entries->empty()) {
      std::printf("least recently used: %s\nmost recently used: %s\n",
                  Ago(entries->front().last_used).c_str(), Ago(entries->back().last_used).c_str());
    }
    return 0;
  }
  const int64_t max_bytes = absl::GetFlag(FLAGS_compilation_cache_max_bytes);
  absl::StatusOr<std::vector<compile_cache::EntryInfo>> removed =
      compile_cache::Prune(*directory, max_bytes);
  if (!removed.ok()) {
    SY_LOG(Error) << removed.status().message();
    return 1;
  }
  int64_t freed = 0;
  for (const compile_cache::EntryInfo& entry : *removed) freed += entry.bytes;
  std::printf("removed %zu files (%s) to keep at most %s\n", removed->size(), Size(freed).c_str(),
              Size(max_bytes).c_str());
  return 0;
}

}  // namespace switchyard::cli
