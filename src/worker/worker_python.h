#pragma once

// The Python a worker uses for jaxlib's custom-call kernels (jnp.linalg's LAPACK) and
// for colocated Python sidecars. Workers have them without being told: with no
// --python, the first candidate that has jaxlib is taken, and the worker says at
// start-up which one it took, or that both features are off and how to turn them on.

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace switchyard::worker {

// `--python=none` turns both features off without a search.
inline constexpr char kNoPython[] = "none";

struct PythonCandidate {
  std::string path;
  std::string source;  // where it came from, for the start-up line: "--python", "PATH", ...
};

// What a probe found in one Python: whether it runs, and which of the modules the
// features need it has.
struct PythonModules {
  bool jaxlib = false;
  bool jax = false;
  bool cloudpickle = false;
  bool switchyard = false;
};

struct WorkerPython {
  std::string path;    // empty: none (kernels and colocated Python are off)
  std::string source;  // PythonCandidate::source of the chosen one
  // Why colocated Python is off with `path` (a module it lacks); empty: on.
  std::string colocated_off;
  // The start-up line: which Python, or why none and what to do.
  std::string summary;
};

// Where to look, in order: `flag` (--python) alone if set; then `env`
// ($SWITCHYARD_WORKER_PYTHON), python3 next to `binary_dir` (a venv or prefix the binary
// was installed into), `build_python` (the venv the binary was built with), and python3
// on PATH. Empty entries and repeats are left out.
std::vector<PythonCandidate> WorkerPythonCandidates(const std::string& flag, const std::string& env,
                                                    const std::string& binary_dir,
                                                    const std::string& build_python);

// The first candidate whose probe finds jaxlib. A candidate named by --python or the
// environment that fails is not passed over silently: the summary says what was wrong
// with it. Pure: `probe` is the only contact with the system.
using PythonProbe = std::function<absl::StatusOr<PythonModules>(const std::string& python)>;
WorkerPython ChooseWorkerPython(const std::vector<PythonCandidate>& candidates,
                                const PythonProbe& probe);

// Runs `python` (bounded by `timeout`) to see which modules it has, without importing
// them. NOT_FOUND when it is not an executable; UNAVAILABLE when it does not run.
absl::StatusOr<PythonModules> ProbePython(const std::string& python, absl::Duration timeout);

// The whole search for this process: candidates from the flag, the environment, this
// binary's directory and the build's venv, probed with ProbePython.
WorkerPython FindWorkerPython(const std::string& flag);

}  // namespace switchyard::worker
