// The bulk data plane: its framing, its tickets, and a server and pullers over real
// sockets (a Unix socket in a private directory, and loopback TCP).

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/bulk_client.h"
#include "common/bulk_server.h"
#include "common/bulk_socket.h"
#include "common/bulk_tickets.h"
#include "common/bulk_wire.h"
#include "common/copy_count.h"
#include "common/limits.h"
#include "gtest/gtest.h"

namespace switchyard::bulk {
namespace {

// Bytes in memory; `fail_after`: Read fails for ranges past it (a device gone mid-way).
class Bytes final : public Source {
 public:
  explicit Bytes(size_t size, bool contiguous = true, int64_t fail_after = -1)
      : bytes_(size), contiguous_(contiguous), fail_after_(fail_after) {
    for (size_t i = 0; i < size; ++i) bytes_[i] = static_cast<char>((i * 131 + i / 7) & 0xff);
  }
  int64_t size() const override { return static_cast<int64_t>(bytes_.size()); }
  absl::Span<const char> Contiguous() const override {
    return contiguous_ ? absl::Span<const char>(bytes_) : absl::Span<const char>();
  }
  absl::Status Read(int64_t offset, absl::Span<char> out) const override {
    if (fail_after_ >= 0 && offset >= fail_after_) return absl::InternalError("the device is gone");
    std::memcpy(out.data(), bytes_.data() + offset, out.size());
    return absl::OkStatus();
  }
  const std::vector<char>& bytes() const { return bytes_; }

 private:
  std::vector<char> bytes_;
  bool contiguous_;
  int64_t fail_after_;
};

TEST(BulkWireTest, RequestsRoundTripAndStrangersAreRefused) {
  Request request{NewTicket(), 12345678901, 42};
  const std::string encoded = EncodeRequest(request);
  ASSERT_EQ(encoded.size(), kRequestBytes);
  absl::StatusOr<Request> parsed = ParseRequest(encoded);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->ticket, request.ticket);
  EXPECT_EQ(parsed->offset, request.offset);
  EXPECT_EQ(parsed->length, request.length);
  EXPECT_EQ(ParseRequest("GET / HTTP/1.1\r\n").status().code(), absl::StatusCode::kInvalidArgument);
  std::string wrong_magic = encoded;
  wrong_magic[0] = 'X';
  EXPECT_EQ(ParseRequest(wrong_magic).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(TicketFromBytes("short").ok());
  EXPECT_NE(NewTicket(), NewTicket());
}

TEST(BulkWireTest, RepliesCarryTheirReasonWithinBounds) {
  const std::string refused = EncodeReply(absl::PermissionDeniedError("no"));
  absl::StatusOr<ReplyHead> head = ParseReplyHead(refused.substr(0, kReplyHeadBytes));
  ASSERT_TRUE(head.ok());
  EXPECT_EQ(head->code, absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(head->message_bytes, 2u);
  const std::string long_reason = EncodeReply(absl::InternalError(std::string(5000, 'x')));
  EXPECT_EQ(long_reason.size(), kReplyHeadBytes + kReplyMessageMax);
  // What no server sends: an unknown code, a long message, an OK with a message.
  EXPECT_EQ(ParseReplyHead(std::string("\xff\0\0\0\0\0\0\0", 8)).status().code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(ParseReplyHead(std::string("\x07\0\0\0\xff\xff\0\0", 8)).status().code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(ParseReplyHead(std::string("\0\0\0\0\x01\0\0\0", 8)).status().code(),
            absl::StatusCode::kDataLoss);
}

TEST(BulkTicketsTest, ATicketGivesItsBytesOnceThenExpires) {
  const absl::Time start = absl::FromUnixSeconds(1000);
  Tickets tickets(absl::Seconds(60), 2);
  auto source = std::make_shared<Bytes>(100);
  absl::StatusOr<Ticket> ticket = tickets.Offer(source, start);
  ASSERT_TRUE(ticket.ok());
  EXPECT_EQ(tickets.Redeem({*ticket, 90, 20}, start).status().code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(tickets.Redeem({*ticket, ~uint64_t{0}, 2}, start).status().code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_TRUE(tickets.Redeem({*ticket, 0, 60}, start).ok());
  EXPECT_TRUE(tickets.Redeem({*ticket, 60, 40}, start).ok());
  // Used up: the same answer as a ticket never made.
  EXPECT_EQ(tickets.Redeem({*ticket, 0, 1}, start).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(tickets.Redeem({NewTicket(), 0, 1}, start).status().code(),
            absl::StatusCode::kPermissionDenied);
  absl::StatusOr<Ticket> late = tickets.Offer(source, start);
  ASSERT_TRUE(late.ok());
  EXPECT_EQ(tickets.Redeem({*late, 0, 1}, start + absl::Seconds(61)).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(tickets.open(), 0u);
}

TEST(BulkTicketsTest, OpenOffersAreBoundedAndExpiredOnesMakeRoom) {
  const absl::Time start = absl::FromUnixSeconds(1000);
  Tickets tickets(absl::Seconds(60), 2);
  auto source = std::make_shared<Bytes>(10);
  ASSERT_TRUE(tickets.Offer(source, start).ok());
  ASSERT_TRUE(tickets.Offer(source, start).ok());
  EXPECT_EQ(tickets.Offer(source, start).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(tickets.Offer(source, start + absl::Seconds(61)).ok());
  EXPECT_EQ(tickets.open(), 1u);
  EXPECT_EQ(source.use_count(), 2);  // the expired offers let go of the bytes
}

class BulkServerTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/sy-bulk-test-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    auto server = Server::Start(GetParam() ? absl::StrCat("unix:", dir_, "/bulk.sock")
                                           : std::string("127.0.0.1"));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }
  void TearDown() override {
    server_.reset();
    std::filesystem::remove_all(dir_);
  }

  // A raw connection that sends `bytes` and returns what the server answers.
  std::string Raw(const std::string& bytes) {
    absl::StatusOr<int> fd = Connect(server_->address(), absl::Seconds(5));
    EXPECT_TRUE(fd.ok()) << fd.status();
    if (!fd.ok()) return "";
    (void)WriteAll(*fd, bytes);
    shutdown(*fd, SHUT_WR);
    std::string answer;
    char chunk[256];
    for (ssize_t n; (n = recv(*fd, chunk, sizeof(chunk), 0)) > 0;) answer.append(chunk, n);
    close(*fd);
    return answer;
  }

  std::string dir_;
  std::unique_ptr<Server> server_;
};

TEST_P(BulkServerTest, BytesArriveExactInEveryShape) {
  // One byte, odd sizes split across streams, ranges read in place and through staging.
  for (const size_t size : {size_t{1}, size_t{4096}, (size_t{9} << 20) + 7}) {
    for (const bool contiguous : {true, false}) {
      for (const int streams : {1, 3}) {
        auto source = std::make_shared<Bytes>(size, contiguous);
        absl::StatusOr<Ticket> ticket = server_->Offer(source);
        ASSERT_TRUE(ticket.ok()) << ticket.status();
        std::vector<char> out(size, 0);
        ASSERT_TRUE(Pull(server_->address(), *ticket, absl::MakeSpan(out), streams).ok())
            << size << " bytes, " << streams << " streams";
        EXPECT_TRUE(out == source->bytes()) << size << " bytes, " << streams << " streams";
        // Used up.
        EXPECT_EQ(Pull(server_->address(), *ticket, absl::MakeSpan(out), 1).code(),
                  absl::StatusCode::kPermissionDenied);
      }
    }
  }
  EXPECT_TRUE(Pull(server_->address(), NewTicket(), {}, 1).ok());  // nothing to read
}

TEST_P(BulkServerTest, APullCostsTheKernelsTwoCopiesOfEachByteAndNoMore) {
  // Served from the source's memory, read into the puller's: the only copies are the
  // kernel's, into the socket and out of it (and the request's and reply's few bytes).
  const size_t size = (size_t{8} << 20) + 3;
  auto source = std::make_shared<Bytes>(size);
  absl::StatusOr<Ticket> ticket = server_->Offer(source);
  ASSERT_TRUE(ticket.ok()) << ticket.status();
  std::vector<char> out(size, 0);
  const uint64_t before = BytesCopied();
  ASSERT_TRUE(Pull(server_->address(), *ticket, absl::MakeSpan(out), 2).ok());
  // The server counts a send once `send` returns, which may be after the puller has
  // the bytes: wait for its count, within a bound.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (BytesCopied() - before < 2 * size && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  const uint64_t copied = BytesCopied() - before;
  EXPECT_GE(copied, 2 * size);
  EXPECT_LE(copied, 2 * size + 4096);
}

TEST_P(BulkServerTest, InOrderPullsSayWhatLandedAsItLands) {
  const size_t size = (size_t{9} << 20) + 7;
  auto source = std::make_shared<Bytes>(size);
  absl::StatusOr<Ticket> ticket = server_->Offer(source);
  ASSERT_TRUE(ticket.ok());
  std::vector<char> out(size, 0);
  std::vector<uint64_t> said;
  ASSERT_TRUE(PullInOrder(server_->address(), *ticket, absl::MakeSpan(out), [&](uint64_t n) {
                // Every byte it names is already in place.
                EXPECT_EQ(std::memcmp(out.data(), source->bytes().data(), n), 0) << n;
                said.push_back(n);
              }).ok());
  EXPECT_TRUE(out == source->bytes());
  ASSERT_EQ(said.size(), 3u);  // 4 MiB, 8 MiB, all
  EXPECT_EQ(said.back(), size);
  EXPECT_TRUE(std::is_sorted(said.begin(), said.end()));
  // A failure midway says only what did land.
  auto failing = std::make_shared<Bytes>(size_t{16} << 20, /*contiguous=*/false, int64_t{8} << 20);
  ticket = server_->Offer(failing);
  ASSERT_TRUE(ticket.ok());
  out.assign(failing->size(), 0);
  said.clear();
  const absl::Status broken = PullInOrder(server_->address(), *ticket, absl::MakeSpan(out),
                                          [&](uint64_t n) { said.push_back(n); });
  EXPECT_EQ(broken.code(), absl::StatusCode::kDataLoss) << broken;
  EXPECT_TRUE(said.empty() || said.back() <= (uint64_t{8} << 20));
}

TEST_P(BulkServerTest, StrangersAndGuessersGetNothingAndTheServerStaysUp) {
  auto source = std::make_shared<Bytes>(1 << 20);
  absl::StatusOr<Ticket> ticket = server_->Offer(source);
  ASSERT_TRUE(ticket.ok());
  std::vector<char> out(1 << 20);
  const absl::Status guessed = Pull(server_->address(), NewTicket(), absl::MakeSpan(out), 1);
  EXPECT_EQ(guessed.code(), absl::StatusCode::kPermissionDenied) << guessed;
  // Garbage of a request's size, garbage of another size, a truncated request.
  EXPECT_NE(Raw(std::string(kRequestBytes, 'x')).find("not a Switchyard"), std::string::npos);
  EXPECT_EQ(Raw("GET / HTTP/1.1\r\n\r\n").find(source->bytes().data(), 0, 16), std::string::npos);
  EXPECT_EQ(Raw(EncodeRequest({*ticket, 0, 10}).substr(0, 20)), "");
  // Past the end of the buffer.
  const absl::Status outside = Pull(server_->address(), *ticket, absl::MakeSpan(out.data(), 10),
                                    1);  // a range of 10 bytes from 0 is fine...
  EXPECT_TRUE(outside.ok()) << outside;
  // ...and the ticket still serves the rest to its holder.
  std::vector<char> rest((1 << 20) - 10);
  ASSERT_TRUE(Raw(EncodeRequest({*ticket, 10, rest.size()})).size() > rest.size());
  EXPECT_GE(server_->stats().failed, 3);
}

TEST_P(BulkServerTest, ASourceThatFailsMidwayIsDataLossNotAShortBuffer) {
  auto source = std::make_shared<Bytes>(size_t{16} << 20, /*contiguous=*/false, int64_t{8} << 20);
  absl::StatusOr<Ticket> ticket = server_->Offer(source);
  ASSERT_TRUE(ticket.ok());
  std::vector<char> out(source->size());
  const absl::Status status = Pull(server_->address(), *ticket, absl::MakeSpan(out), 1);
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
}

// Bytes still arriving: each chunk is there once `Arrive` says so, or never (`Fail`).
class Arriving final : public Source {
 public:
  explicit Arriving(size_t size) : bytes_(size) {
    for (size_t i = 0; i < size; ++i) bytes_[i] = static_cast<char>((i * 29 + i / 5) & 0xff);
  }
  int64_t size() const override { return static_cast<int64_t>(bytes_.size()); }
  absl::Span<const char> Contiguous() const override { return bytes_; }
  absl::Status Read(int64_t, absl::Span<char>) const override {
    return absl::InternalError("read in place only");
  }
  absl::Status Await(int64_t end) const override {
    absl::MutexLock lock(&mutex_);
    const auto there = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
      return arrived_ >= end || !failed_.ok();
    };
    mutex_.Await(absl::Condition(&there));
    awaited_ = std::max(awaited_, end);
    return arrived_ >= end ? absl::OkStatus() : failed_;
  }
  void Arrive(int64_t bytes) {
    absl::MutexLock lock(&mutex_);
    arrived_ = bytes;
  }
  void Fail() {
    absl::MutexLock lock(&mutex_);
    failed_ = absl::CancelledError("the client went away");
  }
  // How far the server has asked to send: never past what arrived.
  int64_t awaited() const {
    absl::MutexLock lock(&mutex_);
    return awaited_;
  }
  const std::vector<char>& bytes() const { return bytes_; }

 private:
  std::vector<char> bytes_;
  mutable absl::Mutex mutex_;
  int64_t arrived_ ABSL_GUARDED_BY(mutex_) = 0;
  mutable int64_t awaited_ ABSL_GUARDED_BY(mutex_) = 0;
  absl::Status failed_ ABSL_GUARDED_BY(mutex_);
};

TEST_P(BulkServerTest, ASourceStillArrivingIsSentAsItArrivesOrBreaksOffWhenItFails) {
  const size_t size = (size_t{10} << 20) + 3;
  for (const bool fails : {false, true}) {
    auto source = std::make_shared<Arriving>(size);
    absl::StatusOr<Ticket> ticket = server_->Offer(source);
    ASSERT_TRUE(ticket.ok());
    std::vector<char> out(size, 0);
    absl::Status pulled;
    std::thread puller([&] { pulled = Pull(server_->address(), *ticket, absl::MakeSpan(out), 2); });
    for (int64_t there = 1 << 20; there < static_cast<int64_t>(size); there += 3 << 20) {
      source->Arrive(there);
      absl::SleepFor(absl::Milliseconds(20));
      EXPECT_LE(source->awaited(), std::max<int64_t>(there, limits::kBulkChunkBytes))
          << "sent past what arrived";
      if (fails && there > (4 << 20)) break;
    }
    if (fails) {
      source->Fail();
    } else {
      source->Arrive(static_cast<int64_t>(size));
    }
    puller.join();
    if (fails) {
      EXPECT_EQ(pulled.code(), absl::StatusCode::kDataLoss) << pulled;
    } else {
      ASSERT_TRUE(pulled.ok()) << pulled;
      EXPECT_TRUE(out == source->bytes());
    }
  }
}

TEST_P(BulkServerTest, APullWhoseReaderHasGoneStopsWithinAChunk) {
  const size_t size = size_t{6} * limits::kBulkChunkBytes;
  for (const bool in_order : {false, true}) {
    auto source = std::make_shared<Bytes>(size, /*contiguous=*/true);
    absl::StatusOr<Ticket> ticket = server_->Offer(source);
    ASSERT_TRUE(ticket.ok()) << ticket.status();
    std::vector<char> out(size, 0);
    int asked = 0;
    auto cancelled = [&asked] { return ++asked > 1; };  // gone after the first chunk
    const absl::Status pulled =
        in_order ? PullInOrder(server_->address(), *ticket, absl::MakeSpan(out), nullptr,
                               absl::Seconds(limits::kBulkIdleS), cancelled)
                 : Pull(server_->address(), *ticket, absl::MakeSpan(out), 1, cancelled);
    EXPECT_EQ(pulled.code(), absl::StatusCode::kCancelled) << pulled;
    // Nothing past the first chunk was read.
    EXPECT_TRUE(std::all_of(out.begin() + limits::kBulkChunkBytes, out.end(),
                            [](char c) { return c == 0; }));
  }
  // The server goes on serving.
  auto source = std::make_shared<Bytes>(4096, true);
  absl::StatusOr<Ticket> ticket = server_->Offer(source);
  ASSERT_TRUE(ticket.ok());
  std::vector<char> out(4096, 0);
  ASSERT_TRUE(Pull(server_->address(), *ticket, absl::MakeSpan(out), 1, [] { return false; }).ok());
  EXPECT_TRUE(out == source->bytes());
}

TEST_P(BulkServerTest, AnInOrderPullWaitsForASlowSourceAsLongAsItsIdleBound) {
  // An upload's bytes may pause (the client): the pull waits `idle` for the next ones.
  for (const absl::Duration idle : {absl::Milliseconds(300), absl::Seconds(10)}) {
    auto source = std::make_shared<Arriving>(size_t{6} << 20);
    absl::StatusOr<Ticket> ticket = server_->Offer(source);
    ASSERT_TRUE(ticket.ok());
    source->Arrive(int64_t{4} << 20);
    std::vector<char> out(source->size(), 0);
    absl::Status pulled;
    std::thread puller([&] {
      pulled = PullInOrder(server_->address(), *ticket, absl::MakeSpan(out), nullptr, idle);
    });
    absl::SleepFor(absl::Seconds(1));
    source->Arrive(source->size());
    puller.join();
    if (idle < absl::Seconds(1)) {
      EXPECT_EQ(pulled.code(), absl::StatusCode::kDeadlineExceeded) << pulled;
      EXPECT_EQ(ClassifyFailure(pulled), PullFailure::kBroken);
    } else {
      ASSERT_TRUE(pulled.ok()) << pulled;
      EXPECT_TRUE(out == source->bytes());
    }
  }
}

TEST_P(BulkServerTest, AWithdrawnOfferIsRefusedAndLetsGoOfItsBytes) {
  auto source = std::make_shared<Bytes>(1 << 20);
  absl::StatusOr<Ticket> ticket = server_->Offer(source);
  ASSERT_TRUE(ticket.ok());
  server_->Withdraw(*ticket);
  EXPECT_EQ(source.use_count(), 1);
  std::vector<char> out(1 << 20);
  EXPECT_EQ(Pull(server_->address(), *ticket, absl::MakeSpan(out), 1).code(),
            absl::StatusCode::kPermissionDenied);
}

TEST_P(BulkServerTest, ConnectionsPastTheBoundAreRefusedUntilOthersEnd) {
  // Idle connections hold every serving thread.
  std::vector<int> idle;
  for (int i = 0; i < limits::kBulkConnectionsMax; ++i) {
    absl::StatusOr<int> fd = Connect(server_->address(), absl::Seconds(5));
    ASSERT_TRUE(fd.ok()) << fd.status();
    idle.push_back(*fd);
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (server_->stats().connections < limits::kBulkConnectionsMax && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  auto source = std::make_shared<Bytes>(1 << 20);
  absl::StatusOr<Ticket> ticket = server_->Offer(source);
  ASSERT_TRUE(ticket.ok());
  std::vector<char> out(source->size());
  const absl::Status refused = Pull(server_->address(), *ticket, absl::MakeSpan(out), 1);
  // Over TCP the server's close may reset the connection before its reply is read.
  EXPECT_TRUE(absl::IsResourceExhausted(refused) || (!GetParam() && absl::IsAborted(refused)))
      << refused;
  for (const int fd : idle) close(fd);
  // Their threads see the ends; the ticket, never redeemed, still gives its bytes.
  absl::Status pulled;
  do {
    absl::SleepFor(absl::Milliseconds(10));
    pulled = Pull(server_->address(), *ticket, absl::MakeSpan(out), 1);
  } while ((absl::IsResourceExhausted(pulled) || absl::IsAborted(pulled)) &&
           absl::Now() < deadline);
  ASSERT_TRUE(pulled.ok()) << pulled;
  EXPECT_TRUE(out == source->bytes());
}

TEST(BulkClientTest, FailuresSayWhetherTheBytesMayComeAnotherWay) {
  std::vector<char> out(16);
  EXPECT_EQ(
      ClassifyFailure(Pull("unix:/nonexistent/bulk.sock", NewTicket(), absl::MakeSpan(out), 1)),
      PullFailure::kUnreachable);
  EXPECT_EQ(ClassifyFailure(absl::AbortedError("closed")), PullFailure::kElsewhere);
  EXPECT_EQ(ClassifyFailure(absl::ResourceExhaustedError("full")), PullFailure::kElsewhere);
  EXPECT_EQ(ClassifyFailure(absl::DataLossError("hung up")), PullFailure::kBroken);
  EXPECT_EQ(ClassifyFailure(absl::PermissionDeniedError("ticket")), PullFailure::kBroken);
}

TEST_P(BulkServerTest, AStoppedServerBreaksItsTransfersAndIsUnavailable) {
  const std::string address = server_->address();
  server_->Stop();
  std::vector<char> out(10);
  const absl::Status status = Pull(address, NewTicket(), absl::MakeSpan(out), 1);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
}

TEST(BulkServerPortTest, AChosenPortIsUsedAndATakenOneIsUnavailable) {
  auto free = Server::Start("127.0.0.1");
  ASSERT_TRUE(free.ok()) << free.status();
  const std::string address = (*free)->address();
  const int port = std::stoi(address.substr(address.rfind(':') + 1));
  // Taken (by the first server).
  auto taken = Server::Start("127.0.0.1", "", port);
  EXPECT_EQ(taken.status().code(), absl::StatusCode::kUnavailable) << taken.status();
  EXPECT_NE(taken.status().message().find(absl::StrCat("port ", port)), std::string::npos);
  (*free)->Stop();
  free->reset();
  // Free again: had, and offered as asked.
  auto chosen = Server::Start("127.0.0.1", "localhost", port);
  ASSERT_TRUE(chosen.ok()) << chosen.status();
  EXPECT_EQ((*chosen)->address(), absl::StrCat("localhost:", port));
  EXPECT_EQ(Server::Start("127.0.0.1", "", 70000).status().code(),
            absl::StatusCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(UnixAndTcp, BulkServerTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Unix" : "Tcp"; });

}  // namespace
}  // namespace switchyard::bulk
