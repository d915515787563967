// The worker's half of host callbacks: a call goes up its stream, the device thread
// waits, and the proxy's answer (or the stream's end) releases it. Calls are made
// directly through the handler a launch's context would run, with host buffers.

#include "worker/host_callbacks.h"

#include <gtest/gtest.h>

#include <cstring>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "unit/pjrt/test_plugin.h"

namespace switchyard::worker {
namespace {

class HostCallbacksTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto plugin = pjrt::Plugin::Load(pjrt::TestPluginPath());
    ASSERT_TRUE(plugin.ok()) << plugin.status();
    auto callbacks = HostCallbacks::Create(**plugin, "cpu");
    ASSERT_TRUE(callbacks.ok()) << callbacks.status();
    callbacks_ = std::move(callbacks).value();
    stream_ = callbacks_->NewStream([this](const DispatchResponse& response) {
      absl::MutexLock lock(&mutex_);
      if (!accept_) return false;
      sent_.push_back(response.host_callback());
      return true;
    });
  }

  // The call the stream carried, once it has.
  HostCallbackCall AwaitSent() {
    absl::MutexLock lock(&mutex_);
    mutex_.Await(absl::Condition(
        +[](std::vector<HostCallbackCall>* sent) { return !sent->empty(); }, &sent_));
    HostCallbackCall call = sent_.front();
    sent_.erase(sent_.begin());
    return call;
  }

  // A call with one f32[2] operand and one f32[2] result, in host memory.
  struct Frame {
    float in[2] = {1.5f, -2.0f};
    float out[2] = {0, 0};
    pjrt::FfiCall call;
    Frame() {
      call.index = 3;
      call.args.push_back({pjrt::DType::kF32, false, {2}, in, sizeof(in)});
      call.rets.push_back({pjrt::DType::kF32, false, {2}, out, sizeof(out)});
    }
  };

  static HostCallbackResult Answer(uint64_t call_id, const float (&values)[2]) {
    HostCallbackResult result;
    result.set_call_id(call_id);
    HostArray* array = result.add_results();
    array->set_dtype(static_cast<int>(pjrt::DType::kF32));
    array->add_dims(2);
    array->set_data(reinterpret_cast<const char*>(values), sizeof(values));
    return result;
  }

  std::unique_ptr<HostCallbacks> callbacks_;
  std::shared_ptr<HostCallbacks::Stream> stream_;
  absl::Mutex mutex_;
  bool accept_ ABSL_GUARDED_BY(mutex_) = true;
  std::vector<HostCallbackCall> sent_ ABSL_GUARDED_BY(mutex_);
};

TEST_F(HostCallbacksTest, ACallGoesUpItsStreamAndTheAnswerFillsTheResults) {
  Frame frame;
  absl::Status status;
  std::thread device([&] { status = callbacks_->Handler("key-1", stream_)(frame.call); });
  HostCallbackCall call = AwaitSent();
  EXPECT_EQ(call.key(), "key-1");
  EXPECT_EQ(call.index(), 3u);
  ASSERT_EQ(call.args_size(), 1);
  EXPECT_EQ(call.args(0).data().size(), sizeof(frame.in));
  float sent[2];
  std::memcpy(sent, call.args(0).data().data(), sizeof(sent));
  EXPECT_EQ(sent[0], 1.5f);
  ASSERT_EQ(call.results_size(), 1);
  EXPECT_TRUE(call.results(0).data().empty());
  EXPECT_EQ(callbacks_->waiting(), 1);

  ASSERT_TRUE(callbacks_->Return(Answer(call.call_id(), {7.0f, 8.0f})).ok());
  device.join();
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_EQ(frame.out[0], 7.0f);
  EXPECT_EQ(frame.out[1], 8.0f);
  EXPECT_EQ(callbacks_->waiting(), 0);
  // Answered once only.
  EXPECT_TRUE(absl::IsNotFound(callbacks_->Return(Answer(call.call_id(), {1.0f, 1.0f}))));
}

TEST_F(HostCallbacksTest, AnUnknownCallIdIsNotFound) {
  EXPECT_TRUE(absl::IsNotFound(callbacks_->Return(Answer(12345, {1.0f, 1.0f}))));
}

TEST_F(HostCallbacksTest, TheClientsErrorFailsTheCall) {
  Frame frame;
  absl::Status status;
  std::thread device([&] { status = callbacks_->Handler("k", stream_)(frame.call); });
  HostCallbackResult result;
  result.set_call_id(AwaitSent().call_id());
  result.set_code(static_cast<int>(absl::StatusCode::kInternal));
  result.set_message("ValueError: boom");
  ASSERT_TRUE(callbacks_->Return(result).ok());
  device.join();
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(status.message(), "ValueError: boom");
}

TEST_F(HostCallbacksTest, AResultThatDoesNotMatchIsRefusedAndNothingIsWritten) {
  struct Case {
    const char* name;
    std::function<void(HostCallbackResult&)> spoil;
  };
  const Case cases[] = {
      {"short data",
       [](HostCallbackResult& r) { r.mutable_results(0)->mutable_data()->resize(4); }},
      {"long data",
       [](HostCallbackResult& r) { r.mutable_results(0)->mutable_data()->append("x"); }},
      {"dtype", [](HostCallbackResult& r) { r.mutable_results(0)->set_dtype(5); }},
      {"dims", [](HostCallbackResult& r) { r.mutable_results(0)->set_dims(0, 1); }},
      {"count", [](HostCallbackResult& r) { r.add_results(); }},
      {"none", [](HostCallbackResult& r) { r.clear_results(); }},
  };
  for (const Case& c : cases) {
    Frame frame;
    absl::Status status;
    std::thread device([&] { status = callbacks_->Handler("k", stream_)(frame.call); });
    HostCallbackResult result = Answer(AwaitSent().call_id(), {7.0f, 8.0f});
    c.spoil(result);
    ASSERT_TRUE(callbacks_->Return(result).ok()) << c.name;
    device.join();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.name << ": " << status;
    EXPECT_EQ(frame.out[0], 0.0f) << c.name;
  }
}

TEST_F(HostCallbacksTest, TheStreamsEndReleasesWaitingCallsAndRefusesNewOnes) {
  Frame frame;
  absl::Status status;
  std::thread device([&] { status = callbacks_->Handler("k", stream_)(frame.call); });
  HostCallbackCall call = AwaitSent();
  stream_->Close();
  device.join();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_TRUE(absl::IsNotFound(callbacks_->Return(Answer(call.call_id(), {1.0f, 1.0f}))));

  Frame later;
  EXPECT_EQ(callbacks_->Handler("k", stream_)(later.call).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(callbacks_->waiting(), 0);
}

TEST_F(HostCallbacksTest, AStreamThatCannotSendFailsTheCallAtOnce) {
  {
    absl::MutexLock lock(&mutex_);
    accept_ = false;
  }
  Frame frame;
  EXPECT_EQ(callbacks_->Handler("k", stream_)(frame.call).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(callbacks_->waiting(), 0);
}

TEST_F(HostCallbacksTest, ElementTypesSwitchyardCannotCarryAreUnimplemented) {
  Frame frame;
  frame.call.args[0].dtype = static_cast<pjrt::DType>(35);  // f6e3m2fn: not carried
  EXPECT_EQ(callbacks_->Handler("k", stream_)(frame.call).code(), absl::StatusCode::kUnimplemented);
}

TEST_F(HostCallbacksTest, TokensTravelWithoutData) {
  Frame frame;
  frame.call.args.insert(frame.call.args.begin(), pjrt::FfiBuffer{pjrt::DType::kInvalid, true});
  frame.call.rets.insert(frame.call.rets.begin(), pjrt::FfiBuffer{pjrt::DType::kInvalid, true});
  absl::Status status;
  std::thread device([&] { status = callbacks_->Handler("k", stream_)(frame.call); });
  HostCallbackCall call = AwaitSent();
  ASSERT_EQ(call.args_size(), 2);
  EXPECT_TRUE(call.args(0).token());
  EXPECT_TRUE(call.results(0).token());
  HostCallbackResult result = Answer(call.call_id(), {3.0f, 4.0f});
  HostArray token;
  token.set_token(true);
  result.mutable_results()->AddAllocated(new HostArray(token));
  // Results in order: the token first.
  std::swap(*result.mutable_results(0), *result.mutable_results(1));
  ASSERT_TRUE(callbacks_->Return(result).ok());
  device.join();
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_EQ(frame.out[1], 4.0f);
}

TEST(HostCallbacksCreateTest, OnlyCpuPluginsServeHostCallbacks) {
  auto plugin = pjrt::Plugin::Load(pjrt::TestPluginPath());
  ASSERT_TRUE(plugin.ok()) << plugin.status();
  EXPECT_EQ(HostCallbacks::Create(**plugin, "cuda").status().code(),
            absl::StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace switchyard::worker
