// A lane's stream over gRPC's async API against an in-process Worker.Dispatch server:
// what is posted arrives in order and every answer comes back, on a pool whose threads
// do not grow with the streams; a half-close ends the stream once the server has read
// everything; a server that stops reading holds a write (what CheckStall watches) until
// the stream is cancelled; a worker that never answers costs no thread and ends on cancel.

#include "proxy/lane_stream.h"

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/completion_pool.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"

namespace switchyard::proxy {
namespace {

// Answers every operation with its seq, and records the order per stream; with `stall`
// set it reads nothing and holds the stream until the client cancels it.
class FakeDispatch final : public Worker::Service {
 public:
  explicit FakeDispatch(bool stall = false) : stall_(stall) {}

  grpc::Status Dispatch(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<DispatchResponse, DispatchRequest>* stream) override {
    if (stall_) {
      const absl::Time deadline = absl::Now() + absl::Seconds(30);
      while (!context->IsCancelled() && absl::Now() < deadline) {
        absl::SleepFor(absl::Milliseconds(5));
      }
      return grpc::Status::CANCELLED;
    }
    DispatchRequest op;
    uint64_t last = 0;
    bool ordered = true;
    while (stream->Read(&op)) {
      ordered = ordered && op.seq() > last;
      last = op.seq();
      DispatchResponse answer;
      answer.set_seq(op.seq());
      if (!stream->Write(answer)) break;
    }
    absl::MutexLock lock(&mutex_);
    ++streams_ended_;
    all_ordered_ = all_ordered_ && ordered;
    return grpc::Status::OK;
  }

  int streams_ended() {
    absl::MutexLock lock(&mutex_);
    return streams_ended_;
  }
  bool all_ordered() {
    absl::MutexLock lock(&mutex_);
    return all_ordered_;
  }

 private:
  const bool stall_;
  absl::Mutex mutex_;
  int streams_ended_ ABSL_GUARDED_BY(mutex_) = 0;
  bool all_ordered_ ABSL_GUARDED_BY(mutex_) = true;
};

class Server {
 public:
  explicit Server(Worker::Service* service) {
    grpc::ServerBuilder builder;
    int port = 0;  // chosen by the listener
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(service);
    server_ = builder.BuildAndStart();
    stub_ = Worker::NewStub(
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  }
  ~Server() { server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(5))); }
  Worker::Stub* stub() { return stub_.get(); }

 private:
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<Worker::Stub> stub_;
};

// What one stream's callbacks saw.
struct Seen {
  std::atomic<int> answers{0};
  std::atomic<bool> answers_ordered{true};
  std::atomic<uint64_t> last{0};
  absl::Notification ended;
  absl::Status finished;
};

std::shared_ptr<LaneStream> Open(Worker::Stub* stub, CompletionPool* pool, Seen* seen) {
  return LaneStream::Start(
      stub, std::make_shared<grpc::ClientContext>(), pool->Pick(),
      [seen](DispatchResponse& answer) {
        if (answer.seq() <= seen->last.load()) seen->answers_ordered = false;
        seen->last = answer.seq();
        ++seen->answers;
      },
      [seen](absl::Status finished) {
        seen->finished = std::move(finished);
        seen->ended.Notify();
      });
}

DispatchRequest Op(uint64_t seq) {
  DispatchRequest op;
  op.set_seq(seq);
  op.mutable_await_buffers();
  return op;
}

TEST(LaneStreamTest, PostsGoOutInOrderAndEveryAnswerComesOnAPoolOfTwoThreads) {
  FakeDispatch service;
  Server server(&service);
  CompletionPool pool(2, "sy-lanes");
  constexpr int kStreams = 16;
  constexpr int kOps = 500;
  std::vector<Seen> seen(kStreams);
  std::vector<std::shared_ptr<LaneStream>> streams;
  for (int s = 0; s < kStreams; ++s) streams.push_back(Open(server.stub(), &pool, &seen[s]));
  for (int i = 1; i <= kOps; ++i) {
    for (int s = 0; s < kStreams; ++s) {
      bool claimed = false;
      ASSERT_TRUE(streams[s]->Post(Op(i), i % 2 == 0 ? &claimed : nullptr));
      if (claimed) streams[s]->StartClaimed();
    }
  }
  for (int s = 0; s < kStreams; ++s) {
    EXPECT_TRUE(streams[s]->AwaitIdle(absl::Seconds(30)));
    streams[s]->CloseWrites();
    EXPECT_FALSE(streams[s]->Post(Op(kOps + 1))) << "posted after the half-close";
  }
  for (int s = 0; s < kStreams; ++s) {
    ASSERT_TRUE(seen[s].ended.WaitForNotificationWithTimeout(absl::Seconds(30)));
    streams[s]->AwaitDone();
    EXPECT_TRUE(streams[s]->done());
    EXPECT_TRUE(seen[s].finished.ok()) << seen[s].finished;
    EXPECT_EQ(seen[s].answers.load(), kOps);
    EXPECT_TRUE(seen[s].answers_ordered.load());
  }
  EXPECT_EQ(service.streams_ended(), kStreams);
  EXPECT_TRUE(service.all_ordered());
}

TEST(LaneStreamTest, AServerThatStopsReadingHoldsAWriteUntilTheStreamIsCancelled) {
  FakeDispatch service(/*stall=*/true);
  Server server(&service);
  CompletionPool pool(1, "sy-lanes");
  Seen seen;
  std::shared_ptr<LaneStream> stream = Open(server.stub(), &pool, &seen);
  // Far past any flow-control window: ~1 MiB an operation.
  DispatchRequest big = Op(1);
  for (int i = 0; i < 128 * 1024; ++i) big.add_deletes_before(UINT64_MAX - i);
  for (int i = 1; i <= 64; ++i) {
    big.set_seq(i);
    ASSERT_TRUE(stream->Post(big));
  }
  EXPECT_FALSE(stream->AwaitIdle(absl::Milliseconds(300)));
  const int64_t started = stream->write_started_ns();
  EXPECT_NE(started, 0);
  EXPECT_LE(started,
            absl::GetCurrentTimeNanos() - absl::ToInt64Nanoseconds(absl::Milliseconds(200)));
  stream->Cancel();
  ASSERT_TRUE(seen.ended.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(seen.finished.code(), absl::StatusCode::kCancelled) << seen.finished;
  EXPECT_FALSE(stream->Post(Op(100))) << "posted after the stream failed";
  stream->AwaitDone();
}

TEST(LaneStreamTest, AStreamToAnAddressThatNeverAnswersEndsOnCancel) {
  // Port 1 on loopback: refused at once, or, on some kernels, a connect that hangs.
  auto stub =
      Worker::NewStub(grpc::CreateChannel("127.0.0.1:1", grpc::InsecureChannelCredentials()));
  CompletionPool pool(1, "sy-lanes");
  Seen seen;
  std::shared_ptr<LaneStream> stream = Open(stub.get(), &pool, &seen);
  (void)stream->Post(Op(1));  // queued behind the start, or refused once it failed
  stream->Cancel();
  ASSERT_TRUE(seen.ended.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_FALSE(seen.finished.ok());
  stream->AwaitDone();
}

}  // namespace
}  // namespace switchyard::proxy
