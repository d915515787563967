#pragma once

// Flags shared by several subcommands (names follow Pathways on Cloud).

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

#include "absl/flags/declare.h"

ABSL_DECLARE_FLAG(int, server_port);
ABSL_DECLARE_FLAG(std::string, listen_host);
ABSL_DECLARE_FLAG(std::string, unix_socket);
ABSL_DECLARE_FLAG(std::string, resource_manager_address);
ABSL_DECLARE_FLAG(std::string, pjrt_plugin);
ABSL_DECLARE_FLAG(std::string, python);
ABSL_DECLARE_FLAG(std::string, sidecar_shm_directory);
ABSL_DECLARE_FLAG(bool, sidecar_sandbox);
ABSL_DECLARE_FLAG(std::string, advertise_host);
ABSL_DECLARE_FLAG(bool, bulk_transfers);
ABSL_DECLARE_FLAG(int32_t, bulk_port);
ABSL_DECLARE_FLAG(std::vector<std::string>, sidecar_writable_paths);
ABSL_DECLARE_FLAG(int, metrics_port);
ABSL_DECLARE_FLAG(std::string, gcs_scratch_location);
ABSL_DECLARE_FLAG(std::string, storage_mount_root);
ABSL_DECLARE_FLAG(int64_t, compilation_cache_max_bytes);
ABSL_DECLARE_FLAG(std::string, tls_ca_file);
ABSL_DECLARE_FLAG(std::string, tls_cert_file);
ABSL_DECLARE_FLAG(std::string, tls_key_file);

namespace switchyard::cli {

// The compilation cache's directory from --gcs_scratch_location (empty: none), or why
// the location cannot be used (logged by the caller, which then exits).
absl::StatusOr<std::string> CompilationCacheDirectory();
// For the rm and proxy, which take the flag but do not read the cache: a location the
// workers could not use either is worth a warning at start.
void WarnIfCacheLocationUnusable();

}  // namespace switchyard::cli
