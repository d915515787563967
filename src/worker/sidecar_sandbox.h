#pragma once

// What a colocated Python sidecar sees of its host. A tenant's sidecar runs the tenant's
// code as the worker's user, so it is started in namespaces of its own (user, mount,
// PID, IPC) where:
// - the fleet's secrets are not there: the paths in `hidden` (the TLS key, the
//   directories of the control-plane sockets, the compilation cache) show as empty
//   and unreadable;
// - the file system is read-only but for `writable` and the sidecar's own directory,
//   so a tenant cannot change what the fleet runs next (its binary, plugin, Python,
//   caches) nor what other tenants read;
// - the shared directory of all sidecars shows only its own directory;
// - no process outside is visible (its own /proc), nor can it be signalled or traced;
// - no privilege can be gained (no capabilities, no_new_privs), nor a descriptor of the
//   worker's inherited (every one is closed on exec).
// Namespaces, not another uid: a worker is often not root (a laptop, a Slurm job, a
// container) and cannot switch users, and its Python (with the tenant's jax) is
// usually readable only by its user.
//
// Not covered: the network (a tenant reaches what the host reaches; the control plane's
// TCP ports need the fleet's TLS key, which is hidden), and files the worker's user can
// read outside `hidden` (the sidecar reads them as that user).

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace switchyard::worker {

struct SandboxPolicy {
  // Files or directories whose contents the sidecar must not see. Missing ones are
  // skipped.
  std::vector<std::string> hidden;
  // Directories left writable; the rest of the file system is read-only. Missing ones
  // are skipped.
  std::vector<std::string> writable;
  // The directory of every sidecar's own directory (the shared-memory directory), and
  // this sidecar's, a direct child of it: the only one it shows, writable.
  std::string shared_directory;
  std::string own_directory;
};

struct SandboxedProcess {
  pid_t pid = 0;
  // Whether the sandbox has a /proc of its own; where it cannot (a container that masks
  // parts of /proc), the caller must keep itself from being traced (PR_SET_DUMPABLE).
  bool own_proc = false;
};

// Starts `argv` (argv[0] a path) with `env` in a sandbox per `policy`, its stdin and
// stdout `stdio_fd`, its stderr ours, in `own_directory`. FAILED_PRECONDITION says which
// step of the sandbox failed and why (e.g. user namespaces are not allowed here).
// Returns once the program runs (or fails to); the caller reaps the pid.
absl::StatusOr<SandboxedProcess> SpawnSandboxed(const std::vector<std::string>& argv,
                                                const std::vector<std::string>& env, int stdio_fd,
                                                const SandboxPolicy& policy);

// Whether sandboxes can be made on this host: a trial sandbox (in a fresh temporary
// directory) that exits at once. What it found, or why it failed.
absl::StatusOr<SandboxedProcess> CheckSandbox();

}  // namespace switchyard::worker
