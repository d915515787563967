#include "worker/embedded_jaxlib.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string_view>

#include "absl/cleanup/cleanup.h"
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

// Runs in the embedded interpreter: the text and cost analysis of the HloModuleProto
// in `_sy_in`, written to `_sy_fd` as "<n>\n", n lines "<name>\t<value>", then the text.
// The CPU client only runs the cost model; it is made on first use.
constexpr std::string_view kDescribeScript = R"py(
def _sy_describe(fd_in, fd_out):
    import os
    from jaxlib import _jax, xla_client
    os.lseek(fd_in, 0, os.SEEK_SET)
    chunks = []
    while True:
        chunk = os.read(fd_in, 1 << 20)
        if not chunk:
            break
        chunks.append(chunk)
    computation = xla_client.XlaComputation(b"".join(chunks))
    text = computation.as_hlo_text()
    global _sy_cpu_client
    if "_sy_cpu_client" not in globals():
        _sy_cpu_client = xla_client.make_cpu_client()
    costs = _jax.hlo_module_cost_analysis(_sy_cpu_client, computation.get_hlo_module())
    lines = ["%s\t%r" % (str(k).replace("\t", " ").replace("\n", " "), float(v))
             for k, v in costs.items()]
    os.write(fd_out, ("%d\n" % len(lines) + "".join(l + "\n" for l in lines) + text).encode())
_sy_describe(_sy_in, _sy_fd)
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

// The embedded interpreter: started once, then entered with the GIL by whichever
// thread needs it.
struct Interpreter {
  using RunFn = int (*)(const char*);
  using GilEnsureFn = int (*)();
  using GilReleaseFn = void (*)(int);
  RunFn run = nullptr;
  GilEnsureFn gil_ensure = nullptr;
  GilReleaseFn gil_release = nullptr;
  std::string path_setup;  // Python that sets sys.path as the real interpreter has it
};

absl::Mutex interpreter_mutex;
Interpreter* interpreter ABSL_GUARDED_BY(interpreter_mutex) = nullptr;

absl::Status StartInterpreter(const PythonInfo& info)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(interpreter_mutex) {
  void* lib = dlopen(info.libpython.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (lib == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot load '", info.libpython, "': ", dlerror()));
  }
  using InitializeFn = void (*)(int);
  using SaveThreadFn = void* (*)();
  auto initialize = reinterpret_cast<InitializeFn>(dlsym(lib, "Py_InitializeEx"));
  auto save_thread = reinterpret_cast<SaveThreadFn>(dlsym(lib, "PyEval_SaveThread"));
  auto started = std::make_unique<Interpreter>();
  started->run = reinterpret_cast<Interpreter::RunFn>(dlsym(lib, "PyRun_SimpleString"));
  started->gil_ensure = reinterpret_cast<Interpreter::GilEnsureFn>(dlsym(lib, "PyGILState_Ensure"));
  started->gil_release =
      reinterpret_cast<Interpreter::GilReleaseFn>(dlsym(lib, "PyGILState_Release"));
  if (initialize == nullptr || save_thread == nullptr || started->run == nullptr ||
      started->gil_ensure == nullptr || started->gil_release == nullptr) {
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
  save_thread();  // release the GIL: callers take it with gil_ensure
  std::vector<std::string> path;
  for (const std::string& entry : info.path) path.push_back(PythonLiteral(entry));
  started->path_setup =
      absl::StrCat("import sys\nsys.path[:] = [", absl::StrJoin(path, ", "), "]\n");
  interpreter = started.release();
  return absl::OkStatus();
}

std::string ReadAll(FILE* file) {
  std::string data;
  rewind(file);
  char chunk[1 << 16];
  size_t n;
  while ((n = fread(chunk, 1, sizeof(chunk), file)) > 0) data.append(chunk, n);
  return data;
}

// Runs `code` in the interpreter, which finds `input` in the file with descriptor
// `_sy_in` and writes its answer to the one in `_sy_fd`; returns that answer.
absl::StatusOr<std::string> RunPython(const std::string& code, const std::string& input = "")
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(interpreter_mutex) {
  if (interpreter == nullptr) {
    return absl::FailedPreconditionError("no embedded Python (start the worker with --python)");
  }
  FILE* in = tmpfile();
  FILE* out = tmpfile();
  absl::Cleanup close = [&] {
    if (in != nullptr) fclose(in);
    if (out != nullptr) fclose(out);
  };
  if (in == nullptr || out == nullptr) return absl::InternalError("tmpfile failed");
  if (!input.empty() && fwrite(input.data(), 1, input.size(), in) != input.size()) {
    return absl::InternalError("could not stage the embedded Python's input");
  }
  fflush(in);
  std::string script = absl::StrCat(interpreter->path_setup, "_sy_in = ", fileno(in),
                                    "\n_sy_fd = ", fileno(out), "\n", code);
  int state = interpreter->gil_ensure();
  int rc = interpreter->run(script.c_str());
  interpreter->gil_release(state);
  if (rc != 0) {
    return absl::InternalError("the embedded Python raised (its traceback is on stderr)");
  }
  return ReadAll(out);
}

absl::StatusOr<JaxKernels> Register(const pjrt::Ffi& ffi, const std::string& python,
                                    const std::string& platform) {
  SY_ASSIGN_OR_RETURN(PythonInfo info, AskPython(python));
  std::string output;
  {
    absl::MutexLock lock(&interpreter_mutex);
    if (interpreter == nullptr) SY_RETURN_IF_ERROR(StartInterpreter(info));
    SY_ASSIGN_OR_RETURN(output,
                        RunPython(absl::StrCat(std::string(kKernelScript), "\n_sy_kernels(_sy_fd, ",
                                               PythonLiteral(platform), ")\n")));
  }
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

absl::StatusOr<ProgramReport> DescribeProgram(const std::string& hlo_module_proto) {
  std::string output;
  {
    absl::MutexLock lock(&interpreter_mutex);
    SY_ASSIGN_OR_RETURN(output, RunPython(std::string(kDescribeScript), hlo_module_proto));
  }
  ProgramReport report;
  size_t pos = output.find('\n');
  int count = 0;
  if (pos == std::string::npos || !absl::SimpleAtoi(output.substr(0, pos), &count) || count < 0) {
    return absl::InternalError("unreadable program description from the embedded jaxlib");
  }
  ++pos;
  for (int i = 0; i < count; ++i) {
    size_t end = output.find('\n', pos);
    if (end == std::string::npos) {
      return absl::InternalError("truncated program description from the embedded jaxlib");
    }
    std::string line = output.substr(pos, end - pos);
    pos = end + 1;
    size_t tab = line.find('\t');
    double value = 0;
    if (tab != std::string::npos && absl::SimpleAtod(line.substr(tab + 1), &value)) {
      report.costs.emplace_back(line.substr(0, tab), value);
    }
  }
  report.text = output.substr(pos);
  return report;
}

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
