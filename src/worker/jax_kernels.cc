#include "worker/jax_kernels.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <string_view>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace switchyard::worker {
namespace {

// Asks `python` where its shared libpython, home and module path are: one per line,
// libpython, base_prefix, base_exec_prefix, then sys.path. No single quotes (the
// script travels in them).
constexpr std::string_view kInfoScript =
    "import os, sys, sysconfig\n"
    "v = sysconfig.get_config_var\n"
    "print(os.path.join(v(\"LIBDIR\") or \"\", v(\"INSTSONAME\") or v(\"LDLIBRARY\") or \"\"))\n"
    "print(sys.base_prefix)\n"
    "print(sys.base_exec_prefix)\n"
    "print(\"\\n\".join(p for p in sys.path if p))\n";

// Runs in the embedded interpreter; writes "kernel\t<target>\t<platform>\t<api>\t<ptr>",
// "version\t<v>" and "skip\t<what>\t<why>" lines to fd `_sy_fd`. The module list is
// JAX's own (jax/_src/lax/linalg.py, jax/_src/random/prng.py, jax/_src/lax/sparse).
constexpr std::string_view kKernelScript = R"py(
def _sy_kernels(fd, platform):
    import ctypes, importlib, os
    lines = []
    def emit(*fields):
        lines.append("\t".join(str(f).replace("\t", " ").replace("\n", " ") for f in fields))
    try:
        import jaxlib.version
        emit("version", jaxlib.version.__version__)
    except Exception as e:
        emit("error", "this Python has no jaxlib (%r)" % (e,))
        os.write(fd, ("\n".join(lines) + "\n").encode())
        return
    name_of = ctypes.pythonapi.PyCapsule_GetName
    name_of.restype = ctypes.c_char_p
    name_of.argtypes = [ctypes.py_object]
    pointer_of = ctypes.pythonapi.PyCapsule_GetPointer
    pointer_of.restype = ctypes.c_void_p
    pointer_of.argtypes = [ctypes.py_object, ctypes.c_char_p]
    if platform == "cpu":
        modules = ["jaxlib.lapack", "jaxlib.cpu_sparse"]
    else:
        modules = ["jaxlib.gpu_solver", "jaxlib.gpu_linalg", "jaxlib.gpu_prng", "jaxlib.gpu_sparse"]
    for module_name in modules:
        try:
            module = importlib.import_module(module_name)
            if module_name == "jaxlib.lapack":
                module._lapack.initialize()
            registrations = module.registrations()
        except Exception as e:
            emit("skip", module_name, repr(e))
            continue
        for target_platform, targets in registrations.items():
            if target_platform.lower() != platform:
                continue
            for target, fn, api_version in targets:
                if isinstance(fn, dict):
                    if set(fn) != {"execute"}:
                        emit("skip", target, "needs FFI stages " + ",".join(sorted(fn)))
                        continue
                    fn = fn["execute"]
                emit("kernel", target, target_platform, int(api_version),
                     pointer_of(fn, name_of(fn)))
    os.write(fd, ("\n".join(lines) + "\n").encode())
)py";

struct PythonInfo {
  std::string libpython;
  std::string home;  // PYTHONHOME: prefix:exec_prefix
  std::vector<std::string> path;
};

std::string PythonLiteral(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out + "\"";
}

absl::StatusOr<PythonInfo> AskPython(const std::string& python) {
  if (python.find('\'') != std::string::npos) {
    return absl::InvalidArgumentError("a Python path must not contain a single quote");
  }
  if (access(python.c_str(), X_OK) != 0) {
    return absl::NotFoundError(absl::StrCat("no Python executable at '", python, "'"));
  }
  std::string command =
      absl::StrCat("'", python, "' -c '", std::string(kInfoScript), "' 2>&1 </dev/null");
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return absl::InternalError("could not run " + python);
  std::string output;
  char chunk[4096];
  size_t n;
  while ((n = fread(chunk, 1, sizeof(chunk), pipe)) > 0) output.append(chunk, n);
  int rc = pclose(pipe);
  if (rc != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("'", python, "' failed to describe itself: ", output));
  }
  std::vector<std::string> lines = absl::StrSplit(output, '\n', absl::SkipEmpty());
  if (lines.size() < 3) {
    return absl::FailedPreconditionError(
        absl::StrCat("unexpected answer from '", python, "': ", output));
  }
  PythonInfo info;
  info.libpython = lines[0];
  info.home = lines[1] == lines[2] ? lines[1] : absl::StrCat(lines[1], ":", lines[2]);
  info.path.assign(lines.begin() + 3, lines.end());
  if (access(info.libpython.c_str(), R_OK) != 0) {
    return absl::NotFoundError(
        absl::StrCat("'", python, "' has no shared libpython ('", info.libpython,
                     "' is missing): a Python built with --enable-shared is needed to embed it"));
  }
  return info;
}

// Starts the interpreter from `info` and runs `code` in it; returns what the code
// wrote to the file descriptor it finds in `_sy_fd`.
absl::StatusOr<std::string> RunEmbedded(const PythonInfo& info, const std::string& code) {
  void* lib = dlopen(info.libpython.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (lib == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot load '", info.libpython, "': ", dlerror()));
  }
  using InitializeFn = void (*)(int);
  using RunFn = int (*)(const char*);
  using SaveThreadFn = void* (*)();
  auto initialize = reinterpret_cast<InitializeFn>(dlsym(lib, "Py_InitializeEx"));
  auto run = reinterpret_cast<RunFn>(dlsym(lib, "PyRun_SimpleString"));
  auto save_thread = reinterpret_cast<SaveThreadFn>(dlsym(lib, "PyEval_SaveThread"));
  if (initialize == nullptr || run == nullptr || save_thread == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("'", info.libpython, "' lacks the embedding API"));
  }
  // The interpreter reads its home from the environment; children must not inherit it.
  const char* old_home = getenv("PYTHONHOME");
  std::string saved = old_home == nullptr ? "" : old_home;
  setenv("PYTHONHOME", info.home.c_str(), 1);
  initialize(0);  // 0: leave signal handling to us
  if (old_home == nullptr) {
    unsetenv("PYTHONHOME");
  } else {
    setenv("PYTHONHOME", saved.c_str(), 1);
  }

  FILE* out = tmpfile();
  if (out == nullptr) return absl::InternalError("tmpfile failed");
  std::vector<std::string> path;
  for (const std::string& entry : info.path) path.push_back(PythonLiteral(entry));
  std::string script = absl::StrCat("import sys\nsys.path[:] = [", absl::StrJoin(path, ", "),
                                    "]\n_sy_fd = ", fileno(out), "\n", code);
  int rc = run(script.c_str());
  save_thread();  // the kernels need no GIL; nothing else runs Python here
  std::string output;
  rewind(out);
  char chunk[4096];
  size_t n;
  while ((n = fread(chunk, 1, sizeof(chunk), out)) > 0) output.append(chunk, n);
  fclose(out);
  if (rc != 0) {
    return absl::InternalError("the embedded Python raised (its traceback is on stderr)");
  }
  return output;
}

absl::StatusOr<JaxKernels> Register(const pjrt::Ffi& ffi, const std::string& python,
                                    const std::string& platform) {
  SY_ASSIGN_OR_RETURN(PythonInfo info, AskPython(python));
  SY_ASSIGN_OR_RETURN(
      std::string output,
      RunEmbedded(info, absl::StrCat(std::string(kKernelScript), "\n_sy_kernels(_sy_fd, ",
                                     PythonLiteral(platform), ")\n")));
  JaxKernels kernels;
  for (absl::string_view line : absl::StrSplit(output, '\n', absl::SkipEmpty())) {
    std::vector<std::string> fields = absl::StrSplit(line, '\t');
    if (fields[0] == "error") {
      return absl::FailedPreconditionError(
          absl::StrCat("'", python, "': ", fields.size() > 1 ? fields[1] : ""));
    }
    if (fields[0] == "version" && fields.size() == 2) {
      kernels.jaxlib_version = fields[1];
    } else if (fields[0] == "skip" && fields.size() == 3) {
      kernels.skipped.push_back(absl::StrCat(fields[1], ": ", fields[2]));
    } else if (fields[0] == "kernel" && fields.size() == 5) {
      int api_version = 0;
      uint64_t address = 0;
      if (!absl::SimpleAtoi(fields[3], &api_version) || !absl::SimpleAtoi(fields[4], &address) ||
          address == 0) {
        kernels.skipped.push_back(absl::StrCat(fields[1], ": unreadable handler"));
        continue;
      }
      absl::Status status =
          ffi.RegisterHandler(fields[1], fields[2], reinterpret_cast<void*>(address), api_version);
      if (status.ok()) {
        kernels.targets.push_back(fields[1]);
      } else {
        kernels.skipped.push_back(absl::StrCat(fields[1], ": ", status.message()));
      }
    }
  }
  return kernels;
}

}  // namespace

absl::StatusOr<JaxKernels> RegisterJaxKernels(const pjrt::Ffi& ffi, const std::string& python,
                                              const std::string& platform) {
  // Registrations are process-wide: later calls (in-process fleets in tests) get the
  // first call's answer.
  static absl::Mutex mutex;
  static absl::StatusOr<JaxKernels>* first = nullptr;
  absl::MutexLock lock(&mutex);
  if (first == nullptr) first = new absl::StatusOr<JaxKernels>(Register(ffi, python, platform));
  return *first;
}

}  // namespace switchyard::worker
