// The connection to one host, driven the way the fleet drives it, against a worker
// address where nothing listens: epochs end exactly once, everything waiting gets
// DATA_LOSS exactly once, and the host comes back only as the RM's view allows.

#include "proxy/worker_connection.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "switchyard/worker.pb.h"

namespace switchyard::proxy {
namespace {

// Port 1 on loopback: nothing listens, so every stream fails at once.
HostView Healthy(const std::string& boot) { return HostView{"127.0.0.1:1", boot, true, false}; }

DispatchRequest DeleteOp(uint64_t id) {
  DispatchRequest op;
  op.mutable_delete_buffers()->add_buffer_ids(id);
  return op;
}

// Waits until the connection has noticed its stream failed.
void WaitDown(const WorkerConnection& worker) {
  for (int i = 0; i < 500 && worker.up(); ++i) absl::SleepFor(absl::Milliseconds(10));
  ASSERT_FALSE(worker.up());
}

TEST(WorkerConnectionTest, AHostThatHasNotJoinedRefusesAtOnce) {
  WorkerConnection worker(3, 0);
  absl::StatusOr<WorkerConnection::Ticket> sent = worker.Send(0, DeleteOp(1));
  EXPECT_EQ(sent.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(sent.status().message().find("slice 3 host 0"), std::string::npos) << sent.status();
}

TEST(WorkerConnectionTest, OperationsToALostWorkerFailOnceEachWithDataLoss) {
  WorkerConnection worker(1, 0);
  worker.Update(Healthy("boot-a"));
  ASSERT_TRUE(worker.up());
  std::atomic<int> answers{0}, data_loss{0};
  int refused = 0;
  for (int i = 0; i < 300; ++i) {
    absl::StatusOr<WorkerConnection::Ticket> sent =
        worker.Send(0, DeleteOp(i + 1), [&](absl::Status status) {
          ++answers;
          if (absl::IsDataLoss(status)) ++data_loss;
        });
    if (!sent.ok()) {
      EXPECT_EQ(sent.status().code(), absl::StatusCode::kDataLoss);
      ++refused;  // sent after the loss was known: refused, `done` not called
    }
  }
  WaitDown(worker);
  // The epoch's reader thread fails what waited, once it sees its stream end.
  for (int i = 0; i < 500 && answers.load() + refused < 300; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(answers.load() + refused, 300);
  EXPECT_EQ(data_loss.load(), answers.load());
  EXPECT_EQ(worker.Flush(0, absl::Seconds(5)).code(), absl::StatusCode::kDataLoss);
}

TEST(WorkerConnectionTest, ALostEpochStaysLostAndANewBootComesUpAtOnce) {
  WorkerConnection worker(2, 1);
  worker.Update(Healthy("boot-a"));
  absl::StatusOr<WorkerConnection::Ticket> first = worker.Send(0, DeleteOp(1));
  ASSERT_TRUE(first.ok());
  WaitDown(worker);
  absl::Status lost = worker.CheckEpoch(first->epoch);
  EXPECT_EQ(lost.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(lost.message().find("slice 2 host 1"), std::string::npos) << lost;

  // The RM still lists the boot that was lost: only a probe may bring it back, and
  // nothing answers one.
  worker.Update(Healthy("boot-a"));
  EXPECT_FALSE(worker.up());
  worker.ProbeIfDown();
  EXPECT_FALSE(worker.up());

  // A restarted worker (a new boot) is used at once, in a new epoch; what the old one
  // held stays lost.
  worker.Update(Healthy("boot-b"));
  ASSERT_TRUE(worker.up());
  EXPECT_EQ(worker.boot_id(), "boot-b");
  EXPECT_EQ(worker.CheckEpoch(first->epoch).code(), absl::StatusCode::kDataLoss);
  absl::StatusOr<WorkerConnection::Ticket> second = worker.Send(0, DeleteOp(2));
  ASSERT_TRUE(second.ok());
  EXPECT_GT(second->epoch, first->epoch);
}

TEST(WorkerConnectionTest, TheRmReportingAHostDownEndsItsEpoch) {
  WorkerConnection worker(0, 0);
  worker.Update(Healthy("boot-a"));
  ASSERT_TRUE(worker.up());
  worker.Update(HostView{"127.0.0.1:1", "boot-a", /*healthy=*/false, false});
  EXPECT_FALSE(worker.up());
  absl::Status down = worker.Flush(0, absl::Seconds(5));
  EXPECT_EQ(down.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(down.message().find("resource manager reports it down"), std::string::npos) << down;
}

// What waited on an epoch often fails after the host is back (its streams end
// asynchronously): it still learns why that epoch ended, e.g. that the host hung.
TEST(WorkerConnectionTest, AnEpochThatEndedKeepsWhyAfterTheHostIsBack) {
  WorkerConnection worker(0, 0);
  worker.Update(Healthy("boot-a"));
  ASSERT_TRUE(worker.up());
  worker.Update(HostView{"127.0.0.1:1", "boot-a", /*healthy=*/false, false});
  worker.Update(Healthy("boot-b"));
  ASSERT_TRUE(worker.up());
  constexpr uint64_t kFirstEpoch = 1;
  absl::Status lost = worker.CheckEpoch(kFirstEpoch);
  EXPECT_EQ(lost.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(lost.message(),
            "lost with slice 0 host 0 (worker 127.0.0.1:1) when epoch 1 ended: "
            "the resource manager reports it down");
}

TEST(WorkerConnectionTest, ARestartSeenByTheRmEndsTheEpochAndComesUpAgain) {
  WorkerConnection worker(0, 0);
  worker.Update(Healthy("boot-a"));
  const uint64_t epoch = worker.Send(0, DeleteOp(1)).value_or(WorkerConnection::Ticket{}).epoch;
  worker.Update(Healthy("boot-b"));  // before the stream failure is noticed, maybe
  EXPECT_EQ(worker.CheckEpoch(epoch).code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(worker.boot_id(), "boot-b");
}

TEST(WorkerConnectionTest, NewsFromARestartedRmIsIgnored) {
  WorkerConnection worker(0, 0);
  worker.Update(HostView{"127.0.0.1:1", "boot-a", false, /*rejoining=*/true});
  EXPECT_FALSE(worker.up());
  worker.Update(Healthy("boot-a"));
  ASSERT_TRUE(worker.up());
  worker.Update(HostView{"127.0.0.1:1", "", false, /*rejoining=*/true});
  EXPECT_TRUE(worker.up());
}

TEST(WorkerConnectionTest, AwaitOnADownHostAnswersAtOnce) {
  WorkerConnection worker(0, 0);
  absl::Notification done;
  absl::Status status;
  worker.AwaitThen(0, {1, 2}, [&](absl::Status s) {
    status = s;
    done.Notify();
  });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(1)));
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
}

// A loopback port whose accept queue is full and never served: the kernel drops new
// connections' SYNs, so a connect hangs as it does to a dark host.
class DarkPort {
 public:
  DarkPort() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t size = sizeof(address);
    if (bind(fd_, reinterpret_cast<sockaddr*>(&address), size) != 0 || listen(fd_, 0) != 0 ||
        getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &size) != 0) {
      return;
    }
    port_ = ntohs(address.sin_port);
    for (int i = 0; i < 2; ++i) {  // fill the queue
      fillers_.push_back(socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0));
      (void)connect(fillers_.back(), reinterpret_cast<sockaddr*>(&address), size);
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
  ~DarkPort() {
    for (int fd : fillers_) close(fd);
    close(fd_);
  }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
  std::vector<int> fillers_;
};

TEST(WorkerConnectionTest, OpeningLanesToAWorkerThatDoesNotAnswerHoldsNoSenderUp) {
  DarkPort dark;
  ASSERT_NE(dark.port(), 0);
  WorkerConnection worker(0, 0);
  worker.Update(HostView{absl::StrCat("127.0.0.1:", dark.port()), "boot-a", true, false});
  ASSERT_TRUE(worker.up());
  // Each session's first operation opens its lane; none waits for the connection. Some
  // kernels refuse the connect at once instead of dropping it; then the worker is lost and
  // the answers are DATA_LOSS, still at once, which is what this test is about.
  auto at_once = [](const absl::Status& status) {
    return status.ok() || status.code() == absl::StatusCode::kDataLoss;
  };
  const absl::Time start = absl::Now();
  for (uint64_t lane = 1; lane <= 4; ++lane) {
    const absl::Status sent = worker.Send(lane, DeleteOp(lane)).status();
    EXPECT_TRUE(at_once(sent)) << sent;
  }
  grpc::ClientContext context;
  const absl::Status prepared = worker.PrepareCall(&context).status();
  EXPECT_TRUE(at_once(prepared)) << prepared;
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  worker.Close();
}

}  // namespace
}  // namespace switchyard::proxy
