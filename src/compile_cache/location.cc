#include <sys/stat.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "compile_cache/compile_cache.h"

namespace switchyard::compile_cache {
namespace {

bool IsDirectory(const std::string& path) {
  struct stat info;
  return stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
}

}  // namespace

absl::StatusOr<std::string> ResolveLocation(const std::string& location,
                                            const std::string& mount_root) {
  if (location.empty()) return absl::InvalidArgumentError("no storage location given");
  absl::string_view rest = location;
  std::string path;
  std::string how;
  if (absl::ConsumePrefix(&rest, "file://")) {
    path = std::string(rest);
  } else if (absl::StartsWith(location, "gs://") || absl::StartsWith(location, "s3://")) {
    const bool gcs = absl::StartsWith(location, "gs://");
    rest.remove_prefix(5);
    const absl::string_view bucket = rest.substr(0, rest.find('/'));
    if (bucket.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(location, " names no bucket"));
    }
    if (mount_root.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          location, " is a bucket, and Switchyard reads buckets through a mount: mount it (",
          gcs ? "gcsfuse" : "mountpoint-s3",
          ") and pass --storage_mount_root=<the directory holding the bucket's mount>, or "
          "give the mounted directory itself"));
    }
    path = absl::StrCat(absl::StripSuffix(mount_root, "/"), "/", rest);
    how = absl::StrCat(
        " (", location, " under --storage_mount_root=", mount_root, "): mount ",
        gcs ? "the bucket with gcsfuse (gcsfuse " : "the bucket with mountpoint-s3 (",
        gcs ? "" : "mount-s3 ", bucket, " ", absl::StripSuffix(mount_root, "/"), "/", bucket, ")");
  } else if (absl::StrContains(location, "://")) {
    return absl::InvalidArgumentError(absl::StrCat("unknown storage location ", location,
                                                   ": give a directory, file://, gs:// or s3://"));
  } else {
    path = location;
  }
  if (!absl::StartsWith(path, "/")) {
    return absl::InvalidArgumentError(
        absl::StrCat("storage location ", location, " must be an absolute path"));
  }
  if (!IsDirectory(path)) {
    return absl::FailedPreconditionError(
        absl::StrCat("storage location ", path, " is not a directory", how,
                     how.empty() ? ": create it, or mount the shared storage there" : ""));
  }
  return path;
}

std::string CacheDirectory(const std::string& resolved_location) {
  return absl::StrCat(absl::StripSuffix(resolved_location, "/"), "/switchyard/compilation_cache");
}

}  // namespace switchyard::compile_cache
