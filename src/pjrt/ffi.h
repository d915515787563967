#pragma once

// Custom calls through the plugin's FFI extension (XLA's typed FFI on CPU and GPU
// plugins): registering handlers that other libraries made (jaxlib's kernels), and
// routing a custom call to a function of ours chosen per launch (host callbacks).

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "pjrt/dtype.h"

struct PJRT_Api;
struct PJRT_ExecuteContext;

namespace switchyard::pjrt {

class Plugin;

// One operand or result of a routed custom call, in the device's memory (host memory
// on CPU plugins). Tokens have `token` set and no data.
struct FfiBuffer {
  DType dtype = DType::kInvalid;
  bool token = false;
  std::vector<int64_t> dims;
  void* data = nullptr;
  size_t size_bytes = 0;
};

// One call of a routed custom call: its `index` attribute, its operands, and the
// results the handler must fill before returning OK.
struct FfiCall {
  uint64_t index = 0;
  std::vector<FfiBuffer> args;
  std::vector<FfiBuffer> rets;
};

// Runs on the plugin's thread that executes the custom call, which waits for it.
using FfiCallHandler = std::function<absl::Status(FfiCall& call)>;

// Data a launch carries to its routed custom calls. Must outlive the launch.
class ExecuteContext {
 public:
  ~ExecuteContext();
  ExecuteContext(const ExecuteContext&) = delete;
  ExecuteContext& operator=(const ExecuteContext&) = delete;

  PJRT_ExecuteContext* handle() const { return context_; }

 private:
  friend class Ffi;
  ExecuteContext(const PJRT_Api* api, PJRT_ExecuteContext* context)
      : api_(api), context_(context) {}

  const PJRT_Api* api_;
  PJRT_ExecuteContext* context_;
  // What the context's user data points at; ours to free, after the context.
  std::shared_ptr<void> data_;
};

class Ffi {
 public:
  // The plugin's FFI extension; UNIMPLEMENTED if it has none, or one too old to
  // register handlers.
  static absl::StatusOr<Ffi> Of(const Plugin& plugin);

  // Registers `handler` for custom calls to `target` on `platform` ("cpu", "CUDA"):
  // an XLA_FFI_Handler* (api_version 1, typed FFI). Legacy custom calls (0) are
  // UNIMPLEMENTED: plugins take typed handlers only. Process-wide and permanent.
  absl::Status RegisterHandler(std::string_view target, std::string_view platform, void* handler,
                               int api_version) const;

  // Makes typed-FFI custom calls to `target` (with a uint64 `index` attribute) call
  // the FfiCallHandler of the launch's ExecuteContext. A launch without one fails the
  // call with FAILED_PRECONDITION.
  absl::Status Route(std::string_view target, std::string_view platform) const;

  // A context whose routed custom calls run `handler`.
  absl::StatusOr<std::unique_ptr<ExecuteContext>> NewContext(FfiCallHandler handler) const;

 private:
  Ffi(const PJRT_Api* api, const void* extension) : api_(api), extension_(extension) {}

  const PJRT_Api* api_;
  const void* extension_;
};

}  // namespace switchyard::pjrt
