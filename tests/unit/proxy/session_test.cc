// Session handlers against a whole fleet in this process (support/in_process_fleet.h:
// a real RM and two real workers, the real Executor and BufferStore, no socket). Requests are built
// the way the IFRT proxy client builds them; answers are checked as the client would read them,
// including the ones that come later through the sink.

#include "proxy/session.h"

#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <vector>

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

class SessionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (test_support::TestPlugin() == nullptr) GTEST_SKIP() << "SWITCHYARD_TEST_PLUGIN is not set";
    absl::Status started = fleet_.Start(2, kDevicesPerWorker);
    ASSERT_TRUE(started.ok()) << started;
    store_ = std::make_shared<HostBufferStore>();
    sink_ = std::make_shared<ResponseSink>(
        [this](const wire::IfrtResponse& response) { return answers_.Write(response); }, [] {});
    session_ = std::make_unique<Session>(
        7, Version{kProtocolMax, kSerDesMax}, fleet_.fleet(), store_, [] { return false; }, sink_);
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

  test_support::InProcessFleet fleet_;
  std::shared_ptr<HostBufferStore> store_;
  Answers answers_;
  std::shared_ptr<ResponseSink> sink_;
  std::unique_ptr<Session> session_;
  wire::IfrtResponse init_;
  uint64_t next_op_ = 1;
};

TEST_F(SessionTest, InitListsEveryDeviceOfEverySlice) {
  ASSERT_EQ(Code(init_), absl::StatusCode::kOk) << Message(init_);
  const wire::InitResponse& init = init_.init_response();
  EXPECT_EQ(init.all_devices_size(), 2 * kDevicesPerWorker);
  EXPECT_EQ(init.runtime_type(), "pathways");  // the client prefixes "proxy/"
  EXPECT_EQ(init.session_id(), 7u);
}

TEST_F(SessionTest, AnArrayGoesToItsWorkerAndComesBack) {
  for (int64_t device : {0, 3}) {
    const uint64_t handle = 10 + device;
    ASSERT_EQ(Code(MakeArray(handle, {1, 2, 3, 4}, device)), absl::StatusCode::kOk);
    EXPECT_EQ(Code(Ready({handle})), absl::StatusCode::kOk);
    absl::StatusOr<std::vector<float>> values = Fetch(handle);
    ASSERT_TRUE(values.ok()) << values.status();
    EXPECT_EQ(*values, (std::vector<float>{1, 2, 3, 4}));
  }
}

TEST_F(SessionTest, UnknownHandlesAreErrorsAndTheSessionGoesOn) {
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

TEST_F(SessionTest, AFailedRequestBindsItsErrorToTheHandlesItWouldHaveMade) {
  // A device that does not exist: the array handle carries the error.
  wire::IfrtResponse made = MakeArray(30, {1, 2, 3, 4}, 99);
  ASSERT_NE(Code(made), absl::StatusCode::kOk);
  absl::StatusOr<std::vector<float>> fetched = Fetch(30);
  ASSERT_FALSE(fetched.ok());
  EXPECT_EQ(fetched.status().code(), Code(made)) << fetched.status();
  EXPECT_EQ(Code(Ready({30})), Code(made));
}

TEST_F(SessionTest, PastTheArrayQuotaRefusedHandlesSayWhyButOnlySoMany) {
  SessionPolicy policy;
  policy.max_arrays = 2;
  session_ = std::make_unique<Session>(
      8, Version{kProtocolMax, kSerDesMax}, fleet_.fleet(), store_, [] { return false; }, sink_,
      policy);
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

TEST_F(SessionTest, ADeletedArrayIsGoneAndSaysSo) {
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

TEST_F(SessionTest, AProgramCompilesAndRunsOnItsDevice) {
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

TEST_F(SessionTest, ALaunchSaysWhenItsOutputsAreComputedSoReadinessIsAnsweredHere) {
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

TEST_F(SessionTest, ABrokenProgramIsAnErrorNotACrash) {
  wire::IfrtResponse compiled = Compile("module { this is not MLIR");
  EXPECT_NE(Code(compiled), absl::StatusCode::kOk);
  EXPECT_FALSE(Message(compiled).empty());
  // Compile options the plugin would abort on (found by fuzz_ifrt_request) are refused.
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

TEST_F(SessionTest, CopiesMoveWorkerToWorkerAcrossSlices) {
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

TEST_F(SessionTest, RequestsOutOfOrderGetErrorsNotCrashes) {
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

TEST_F(SessionTest, ALostWorkerFailsWhatTouchesItsSliceWithDataLoss) {
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

}  // namespace
}  // namespace switchyard::proxy
