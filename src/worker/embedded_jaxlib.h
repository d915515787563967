#pragma once

// jaxlib inside a worker: an embedded interpreter of a Python that has jaxlib, for what
// JAX does in-process that a bare PJRT plugin cannot.
//
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
#include <utility>
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

// An optimized program as JAX shows it on its CPU backend, for plugins whose C API
// lacks it: its HLO text (`compiled.as_text()`) and XLA's cost analysis of it
// (`compiled.cost_analysis()`), from a serialized HloModuleProto. Runs in the
// interpreter RegisterJaxKernels started (FAILED_PRECONDITION without one); the first
// call makes a CPU client there for the cost model.
struct ProgramReport {
  std::string text;
  std::vector<std::pair<std::string, double>> costs;
};
absl::StatusOr<ProgramReport> DescribeProgram(const std::string& hlo_module_proto);

}  // namespace switchyard::worker
