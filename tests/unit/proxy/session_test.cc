// Session handlers against a whole fleet in this process (support/in_process_fleet.h: a real
// RM and two workers, no socket). Every case runs against fake workers (support/fake_worker.h)
// at every worker protocol version the proxy speaks, and again against real workers (the real
// Executor and BufferStore) when SWITCHYARD_TEST_PLUGIN names a plugin. Requests are built the
// way the IFRT proxy client builds them; answers are checked as the client would read them,
// including the ones that come later through the sink. The faults a real worker cannot be made
// to show on cue (a crash, a restart, a hang) run against the fakes only.

#include "proxy/session.h"

#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/limits.h"
#include "gtest/gtest.h"
#include "proxy/fleet.h"
#include "proxy/host_buffer_store.h"
#include "proxy/response_sink.h"
#include "support/in_process_fleet.h"
#include "xla/compile_options.pb.h"

namespace switchyard::proxy {
namespace {

namespace t = ::xla::ifrt;

constexpr int kDevicesPerWorker = 2;

constexpr const char* kAddOne = test_support::kAddOneProgram;

// What the client stream receives, in order.
class Answers {
 public:
  bool Write(const wire::IfrtResponse& response) {
    absl::MutexLock lock(&mutex_);
    answers_.push_back(response);
    return true;
  }
  // The answer to `op_id`, waiting up to 30 s for it.
  std::optional<wire::IfrtResponse> Wait(uint64_t op_id) {
    absl::MutexLock lock(&mutex_);
    auto find = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) -> const wire::IfrtResponse* {
      for (const auto& answer : answers_) {
        if (answer.response_metadata().op_id() == op_id) return &answer;
      }
      return nullptr;
    };
    auto found = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) { return find() != nullptr; };
    if (!mutex_.AwaitWithTimeout(absl::Condition(&found), absl::Seconds(30))) return std::nullopt;
    return *find();
  }

 private:
  absl::Mutex mutex_;
  std::deque<wire::IfrtResponse> answers_ ABSL_GUARDED_BY(mutex_);
};

// The workers a case runs against: fakes speaking worker protocol `protocol`, or real
// ones (protocol 0); and the IFRT protocol and SerDes versions the client speaks.
struct Backend {
  uint32_t protocol = 0;
  Version client = {kProtocolMax, kSerDesMax};
};

// Every worker protocol with the newest client, and the newest with the oldest client.
std::vector<Backend> FakesAtEveryProtocol() {
  std::vector<Backend> backends;
  for (uint32_t protocol = WORKER_PROTOCOL_FIRST; protocol <= WorkerProtocol_MAX; ++protocol) {
    backends.push_back({protocol});
  }
  backends.push_back({WorkerProtocol_MAX, Version{kProtocolMin, kSerDesMin}});
  return backends;
}

std::vector<Backend> EveryBackend() {
  std::vector<Backend> backends = FakesAtEveryProtocol();
  if (test_support::TestPlugin() != nullptr) backends.push_back({0});
  return backends;
}

std::string BackendName(const ::testing::TestParamInfo<Backend>& info) {
  const std::string workers =
      info.param.protocol == 0 ? "plugin" : absl::StrCat("fake_v", info.param.protocol);
  return absl::StrCat(workers, "_ifrt", info.param.client.protocol, "_serdes",
                      info.param.client.serdes);
}

class SessionTest : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    absl::Status started = GetParam().protocol == 0
                               ? fleet_.Start(2, kDevicesPerWorker)
                               : fleet_.StartFake(2, kDevicesPerWorker, GetParam().protocol);
    ASSERT_TRUE(started.ok()) << started;
    store_ = std::make_shared<HostBufferStore>();
    sink_ = std::make_shared<ResponseSink>(
        [this](const wire::IfrtResponse& response) { return answers_.Write(response); }, [] {});
    session_ = std::make_unique<Session>(
        7, GetParam().client, fleet_.fleet(), store_, [] { return false; }, sink_);
    wire::IfrtRequest init;
    init.mutable_init_request();
    init_ = Answer(init);
  }
  void TearDown() override {
    session_.reset();
    if (sink_ != nullptr) sink_->Close();
  }

  // Sends `request` with a fresh op id; its answer, now or later.
  wire::IfrtResponse Answer(wire::IfrtRequest request) {
    const uint64_t op_id = next_op_++;
    request.mutable_request_metadata()->set_op_id(op_id);
    std::optional<wire::IfrtResponse> now = session_->Process(request);
    if (now.has_value()) {
      EXPECT_EQ(now->response_metadata().op_id(), op_id);
      return *now;
    }
    std::optional<wire::IfrtResponse> later = answers_.Wait(op_id);
    EXPECT_TRUE(later.has_value()) << "no answer to op " << op_id;
    return later.value_or(wire::IfrtResponse());
  }

  static absl::StatusCode Code(const wire::IfrtResponse& response) {
    return static_cast<absl::StatusCode>(response.response_metadata().status().code());
  }
  static std::string Message(const wire::IfrtResponse& response) {
    return response.response_metadata().status().message();
  }

  static t::ShardingProto OnDevice(int64_t device) {
    t::ShardingProto sharding;
    sharding.mutable_serialized_sharding()->set_type_name("xla::ifrt::SingleDeviceSharding");
    t::SingleDeviceShardingProto single;
    single.set_device_id(device);
    sharding.mutable_serialized_sharding()->set_data(single.SerializeAsString());
    return sharding;
  }

  // Uploads `values` and makes array `handle` of them on `device`.
  wire::IfrtResponse MakeArray(uint64_t handle, const std::vector<float>& values, int64_t device) {
    const uint64_t upload = handle + 1000;
    auto buffer = store_->Begin(upload, values.size() * sizeof(float));
    EXPECT_TRUE(buffer.ok());
    if (buffer.ok()) {
      EXPECT_TRUE((*buffer)
                      ->Append(absl::string_view(reinterpret_cast<const char*>(values.data()),
                                                 values.size() * sizeof(float)))
                      .ok());
      (*buffer)->Finish();
    }
    wire::IfrtRequest request;
    auto* make = request.mutable_make_array_from_host_buffer_request();
    make->mutable_dtype()->set_kind(t::DTypeProto::KIND_F32);
    make->mutable_shape()->add_dims(static_cast<int64_t>(values.size()));
    *make->mutable_sharding() = OnDevice(device);
    make->set_host_buffer_handle(upload);
    make->set_array_handle(handle);
    return Answer(request);
  }

  // Array `handle`'s values, through CopyToHostBuffer; its error otherwise.
  absl::StatusOr<std::vector<float>> Fetch(uint64_t handle) {
    const uint64_t download = handle + 2000;
    wire::IfrtRequest request;
    request.mutable_copy_to_host_buffer_request()->set_array_handle(handle);
    request.mutable_copy_to_host_buffer_request()->set_host_buffer_handle(download);
    wire::IfrtResponse response = Answer(request);
    if (Code(response) != absl::StatusCode::kOk) {
      return absl::Status(Code(response), Message(response));
    }
    auto buffer = store_->Lookup(download, absl::Seconds(10));
    if (!buffer.ok()) return buffer.status();
    auto bytes = (*buffer)->WaitAll(absl::Now() + absl::Seconds(30));
    if (!bytes.ok()) return bytes.status();
    std::vector<float> values(bytes->size() / sizeof(float));
    std::memcpy(values.data(), bytes->data(), values.size() * sizeof(float));
    (void)store_->Delete(download);
    return values;
  }

  wire::IfrtResponse Ready(std::vector<uint64_t> handles) {
    wire::IfrtRequest request;
    for (uint64_t handle : handles) {
      request.mutable_check_value_ready_request()->add_value_handles(handle);
    }
    return Answer(request);
  }

  wire::IfrtResponse Compile(const std::string& program) {
    wire::IfrtRequest request;
    auto* compile = request.mutable_compile_request();
    compile->mutable_program()->set_type_name("xla::ifrt::XlaProgram");
    compile->mutable_program()->set_data(program);
    compile->mutable_compile_options()->set_type_name("xla::ifrt::XlaCompileOptions");
    compile->mutable_compile_options()->set_data(t::XlaCompileOptionsProto().SerializeAsString());
    return Answer(request);
  }

  wire::IfrtResponse Execute(uint64_t executable, std::vector<uint64_t> args, uint64_t result,
                             uint64_t status) {
    wire::IfrtRequest request;
    auto* execute = request.mutable_loaded_executable_execute_request();
    execute->set_loaded_executable_handle(executable);
    for (uint64_t arg : args) execute->add_args_handles(arg);
    execute->add_result_array_handle(result);
    execute->set_result_status_handle(status);
    execute->mutable_execute_options()->set_fill_status(true);
    return Answer(request);
  }

  // Compile options the plugin would abort on (found by fuzz_ifrt_request) are refused.
  void ExpectOptionsThePluginWouldAbortOnRefused() {
    switchyard::xla::CompileOptionsProto bad_options;
    bad_options.mutable_executable_build_options()->set_device_ordinal(-524289);
    t::XlaCompileOptionsProto xla_options;
    xla_options.set_compile_options(bad_options.SerializeAsString());
    wire::IfrtRequest bad;
    bad.mutable_compile_request()->mutable_program()->set_type_name("xla::ifrt::XlaProgram");
    bad.mutable_compile_request()->mutable_program()->set_data(kAddOne);
    bad.mutable_compile_request()->mutable_compile_options()->set_type_name(
        "xla::ifrt::XlaCompileOptions");
    bad.mutable_compile_request()->mutable_compile_options()->set_data(
        xla_options.SerializeAsString());
    wire::IfrtResponse refused = Answer(bad);
    EXPECT_EQ(Code(refused), absl::StatusCode::kInvalidArgument) << Message(refused);
    EXPECT_NE(Message(refused).find("device_ordinal"), std::string::npos) << Message(refused);
  }

  test_support::InProcessFleet fleet_;
  std::shared_ptr<HostBufferStore> store_;
  Answers answers_;
  std::shared_ptr<ResponseSink> sink_;
  std::unique_ptr<Session> session_;
  wire::IfrtResponse init_;
  uint64_t next_op_ = 1;
};

TEST_P(SessionTest, InitListsEveryDeviceOfEverySlice) {
  ASSERT_EQ(Code(init_), absl::StatusCode::kOk) << Message(init_);
  const wire::InitResponse& init = init_.init_response();
  EXPECT_EQ(init.all_devices_size(), 2 * kDevicesPerWorker);
  EXPECT_EQ(init.runtime_type(), "pathways");  // the client prefixes "proxy/"
  EXPECT_EQ(init.session_id(), 7u);
}

TEST_P(SessionTest, AnArrayGoesToItsWorkerAndComesBack) {
  for (int64_t device : {0, 3}) {
    const uint64_t handle = 10 + device;
    ASSERT_EQ(Code(MakeArray(handle, {1, 2, 3, 4}, device)), absl::StatusCode::kOk);
    EXPECT_EQ(Code(Ready({handle})), absl::StatusCode::kOk);
    absl::StatusOr<std::vector<float>> values = Fetch(handle);
    ASSERT_TRUE(values.ok()) << values.status();
    EXPECT_EQ(*values, (std::vector<float>{1, 2, 3, 4}));
  }
}

TEST_P(SessionTest, UnknownHandlesAreErrorsAndTheSessionGoesOn) {
  absl::StatusOr<std::vector<float>> missing = Fetch(424242);
  EXPECT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("424242"), std::string::npos) << missing.status();
  EXPECT_NE(Code(Ready({424243})), absl::StatusCode::kOk);
  EXPECT_NE(Code(Execute(555, {}, 600, 601)), absl::StatusCode::kOk);
  wire::IfrtRequest future;
  future.mutable_check_future_request()->set_future_handle(777);
  EXPECT_NE(Code(Answer(future)), absl::StatusCode::kOk);
  // Still serving.
  ASSERT_EQ(Code(MakeArray(20, {5, 6, 7, 8}, 1)), absl::StatusCode::kOk);
  EXPECT_TRUE(Fetch(20).ok());
}

TEST_P(SessionTest, AFailedRequestBindsItsErrorToTheHandlesItWouldHaveMade) {
  // A device that does not exist: the array handle carries the error.
  wire::IfrtResponse made = MakeArray(30, {1, 2, 3, 4}, 99);
  ASSERT_NE(Code(made), absl::StatusCode::kOk);
  absl::StatusOr<std::vector<float>> fetched = Fetch(30);
  ASSERT_FALSE(fetched.ok());
  EXPECT_EQ(fetched.status().code(), Code(made)) << fetched.status();
  EXPECT_EQ(Code(Ready({30})), Code(made));
}

TEST_P(SessionTest, PastTheArrayQuotaRefusedHandlesSayWhyButOnlySoMany) {
  SessionPolicy policy;
  policy.max_arrays = 2;
  session_ = std::make_unique<Session>(
      8, GetParam().client, fleet_.fleet(), store_, [] { return false; }, sink_, policy);
  wire::IfrtRequest init;
  init.mutable_init_request();
  ASSERT_EQ(Code(Answer(init)), absl::StatusCode::kOk);
  ASSERT_EQ(Code(MakeArray(1, {1, 2, 3, 4}, 0)), absl::StatusCode::kOk);
  ASSERT_EQ(Code(MakeArray(2, {1, 2, 3, 4}, 0)), absl::StatusCode::kOk);
  // A client looping past its quota, as jax does with asynchronous array creation.
  const int64_t asked = limits::kRefusedHandlesMax + 100;
  for (int64_t i = 0; i < asked; ++i) {
    wire::IfrtRequest request;
    auto* make = request.mutable_make_error_arrays_request();
    make->mutable_error()->set_code(static_cast<int>(absl::StatusCode::kAborted));
    make->mutable_error()->set_message("made on purpose");
    make->add_array_specs()->mutable_dtype()->set_kind(t::DTypeProto::KIND_F32);
    make->add_array_handles(100 + i);
    ASSERT_EQ(Code(Answer(request)), absl::StatusCode::kResourceExhausted) << i;
  }
  EXPECT_EQ(static_cast<int64_t>(session_->arrays()), 2 + limits::kRefusedHandlesMax);
  // The first refused handles carry the refusal where they are used; the rest are unknown.
  EXPECT_EQ(Code(Ready({100})), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(Code(Ready({100 + asked - 1})), absl::StatusCode::kNotFound);
}

TEST_P(SessionTest, ADeletedArrayIsGoneAndSaysSo) {
  ASSERT_EQ(Code(MakeArray(40, {1, 1, 1, 1}, 2)), absl::StatusCode::kOk);
  wire::IfrtRequest remove;
  remove.mutable_delete_array_request()->add_array_handle(40);
  wire::IfrtResponse deleted = Answer(remove);
  ASSERT_EQ(Code(deleted), absl::StatusCode::kOk) << Message(deleted);
  wire::IfrtRequest is_deleted;
  is_deleted.mutable_is_array_deleted_request()->set_array_handle(40);
  wire::IfrtResponse answer = Answer(is_deleted);
  ASSERT_EQ(Code(answer), absl::StatusCode::kOk);
  EXPECT_TRUE(answer.is_array_deleted_response().deleted());
  EXPECT_FALSE(Fetch(40).ok());
  // Destructing twice, or an array never made, is harmless.
  for (int i = 0; i < 2; ++i) {
    wire::IfrtRequest destruct;
    destruct.mutable_destruct_array_request()->add_array_handle(40);
    destruct.mutable_destruct_array_request()->add_array_handle(41);
    Answer(destruct);
  }
  ASSERT_EQ(Code(MakeArray(42, {2, 2, 2, 2}, 2)), absl::StatusCode::kOk);
  EXPECT_TRUE(Fetch(42).ok());
}

TEST_P(SessionTest, AProgramCompilesAndRunsOnItsDevice) {
  wire::IfrtResponse compiled = Compile(kAddOne);
  ASSERT_EQ(Code(compiled), absl::StatusCode::kOk) << Message(compiled);
  const uint64_t executable = compiled.compile_response().loaded_executable_handle();
  ASSERT_EQ(Code(MakeArray(50, {1, 2, 3, 4}, 0)), absl::StatusCode::kOk);
  // Launched twice in a row, the second on the first's output, without waiting.
  ASSERT_EQ(Code(Execute(executable, {50}, 51, 61)), absl::StatusCode::kOk);
  ASSERT_EQ(Code(Execute(executable, {51}, 52, 62)), absl::StatusCode::kOk);
  EXPECT_EQ(Code(Ready({52})), absl::StatusCode::kOk);
  wire::IfrtRequest status;
  status.mutable_check_future_request()->set_future_handle(62);
  EXPECT_EQ(Code(Answer(status)), absl::StatusCode::kOk);
  absl::StatusOr<std::vector<float>> values = Fetch(52);
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_EQ(*values, (std::vector<float>{3, 4, 5, 6}));
  // Its argument on another device than the program's is refused, with a reason.
  ASSERT_EQ(Code(MakeArray(53, {1, 2, 3, 4}, 3)), absl::StatusCode::kOk);
  wire::IfrtResponse misplaced = Execute(executable, {53}, 54, 64);
  if (Code(misplaced) == absl::StatusCode::kOk) {
    EXPECT_FALSE(Fetch(54).ok());
  } else {
    EXPECT_FALSE(Message(misplaced).empty());
  }
}

TEST_P(SessionTest, ALaunchSaysWhenItsOutputsAreComputedSoReadinessIsAnsweredHere) {
  wire::IfrtResponse compiled = Compile(kAddOne);
  ASSERT_EQ(Code(compiled), absl::StatusCode::kOk) << Message(compiled);
  const uint64_t executable = compiled.compile_response().loaded_executable_handle();
  ASSERT_EQ(Code(MakeArray(70, {1, 2, 3, 4}, 0)), absl::StatusCode::kOk);
  ASSERT_EQ(Code(Execute(executable, {70}, 71, 81)), absl::StatusCode::kOk);
  EXPECT_EQ(Code(Ready({71})), absl::StatusCode::kOk);
  // The worker has said its outputs are computed: the proxy answers on the request's
  // own thread, without asking the worker.
  wire::IfrtRequest again;
  again.mutable_request_metadata()->set_op_id(next_op_++);
  again.mutable_check_value_ready_request()->add_value_handles(71);
  std::optional<wire::IfrtResponse> now = session_->Process(again);
  ASSERT_TRUE(now.has_value());
  EXPECT_EQ(Code(*now), absl::StatusCode::kOk);
  EXPECT_TRUE(now->has_check_value_ready_response());
}

TEST_P(SessionTest, ABrokenProgramIsAnErrorNotACrash) {
  wire::IfrtResponse compiled = Compile("module { this is not MLIR");
  EXPECT_NE(Code(compiled), absl::StatusCode::kOk);
  EXPECT_FALSE(Message(compiled).empty());
  // Compile options the plugin would abort on (found by fuzz_ifrt_request) are refused, by
  // the worker: what a fake cannot show.
  if (GetParam().protocol == 0) ExpectOptionsThePluginWouldAbortOnRefused();
  wire::IfrtRequest plugin;
  plugin.mutable_compile_request()->mutable_program()->set_type_name("xla::ifrt::PluginProgram");
  plugin.mutable_compile_request()->mutable_compile_options()->set_type_name(
      "xla::ifrt::PluginCompileOptions");
  plugin.mutable_compile_request()->mutable_program()->set_data(
      "__serialized_plugin_program {\"unknownRequest\": {}}");
  wire::IfrtResponse unknown = Answer(plugin);
  EXPECT_EQ(Code(unknown), absl::StatusCode::kInvalidArgument);
  // The client matches this text.
  EXPECT_NE(Message(unknown).find("Bad PluginProgram"), std::string::npos) << Message(unknown);
  wire::IfrtRequest custom;
  custom.mutable_compile_request()->mutable_program()->set_type_name(
      "xla::ifrt::CustomCallProgram");
  EXPECT_EQ(Code(Answer(custom)), absl::StatusCode::kUnimplemented);
}

TEST_P(SessionTest, CopiesMoveWorkerToWorkerAcrossSlices) {
  ASSERT_EQ(Code(MakeArray(80, {1, 2, 3, 4}, 0)), absl::StatusCode::kOk);
  wire::IfrtRequest copy;
  copy.mutable_copy_arrays_request()->add_array_handles(80);
  copy.mutable_copy_arrays_request()->add_device_ids(kDevicesPerWorker + 1);  // slice 1
  copy.mutable_copy_arrays_request()->add_result_handles(81);
  wire::IfrtResponse copied = Answer(copy);
  ASSERT_EQ(Code(copied), absl::StatusCode::kOk) << Message(copied);
  absl::StatusOr<std::vector<float>> values = Fetch(81);
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_EQ(*values, (std::vector<float>{1, 2, 3, 4}));
  // A copy of an array whose making failed fails the same way.
  ASSERT_NE(Code(MakeArray(82, {1, 2, 3, 4}, 99)), absl::StatusCode::kOk);
  copy.mutable_copy_arrays_request()->set_array_handles(0, 82);
  copy.mutable_copy_arrays_request()->set_result_handles(0, 83);
  EXPECT_NE(Code(Answer(copy)), absl::StatusCode::kOk);
}

TEST_P(SessionTest, RequestsOutOfOrderGetErrorsNotCrashes) {
  // A launch on an array deleted before it, an executable destroyed before its launch,
  // the same result handle twice.
  wire::IfrtResponse compiled = Compile(kAddOne);
  ASSERT_EQ(Code(compiled), absl::StatusCode::kOk) << Message(compiled);
  const uint64_t executable = compiled.compile_response().loaded_executable_handle();
  ASSERT_EQ(Code(MakeArray(90, {1, 2, 3, 4}, 0)), absl::StatusCode::kOk);
  wire::IfrtRequest remove;
  remove.mutable_delete_array_request()->add_array_handle(90);
  ASSERT_EQ(Code(Answer(remove)), absl::StatusCode::kOk);
  wire::IfrtResponse launched = Execute(executable, {90}, 91, 92);
  if (Code(launched) == absl::StatusCode::kOk) {
    EXPECT_FALSE(Fetch(91).ok());
  }
  ASSERT_EQ(Code(MakeArray(93, {1, 2, 3, 4}, 0)), absl::StatusCode::kOk);
  ASSERT_EQ(Code(Execute(executable, {93}, 94, 95)), absl::StatusCode::kOk);
  EXPECT_NE(Code(Execute(executable, {93}, 94, 96)), absl::StatusCode::kOk);  // 94 taken
  wire::IfrtRequest destruct;
  destruct.mutable_loaded_executable_destruct_request()->set_loaded_executable_handle(executable);
  ASSERT_EQ(Code(Answer(destruct)), absl::StatusCode::kOk);
  EXPECT_NE(Code(Answer(destruct)), absl::StatusCode::kOk);
  EXPECT_NE(Code(Execute(executable, {93}, 97, 98)), absl::StatusCode::kOk);
  // What was launched before the destruction still completes.
  absl::StatusOr<std::vector<float>> values = Fetch(94);
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_EQ(*values, (std::vector<float>{2, 3, 4, 5}));
}

TEST_P(SessionTest, ALostWorkerFailsWhatTouchesItsSliceWithDataLoss) {
  ASSERT_EQ(Code(MakeArray(70, {1, 2, 3, 4}, 0)), absl::StatusCode::kOk);  // slice 0
  ASSERT_EQ(Code(MakeArray(71, {1, 2, 3, 4}, kDevicesPerWorker)),
            absl::StatusCode::kOk);  // slice 1
  EXPECT_EQ(Code(Ready({70, 71})), absl::StatusCode::kOk);
  fleet_.StopWorker(1);
  // In process, calls must not reach a stopped server (gRPC's in-process transport
  // crashes on them): touch slice 1 only once the proxy has seen it go.
  ASSERT_TRUE(fleet_.WaitDown(1));
  // Reads of the lost slice fail with DATA_LOSS naming it, once the loss is seen.
  absl::Status lost;
  for (int i = 0; i < 100 && lost.ok(); ++i) {
    absl::StatusOr<std::vector<float>> fetched = Fetch(71);
    if (!fetched.ok()) lost = fetched.status();
    if (lost.ok()) absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_EQ(lost.code(), absl::StatusCode::kDataLoss) << lost;
  EXPECT_NE(lost.message().find("slice 1"), std::string::npos) << lost;
  // Slice 0 goes on.
  absl::StatusOr<std::vector<float>> values = Fetch(70);
  ASSERT_TRUE(values.ok()) << values.status();
  EXPECT_EQ(*values, (std::vector<float>{1, 2, 3, 4}));
  // A new array there fails too: at once, or (made while its bytes arrive) when read.
  wire::IfrtResponse made = MakeArray(72, {9, 9, 9, 9}, kDevicesPerWorker + 1);
  if (Code(made) == absl::StatusCode::kOk) {
    EXPECT_EQ(Fetch(72).status().code(), absl::StatusCode::kDataLoss);
  } else {
    EXPECT_EQ(Code(made), absl::StatusCode::kDataLoss) << Message(made);
  }
}

// Faults a real worker cannot be made to show on cue, through the fakes.
class SessionFaultTest : public SessionTest {
 protected:
  WorkerConnection* ConnectionOf(int64_t device) {
    for (const DeviceEntry& entry : fleet_.fleet()->Devices()) {
      if (entry.info.global_id() == device) return entry.worker;
    }
    return nullptr;
  }
  // Waits up to 10 s for the proxy to see slice 1's worker up under its present boot.
  bool WaitUpAgain() {
    WorkerConnection* connection = ConnectionOf(kDevicesPerWorker);
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (absl::Now() < deadline) {
      if (connection->up() && connection->boot_id() == fleet_.fake(1)->boot_id()) return true;
      absl::SleepFor(absl::Milliseconds(5));
    }
    return false;
  }
  // Sends `request` with a fresh op id, to be answered later; its op id.
  uint64_t Start(wire::IfrtRequest request) {
    const uint64_t op_id = next_op_++;
    request.mutable_request_metadata()->set_op_id(op_id);
    std::optional<wire::IfrtResponse> now = session_->Process(request);
    EXPECT_FALSE(now.has_value()) << "answered at once";
    return op_id;
  }
};

TEST_P(SessionFaultTest, ACrashFailsExactlyItsSliceWithDataLoss) {
  ASSERT_EQ(Code(MakeArray(70, {1, 2, 3, 4}, 0)), absl::StatusCode::kOk);
  ASSERT_EQ(Code(MakeArray(71, {1, 2, 3, 4}, kDevicesPerWorker)), absl::StatusCode::kOk);
  EXPECT_EQ(Code(Ready({70, 71})), absl::StatusCode::kOk);
  fleet_.fake(1)->Crash();
  // Whichever the proxy sees first, the stream's end or a refused call, the answer is one.
  absl::StatusOr<std::vector<float>> lost = Fetch(71);
  EXPECT_EQ(lost.status().code(), absl::StatusCode::kDataLoss) << lost.status();
  EXPECT_NE(lost.status().message().find("slice 1"), std::string::npos) << lost.status();
  EXPECT_EQ(Code(Ready({70, 71})), absl::StatusCode::kDataLoss);
  absl::StatusOr<std::vector<float>> kept = Fetch(70);
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(*kept, (std::vector<float>{1, 2, 3, 4}));
}

TEST_P(SessionFaultTest, ARestartIsANewEpochWhatTheOldOneMadeIsLostForGood) {
  wire::IfrtResponse compiled = Compile(kAddOne);  // on device 0: slice 0
  ASSERT_EQ(Code(compiled), absl::StatusCode::kOk) << Message(compiled);
  ASSERT_EQ(Code(MakeArray(71, {1, 2, 3, 4}, kDevicesPerWorker)), absl::StatusCode::kOk);
  EXPECT_EQ(Code(Ready({71})), absl::StatusCode::kOk);
  const std::string old_boot = fleet_.fake(1)->boot_id();
  fleet_.fake(1)->Restart();
  ASSERT_NE(fleet_.fake(1)->boot_id(), old_boot);
  ASSERT_TRUE(WaitUpAgain()) << "the proxy never saw the new boot";
  // Up again, and the same worker process would not have it anyway: DATA_LOSS, not NOT_FOUND.
  absl::StatusOr<std::vector<float>> lost = Fetch(71);
  EXPECT_EQ(lost.status().code(), absl::StatusCode::kDataLoss) << lost.status();
  // What is made in the new epoch lives, and moves between the slices.
  ASSERT_EQ(Code(MakeArray(72, {5, 6, 7, 8}, kDevicesPerWorker)), absl::StatusCode::kOk);
  absl::StatusOr<std::vector<float>> made = Fetch(72);
  ASSERT_TRUE(made.ok()) << made.status();
  EXPECT_EQ(*made, (std::vector<float>{5, 6, 7, 8}));
  wire::IfrtRequest copy;
  copy.mutable_copy_arrays_request()->add_array_handles(72);
  copy.mutable_copy_arrays_request()->add_device_ids(0);
  copy.mutable_copy_arrays_request()->add_result_handles(73);
  ASSERT_EQ(Code(Answer(copy)), absl::StatusCode::kOk);
  const uint64_t executable = compiled.compile_response().loaded_executable_handle();
  ASSERT_EQ(Code(Execute(executable, {73}, 74, 75)), absl::StatusCode::kOk);
  absl::StatusOr<std::vector<float>> ran = Fetch(74);
  ASSERT_TRUE(ran.ok()) << ran.status();
  EXPECT_EQ(*ran, (std::vector<float>{6, 7, 8, 9}));
}

TEST_P(SessionFaultTest, AWorkerThatStopsReadingIsEndedAsHungAndWhatWaitedFails) {
  ASSERT_EQ(Code(MakeArray(71, {1, 2, 3, 4}, kDevicesPerWorker)), absl::StatusCode::kOk);
  EXPECT_EQ(Code(Ready({71})), absl::StatusCode::kOk);
  fleet_.fake(1)->StopReading();
  const int64_t carried_out = fleet_.fake(1)->operations();
  // Still heartbeating, so only the stalled write tells: a readiness check waits on it.
  ASSERT_EQ(Code(MakeArray(72, {1, 2, 3, 4}, kDevicesPerWorker)), absl::StatusCode::kOk);
  wire::IfrtRequest ready;
  ready.mutable_check_value_ready_request()->add_value_handles(72);
  // The first is held by the worker; the transport does not take the second.
  const uint64_t waiting = Start(ready);
  const uint64_t stuck = Start(ready);
  WorkerConnection* connection = ConnectionOf(kDevicesPerWorker);
  // What the fleet's housekeeping does once a second with its five-minute limit. Watched
  // by its epoch, the first of a new fleet: the fleet's probe may bring the worker back
  // (it still answers GetInfo), in the next epoch, before the connection is seen down.
  constexpr uint64_t kFirstEpoch = 1;
  ASSERT_TRUE(connection->CheckEpoch(kFirstEpoch).ok());
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (connection->CheckEpoch(kFirstEpoch).ok() && absl::Now() < deadline) {
    connection->CheckStall(absl::Milliseconds(100));
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_FALSE(connection->CheckEpoch(kFirstEpoch).ok()) << "a write held for 100 ms was not seen";
  std::optional<wire::IfrtResponse> answer = answers_.Wait(waiting);
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ(Code(*answer), absl::StatusCode::kDataLoss) << Message(*answer);
  EXPECT_NE(Message(*answer).find("hung"), std::string::npos) << Message(*answer);
  answer = answers_.Wait(stuck);
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ(Code(*answer), absl::StatusCode::kDataLoss) << Message(*answer);
  EXPECT_EQ(fleet_.fake(1)->operations(), carried_out);
  // Slice 0 goes on.
  ASSERT_EQ(Code(MakeArray(70, {1, 2, 3, 4}, 0)), absl::StatusCode::kOk);
  EXPECT_TRUE(Fetch(70).ok());
  // The fleet's probe may have brought slice 1 back (it answers GetInfo): reading again,
  // it lets the session end at once instead of after the session's 30 s bound for it.
  fleet_.fake(1)->ResumeReading();
}

INSTANTIATE_TEST_SUITE_P(Fakes, SessionFaultTest, ::testing::ValuesIn(FakesAtEveryProtocol()),
                         BackendName);

INSTANTIATE_TEST_SUITE_P(Workers, SessionTest, ::testing::ValuesIn(EveryBackend()), BackendName);

}  // namespace
}  // namespace switchyard::proxy
