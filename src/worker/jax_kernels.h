#pragma once

// jaxlib's own custom-call kernels (LAPACK on CPU; cuSOLVER, cuBLAS, ... on GPU) in
// this process's plugin. JAX lowers linear algebra to calls like `lapack_sgetrf_ffi`,
// and a JAX process registers their handlers from jaxlib at start. A worker has no
// JAX, so it embeds the interpreter of a Python that has jaxlib, asks jaxlib's modules
// for their handler pointers (as JAX does) and registers them through the plugin's
// FFI extension. Why jaxlib's kernels and not our own: they are what JAX's lowering
// targets, and JAX keeps them accepting calls lowered by older releases (its export
// compatibility promise), so a worker with the newest jaxlib serves every client.
// The interpreter stays for the life of the process: the kernels call the LAPACK that
// scipy loaded into it.

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "pjrt/pjrt.h"

namespace switchyard::worker {

struct JaxKernels {
  std::string jaxlib_version;
  std::vector<std::string> targets;  // registered
  std::vector<std::string> skipped;  // "what: why", e.g. a module this jaxlib lacks
};

// Registers the kernels for `platform` (the plugin's, e.g. "cpu", "cuda") from the
// jaxlib of the Python executable `python`. Registrations are process-wide: a second
// call returns the first one's answer. NOT_FOUND: no such Python, or one without a shared
// libpython; FAILED_PRECONDITION: no jaxlib there.
absl::StatusOr<JaxKernels> RegisterJaxKernels(const pjrt::Ffi& ffi, const std::string& python,
                                              const std::string& platform);

}  // namespace switchyard::worker
