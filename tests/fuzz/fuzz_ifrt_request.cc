// Every IFRT request type a client can send, with the shardings, serialized programs
// and compile options inside it, through a proxy Session over an in-process fleet
// (2 slices of 2 CPU devices; support/in_process_fleet.h). The session lives across
// inputs, so arrays and executables one input makes are there for the next (seeds from
// one recorded client session refer to each other's handles); it is replaced every few
// hundred inputs. The harness plays the client's uploads: a host buffer an array
// request names is there, of the size the request implies. Like JAX, it waits for a
// compile's answer before the next request (the proxy compiles off its request loop).
// (Not waiting, two PJRT CPU clients in one process, the in-process fleet's workers,
// crashed the plugin with a SEGV in its threads within a minute, 3 runs of 3; with one
// client, or waiting, not in 150 s.)

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/element_type.h"
#include "fuzz/quiet.h"
#include "proxy/host_buffer_store.h"
#include "proxy/ifrt_convert.h"
#include "proxy/response_sink.h"
#include "proxy/session.h"
#include "support/in_process_fleet.h"

namespace {

namespace wire = ::xla::ifrt::proxy;
using switchyard::proxy::HostBufferStore;
using switchyard::proxy::ResponseSink;
using switchyard::proxy::Session;

class World {
 public:
  World() { fleet_.StartOrAbort(2, 2); }

  void Run(wire::IfrtRequest request) {
    if (session_ == nullptr || ++inputs_ % 300 == 0) NewSession();
    if (request.has_compile_request() && !request.compile_request().program().data().empty()) {
      // Program bytes are the plugin's to parse, and a corrupt one crashes the CPU
      // plugin's bytecode reader (README.md): a valid program stands in for them.
      request.mutable_compile_request()->mutable_program()->set_data(
          switchyard::test_support::kAddOneProgram);
    }
    if (request.has_make_array_from_host_buffer_request()) {
      Upload(request.make_array_from_host_buffer_request());
    }
    // Waits the session makes for the client (an upload that never comes) end at once.
    deadline_ = absl::Now() + absl::Milliseconds(200);
    if (!request.has_compile_request()) {
      (void)session_->Process(request);
      return;
    }
    const uint64_t op_id = (uint64_t{1} << 63) + ++compiles_;
    request.mutable_request_metadata()->set_op_id(op_id);
    if (!session_->Process(request).has_value()) {
      absl::MutexLock lock(&mutex_);
      auto answered = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) { return answered_ == op_id; };
      mutex_.AwaitWithTimeout(absl::Condition(&answered), absl::Seconds(60));
    }
  }

 private:
  void NewSession() {
    session_.reset();
    if (sink_ != nullptr) sink_->Close();
    store_ = std::make_shared<HostBufferStore>();
    sink_ = std::make_shared<ResponseSink>(
        [this](const wire::IfrtResponse& response) {
          if (response.has_compile_response() || response.response_metadata().op_id() >> 63) {
            absl::MutexLock lock(&mutex_);
            answered_ = response.response_metadata().op_id();
          }
          return true;
        },
        [] {});
    session_ = std::make_unique<Session>(
        1, switchyard::proxy::Version{25, 6}, fleet_.fleet(), store_,
        [this] { return absl::Now() > deadline_; }, sink_);
    wire::IfrtRequest init;
    init.mutable_init_request();
    (void)session_->Process(init);
  }

  void Upload(const wire::MakeArrayFromHostBufferRequest& make) {
    absl::StatusOr<switchyard::DType> dtype = switchyard::proxy::FromDTypeProto(make.dtype());
    if (!dtype.ok()) return;
    int64_t elements = 1;
    for (int64_t dim : make.shape().dims()) {
      if (dim < 0 || dim > (1 << 16)) return;
      elements *= dim;
      if (elements > (1 << 18)) return;
    }
    const int64_t bytes = switchyard::HostElementBytes(*dtype) * elements;
    if (bytes <= 0) return;
    auto buffer = store_->Begin(make.host_buffer_handle(), bytes);
    if (!buffer.ok()) return;
    (void)(*buffer)->Append(std::string(bytes, '\1'));
    (*buffer)->Finish();
  }

  switchyard::test_support::InProcessFleet fleet_;
  std::shared_ptr<HostBufferStore> store_;
  std::shared_ptr<ResponseSink> sink_;
  std::unique_ptr<Session> session_;
  absl::Time deadline_;
  int inputs_ = 0;
  uint64_t compiles_ = 0;
  absl::Mutex mutex_;
  uint64_t answered_ ABSL_GUARDED_BY(mutex_) = 0;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  wire::IfrtRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return -1;
  static World* world = new World;  // lives until exit: the fleet's threads use it
  world->Run(std::move(request));
  return 0;
}
