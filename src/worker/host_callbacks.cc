#include "worker/host_callbacks.h"

#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/limits.h"
#include "common/status_macros.h"

namespace switchyard::worker {
namespace {

// JAX's targets for host callbacks on CPU (jax/_src/callback.py), all with an `index`.
constexpr const char* kCpuTargets[] = {"xla_ffi_python_cpu_callback",
                                       "xla_ffi_partitioned_python_cpu_callback"};

absl::Status CheckDescribable(const pjrt::FfiBuffer& buffer, const char* what, size_t i) {
  if (buffer.token) return absl::OkStatus();
  // Sub-byte types lie packed in device memory; the client would want them unpacked.
  if (pjrt::BitWidth(buffer.dtype) < 8) {
    return absl::UnimplementedError(absl::StrCat("host callback ", what, " ", i,
                                                 " has an element type Switchyard cannot carry (",
                                                 static_cast<int>(buffer.dtype), ")"));
  }
  return absl::OkStatus();
}

void Describe(const pjrt::FfiBuffer& buffer, HostArray* out) {
  out->set_token(buffer.token);
  if (buffer.token) return;
  out->set_dtype(static_cast<int32_t>(buffer.dtype));
  out->mutable_dims()->Add(buffer.dims.begin(), buffer.dims.end());
}

}  // namespace

struct HostCallbacks::Waiting {
  uint64_t stream = 0;
  absl::Notification done;
  absl::Status status;  // set before `done`
  HostCallbackResult result;
};

absl::StatusOr<std::unique_ptr<HostCallbacks>> HostCallbacks::Create(const pjrt::Plugin& plugin,
                                                                     const std::string& platform) {
  if (platform != "cpu") {
    return absl::UnimplementedError(absl::StrCat(
        "host callbacks reach the client from CPU workers only (this one is ", platform, ")"));
  }
  SY_ASSIGN_OR_RETURN(pjrt::Ffi ffi, pjrt::Ffi::Of(plugin));
  for (const char* target : kCpuTargets) SY_RETURN_IF_ERROR(ffi.Route(target, "cpu"));
  return std::unique_ptr<HostCallbacks>(new HostCallbacks(ffi));
}

bool HostCallbacks::Stream::Post(const HostCallbackCall& call) {
  absl::MutexLock lock(&mutex_);
  if (send_ == nullptr) return false;
  DispatchResponse response;
  *response.mutable_host_callback() = call;
  return send_(response);
}

void HostCallbacks::Stream::Close() {
  {
    absl::MutexLock lock(&mutex_);
    send_ = nullptr;
    gone_ = nullptr;
  }
  owner_->FailStream(id_);
}

bool HostCallbacks::Stream::Gone() {
  absl::MutexLock lock(&mutex_);
  return send_ == nullptr || (gone_ != nullptr && gone_());
}

std::shared_ptr<HostCallbacks::Stream> HostCallbacks::NewStream(Stream::Send send,
                                                                std::function<bool()> gone) {
  absl::MutexLock lock(&mutex_);
  return std::shared_ptr<Stream>(
      new Stream(this, next_stream_++, std::move(send), std::move(gone)));
}

absl::StatusOr<std::unique_ptr<pjrt::ExecuteContext>> HostCallbacks::ContextFor(
    const std::string& key, std::shared_ptr<Stream> stream) {
  return ffi_.NewContext(Handler(key, std::move(stream)));
}

pjrt::FfiCallHandler HostCallbacks::Handler(const std::string& key,
                                            std::shared_ptr<Stream> stream) {
  return [this, key, stream](pjrt::FfiCall& call) { return Call(key, *stream, call); };
}

absl::Status HostCallbacks::Call(const std::string& key, Stream& stream, pjrt::FfiCall& call) {
  HostCallbackCall up;
  up.set_key(key);
  up.set_index(call.index);
  for (size_t i = 0; i < call.args.size(); ++i) {
    const pjrt::FfiBuffer& arg = call.args[i];
    SY_RETURN_IF_ERROR(CheckDescribable(arg, "operand", i));
    HostArray* out = up.add_args();
    Describe(arg, out);
    if (!arg.token) out->set_data(static_cast<const char*>(arg.data), arg.size_bytes);
  }
  for (size_t i = 0; i < call.rets.size(); ++i) {
    SY_RETURN_IF_ERROR(CheckDescribable(call.rets[i], "result", i));
    Describe(call.rets[i], up.add_results());
  }
  auto waiting = std::make_shared<Waiting>();
  waiting->stream = stream.id_;
  uint64_t id;
  {
    absl::MutexLock lock(&mutex_);
    if (static_cast<int64_t>(waiting_.size()) >= limits::kHostCallbacksWaitingMax) {
      return absl::ResourceExhaustedError(absl::StrCat("more than ",
                                                       limits::kHostCallbacksWaitingMax,
                                                       " host callback calls wait on this worker"));
    }
    id = next_call_++;
    waiting_[id] = waiting;
  }
  up.set_call_id(id);
  if (!stream.Post(up)) {
    absl::MutexLock lock(&mutex_);
    waiting_.erase(id);
    return absl::UnavailableError(
        "host callback: the proxy stream that launched this program has ended");
  }
  // The launch may run on the stream's own reader thread (the plugin runs small programs
  // inline), which then cannot see the stream end: look at the peer while waiting.
  const absl::Time deadline = absl::Now() + absl::Milliseconds(limits::kHostCallbackWaitMs);
  while (!waiting->done.WaitForNotificationWithTimeout(absl::Milliseconds(200))) {
    const bool gone = stream.Gone();
    if (!gone && absl::Now() < deadline) continue;
    absl::MutexLock lock(&mutex_);
    if (waiting_.erase(id) == 1) {
      if (gone) {
        return absl::UnavailableError(
            "host callback: the proxy that launched this program has gone");
      }
      return absl::DeadlineExceededError(absl::StrCat("host callback ", call.index,
                                                      ": no answer from the client within ",
                                                      limits::kHostCallbackWaitMs / 1000, " s"));
    }
    // Answered just now; `done` follows.
    waiting->done.WaitForNotification();
    break;
  }
  SY_RETURN_IF_ERROR(waiting->status);
  const HostCallbackResult& result = waiting->result;
  if (result.code() != 0) {
    return absl::Status(static_cast<absl::StatusCode>(result.code()), result.message());
  }
  if (static_cast<size_t>(result.results_size()) != call.rets.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("host callback ", call.index, " returned ", result.results_size(),
                     " values; the program expects ", call.rets.size()));
  }
  for (size_t i = 0; i < call.rets.size(); ++i) {
    const pjrt::FfiBuffer& ret = call.rets[i];
    if (ret.token) continue;
    const HostArray& value = result.results(static_cast<int>(i));
    if (value.dtype() != static_cast<int32_t>(ret.dtype) || value.data().size() != ret.size_bytes ||
        !std::equal(value.dims().begin(), value.dims().end(), ret.dims.begin(), ret.dims.end())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "host callback ", call.index, " result ", i, " does not match what the program expects (",
          pjrt::DTypeName(ret.dtype), ", ", ret.size_bytes, " bytes)"));
    }
    if (ret.size_bytes > 0) std::memcpy(ret.data, value.data().data(), ret.size_bytes);
  }
  return absl::OkStatus();
}

absl::Status HostCallbacks::Return(const HostCallbackResult& result) {
  std::shared_ptr<Waiting> waiting;
  {
    absl::MutexLock lock(&mutex_);
    auto it = waiting_.find(result.call_id());
    if (it == waiting_.end()) {
      return absl::NotFoundError(absl::StrCat("no host callback call ", result.call_id(),
                                              " waits (answered, timed out or abandoned)"));
    }
    waiting = std::move(it->second);
    waiting_.erase(it);
  }
  waiting->result = result;
  waiting->done.Notify();
  return absl::OkStatus();
}

void HostCallbacks::FailStream(uint64_t stream_id) {
  std::vector<std::shared_ptr<Waiting>> failed;
  {
    absl::MutexLock lock(&mutex_);
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      if (it->second->stream == stream_id) {
        failed.push_back(std::move(it->second));
        waiting_.erase(it++);
      } else {
        ++it;
      }
    }
  }
  for (auto& waiting : failed) {
    waiting->status = absl::UnavailableError(
        "host callback: the proxy stream that launched this program ended before the client "
        "answered");
    waiting->done.Notify();
  }
}

int64_t HostCallbacks::waiting() const {
  absl::MutexLock lock(&mutex_);
  return waiting_.size();
}

}  // namespace switchyard::worker
