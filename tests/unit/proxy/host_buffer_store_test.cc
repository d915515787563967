#include "proxy/host_buffer_store.h"

#include <cstring>
#include <thread>
#include <vector>

#include "common/limits.h"
#include "gtest/gtest.h"

namespace switchyard::proxy {
namespace {

std::unique_ptr<HostBytes> Bytes(const std::string& text) {
  auto bytes = std::make_unique<HostBytes>(text.size());
  std::memcpy(bytes->data(), text.data(), text.size());
  return bytes;
}

// A complete buffer under `handle`, as a fetch leaves it.
absl::Status Store(HostBufferStore& store, uint64_t handle, const std::string& text) {
  auto buffer = store.Expect(handle, text.size());
  if (!buffer.ok()) return buffer.status();
  return (*buffer)->Fill(Bytes(text));
}

TEST(HostBufferStoreTest, StoreLookupDelete) {
  HostBufferStore store;
  ASSERT_TRUE(Store(store, 1, "abc").ok());
  EXPECT_EQ(Store(store, 1, "x").code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(*(*store.Lookup(1, absl::ZeroDuration()))->WaitAll(absl::Now()), "abc");
  EXPECT_EQ(store.bytes(), 3);
  EXPECT_TRUE(store.Delete(1).ok());
  EXPECT_EQ(store.Delete(1).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store.Lookup(1, absl::ZeroDuration()).status().code(), absl::StatusCode::kNotFound);
}

TEST(HostBufferStoreTest, ABufferSizedByItsFillWaitsForIt) {
  HostBufferStore store;
  auto buffer = store.Expect(1, HostBuffer::kSizedByFill);
  ASSERT_TRUE(buffer.ok());
  EXPECT_EQ((*buffer)->size(), 0);
  std::thread filler([&] {
    absl::SleepFor(absl::Milliseconds(20));
    EXPECT_TRUE((*buffer)->Fill(Bytes("a string array")).ok());
  });
  auto data = (*store.Lookup(1, absl::ZeroDuration()))->WaitAll(absl::Now() + absl::Seconds(10));
  filler.join();
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(*data, "a string array");
}

TEST(HostBufferStoreTest, LookupWaitsForALateUpload) {
  HostBufferStore store;
  std::thread uploader([&] {
    absl::SleepFor(absl::Milliseconds(50));
    (void)Store(store, 9, "late");
  });
  auto data = store.Lookup(9, absl::Seconds(10));
  uploader.join();
  ASSERT_TRUE(data.ok());
  EXPECT_EQ(*(*data)->WaitAll(absl::Now()), "late");
}

TEST(HostBufferStoreTest, AnUploadIsReadableWhileItArrives) {
  HostBufferStore store;
  auto upload = store.Begin(3, 6);
  ASSERT_TRUE(upload.ok());
  auto seen = store.Lookup(3, absl::ZeroDuration());
  ASSERT_TRUE(seen.ok());  // visible before its first byte
  ASSERT_TRUE((*upload)->Append("abc").ok());
  EXPECT_EQ(*(*seen)->WaitFor(3, absl::Now()), "abc");
  EXPECT_EQ((*seen)->WaitFor(4, absl::Now()).status().code(), absl::StatusCode::kNotFound);
  std::thread uploader([&] {
    absl::SleepFor(absl::Milliseconds(50));
    ASSERT_TRUE((*upload)->Append("def").ok());
    (*upload)->Finish();
  });
  EXPECT_EQ(*(*seen)->WaitAll(absl::Now() + absl::Seconds(10)), "abcdef");
  uploader.join();
  EXPECT_EQ((*upload)->Append("g").code(), absl::StatusCode::kDataLoss);
}

TEST(HostBufferStoreTest, AWriterInPlaceSaysWhatArrived) {
  HostBufferStore store;
  auto fetch = store.Begin(6, 6);
  ASSERT_TRUE(fetch.ok());
  auto seen = store.Lookup(6, absl::ZeroDuration());
  ASSERT_TRUE(seen.ok());
  absl::Span<char> space = (*fetch)->Space();
  ASSERT_EQ(space.size(), 6u);
  std::memcpy(space.data(), "abcd", 4);
  ASSERT_TRUE((*fetch)->Arrived(2).ok());
  EXPECT_EQ(*(*seen)->WaitFor(2, absl::Now()), "ab");  // written, not yet said: not seen
  EXPECT_EQ((*seen)->WaitFor(3, absl::Now()).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ((*fetch)->Arrived(1).code(), absl::StatusCode::kDataLoss);  // never backwards
  EXPECT_EQ((*fetch)->Arrived(7).code(), absl::StatusCode::kDataLoss);  // nor past the end
  std::memcpy(space.data() + 4, "ef", 2);
  ASSERT_TRUE((*fetch)->Arrived(6).ok());
  (*fetch)->Finish();
  EXPECT_EQ(*(*seen)->WaitAll(absl::Now()), "abcdef");
  EXPECT_EQ((*fetch)->Arrived(6).code(), absl::StatusCode::kDataLoss);  // finished
}

TEST(HostBufferStoreTest, AShortOrFailedUploadFailsItsReaders) {
  HostBufferStore store;
  auto upload = store.Begin(4, 10);
  ASSERT_TRUE(upload.ok());
  ASSERT_TRUE((*upload)->Append("abc").ok());
  EXPECT_EQ((*upload)->Append("too long!").code(), absl::StatusCode::kDataLoss);
  (*upload)->Finish();
  EXPECT_EQ((*upload)->WaitAll(absl::Now() + absl::Seconds(10)).status().code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(store.Begin(4, 1).status().code(), absl::StatusCode::kAlreadyExists);
  auto waiting = store.Begin(5, 10);
  std::thread stopper([&] {
    absl::SleepFor(absl::Milliseconds(50));
    store.Shutdown();
  });
  EXPECT_EQ((*waiting)->WaitAll(absl::Now() + absl::Seconds(30)).status().code(),
            absl::StatusCode::kCancelled);
  stopper.join();
}

TEST(HostBufferStoreTest, CancelledAndShutdownEndTheWait) {
  HostBufferStore store;
  EXPECT_EQ(store.Lookup(5, absl::Seconds(30), [] { return true; }).status().code(),
            absl::StatusCode::kCancelled);
  std::thread stopper([&] {
    absl::SleepFor(absl::Milliseconds(50));
    store.Shutdown();
  });
  EXPECT_EQ(store.Lookup(5, absl::Seconds(30)).status().code(), absl::StatusCode::kCancelled);
  stopper.join();
  EXPECT_EQ(Store(store, 6, "x").code(), absl::StatusCode::kFailedPrecondition);
}

TEST(HostBufferStoreTest, ShutdownEndsTheCallsStillOpen) {
  HostBufferStore store;
  std::vector<int> ended;
  const uint64_t open = store.AddCall([&] { ended.push_back(1); });
  const uint64_t done = store.AddCall([&] { ended.push_back(2); });
  ASSERT_NE(open, 0u);
  ASSERT_NE(done, open);
  store.RemoveCall(done);  // that call returned: its context is gone
  store.Shutdown();
  EXPECT_EQ(ended, std::vector<int>{1});
  // A call that comes after the end is not kept (its Begin fails).
  EXPECT_EQ(store.AddCall([&] { ended.push_back(3); }), 0u);
  store.Shutdown();
  store.RemoveCall(open);
  EXPECT_EQ(ended, std::vector<int>{1});
}

TEST(HostBufferStoreTest, CallsWaitingOnTheirClientTooLongAreEnded) {
  HostBufferStore store;
  std::vector<int> ended;
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  const absl::Duration limit = absl::Seconds(60);
  const uint64_t stalled = store.AddCall([&] { ended.push_back(1); });
  const uint64_t answered = store.AddCall([&] { ended.push_back(2); });
  const uint64_t busy = store.AddCall([&] { ended.push_back(3); });  // waits on no client
  store.WaitsOnClient(stalled, t0);
  store.WaitsOnClient(answered, t0);
  store.ClientAnswered(answered);
  store.WaitsOnClient(answered, t0 + absl::Seconds(30));  // its next chunk
  EXPECT_EQ(store.EndStalledCalls(t0 + limit - absl::Milliseconds(1), limit), 0);
  EXPECT_EQ(store.EndStalledCalls(t0 + limit, limit), 1);
  EXPECT_EQ(ended, std::vector<int>{1});
  // Ended once: forgotten, so neither a later check nor the session's end ends it again.
  store.WaitsOnClient(stalled, t0);  // ignored: unknown now
  store.RemoveCall(stalled);
  EXPECT_EQ(store.EndStalledCalls(t0 + absl::Hours(1), limit), 1);  // `answered`
  store.Shutdown();
  EXPECT_EQ(ended, (std::vector<int>{1, 2, 3}));
  (void)busy;
}

TEST(HostBufferStoreTest, ABufferInOnePieceIsVisibleAtOnceAndReadWhenFilled) {
  HostBufferStore store;
  auto expected = store.Expect(7, 3);
  ASSERT_TRUE(expected.ok());
  auto found = store.Lookup(7, absl::ZeroDuration());  // a lookup finds it before the bytes
  ASSERT_TRUE(found.ok());
  std::thread filler([&] {
    absl::SleepFor(absl::Milliseconds(50));
    EXPECT_TRUE((*expected)->Fill(Bytes("abc")).ok());
  });
  auto data = (*found)->WaitAll(absl::Now() + absl::Seconds(30));
  filler.join();
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(*data, "abc");
  // Empty ones are filled too before anyone reads them.
  auto empty = store.Expect(8, 0);
  EXPECT_EQ((*empty)->WaitFor(0, absl::Now() + absl::Milliseconds(20)).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_TRUE((*empty)->Fill(Bytes("")).ok());
  EXPECT_TRUE((*empty)->WaitAll(absl::Now()).ok());
}

TEST(HostBufferStoreTest, AFailedOrWrongSizedFillFailsItsReaders) {
  HostBufferStore store;
  auto failed = store.Expect(1, 4);
  (*failed)->Finish(absl::DataLossError("slice 1 is down"));
  EXPECT_EQ((*failed)->WaitAll(absl::Now() + absl::Seconds(1)).status().code(),
            absl::StatusCode::kDataLoss);
  auto short_fill = store.Expect(2, 4);
  EXPECT_EQ((*short_fill)->Fill(Bytes("ab")).code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ((*short_fill)->WaitAll(absl::Now() + absl::Seconds(1)).status().code(),
            absl::StatusCode::kDataLoss);
}

TEST(HostBufferStoreTest, MaxBytesBoundsWhatIsHeldAtOnce) {
  HostBufferStore store(/*max_bytes=*/10);
  ASSERT_TRUE(Store(store, 1, "abcdef").ok());
  absl::Status over = Store(store, 2, "ghijk");
  EXPECT_EQ(over.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(over.message().find("--session_max_host_buffer_bytes"), std::string::npos) << over;
  EXPECT_EQ(store.Begin(3, 5).status().code(), absl::StatusCode::kResourceExhausted);
  ASSERT_TRUE(Store(store, 4, "ghij").ok());  // exactly at the bound
  ASSERT_TRUE(store.Delete(1).ok());
  EXPECT_TRUE(store.Begin(5, 6).ok());  // room again
}

TEST(HostBufferStoreTest, ABufferSizedByItsFillIsChargedAtTheFill) {
  HostBufferStore store(/*max_bytes=*/10);
  auto small = store.Expect(1, HostBuffer::kSizedByFill);
  ASSERT_TRUE(small.ok());
  ASSERT_TRUE((*small)->Fill(Bytes("strings")).ok());
  EXPECT_EQ(store.bytes(), 7);
  auto large = store.Expect(2, HostBuffer::kSizedByFill);
  ASSERT_TRUE(large.ok());
  absl::Status over = (*large)->Fill(Bytes("more strings"));
  EXPECT_EQ(over.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(over.message().find("--session_max_host_buffer_bytes"), std::string::npos) << over;
  // Its readers learn why; nothing of it stays charged.
  EXPECT_EQ((*large)->WaitAll(absl::Now()).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(store.bytes(), 7);
  small->reset();
  ASSERT_TRUE(store.Delete(1).ok());
  EXPECT_EQ(store.bytes(), 0);
}

TEST(HostBufferStoreTest, ABudgetBoundsAllSessionsTogetherAndGetsEveryByteBack) {
  auto budget = std::make_shared<HostBufferBudget>(/*max_bytes=*/10);
  auto first = std::make_unique<HostBufferStore>(/*max_bytes=*/0, budget);
  HostBufferStore second(/*max_bytes=*/8, budget);
  ASSERT_TRUE(Store(*first, 1, "abcdef").ok());
  ASSERT_TRUE(Store(second, 1, "ab").ok());  // handles are per session
  absl::Status over = Store(second, 2, "ghi");
  EXPECT_EQ(over.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(over.message().find("--proxy_max_host_buffer_bytes"), std::string::npos) << over;
  EXPECT_EQ(second.Begin(3, 3).status().code(), absl::StatusCode::kResourceExhausted);
  // A refused or duplicate buffer takes nothing.
  EXPECT_EQ(Store(second, 1, "x").code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(budget->held(), 8);
  ASSERT_TRUE(Store(second, 2, "gh").ok());  // exactly at the bound
  // Given back by a deletion, by a session's end, and by a store that goes away.
  ASSERT_TRUE(second.Delete(1).ok());
  EXPECT_EQ(budget->held(), 8);
  second.Shutdown();
  EXPECT_EQ(budget->held(), 6);
  first.reset();
  EXPECT_EQ(budget->held(), 0);
}

TEST(HostBufferStoreTest, BoundsComeFromTheFlagsElseFromTheMemory) {
  constexpr int64_t kGiB = int64_t{1} << 30;
  HostBufferBounds derived = ResolveHostBufferBounds(-1, -1, 64 * kGiB);
  EXPECT_EQ(derived.session_max_bytes, 16 * kGiB);
  EXPECT_EQ(derived.proxy_max_bytes, 32 * kGiB);
  HostBufferBounds given = ResolveHostBufferBounds(0, 5, 64 * kGiB);  // 0: none
  EXPECT_EQ(given.session_max_bytes, 0);
  EXPECT_EQ(given.proxy_max_bytes, 5);
  HostBufferBounds unknown = ResolveHostBufferBounds(-1, -1, 0);  // the machine does not say
  EXPECT_EQ(unknown.session_max_bytes, 0);
  EXPECT_EQ(unknown.proxy_max_bytes, 0);
}

// A windowed upload: 16 MiB through a 4 MiB window, as ServeStore writes it.
constexpr int64_t kMiB = 1 << 20;

std::shared_ptr<HostBuffer> Windowed(HostBufferStore& store, uint64_t handle) {
  auto buffer = store.Begin(handle, 16 * kMiB, 4 * kMiB);
  EXPECT_TRUE(buffer.ok());
  return *buffer;
}

// Writes `chunks` chunks of 1 MiB of byte `fill`, each after room for it; the status of
// the first that fails.
absl::Status WriteChunks(HostBuffer& buffer, int64_t from, int64_t chunks, char fill,
                         absl::Duration wait = absl::Seconds(10)) {
  const std::string chunk(kMiB, fill);
  for (int64_t i = 0; i < chunks; ++i) {
    const int64_t end = (from + i + 1) * kMiB;
    if (absl::Status room = buffer.WaitRoom(end, absl::Now() + wait); !room.ok()) return room;
    if (absl::Status appended = buffer.Append(chunk); !appended.ok()) return appended;
  }
  return absl::OkStatus();
}

TEST(HostBufferWindowTest, TheWriterStaysAWindowAheadOfWhatWasSentOn) {
  HostBufferStore store;
  std::shared_ptr<HostBuffer> buffer = Windowed(store, 1);
  ASSERT_TRUE(WriteChunks(*buffer, 0, 4, 'a').ok());
  // A fifth chunk finds no room until the reader sent some on.
  EXPECT_EQ(WriteChunks(*buffer, 4, 1, 'a', absl::Milliseconds(50)).code(),
            absl::StatusCode::kNotFound);
  std::thread writer([&] { EXPECT_TRUE(WriteChunks(*buffer, 4, 12, 'b').ok()); });
  int64_t sent = 0;
  while (sent < 16 * kMiB) {
    absl::StatusOr<absl::string_view> there =
        buffer->StreamFor(sent + kMiB, absl::Now() + absl::Seconds(10));
    ASSERT_TRUE(there.ok()) << there.status();
    EXPECT_EQ((*there)[sent], sent < 4 * kMiB ? 'a' : 'b');
    buffer->Sent(sent, sent + kMiB);
    sent += kMiB;
  }
  writer.join();
  buffer->Finish();
  EXPECT_TRUE(buffer->Completion().ok());
  EXPECT_TRUE(buffer->dropped_any());
  // Its pages were given back: the start reads as zero now, and cannot be read whole.
  EXPECT_EQ((*buffer->StreamFor(1, absl::Now()))[0], '\0');
  EXPECT_EQ(buffer->WaitAll(absl::Now()).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(HostBufferWindowTest, BytesSentOutOfOrderCountOnceTheGapBeforeThemIsSent) {
  HostBufferStore store;
  std::shared_ptr<HostBuffer> buffer = Windowed(store, 1);
  ASSERT_TRUE(WriteChunks(*buffer, 0, 4, 'a').ok());
  buffer->Sent(2 * kMiB, 4 * kMiB);  // a later range first, as parallel pulls do
  EXPECT_EQ(buffer->WaitRoom(5 * kMiB, absl::Now()).code(), absl::StatusCode::kNotFound);
  buffer->Sent(0, 2 * kMiB);
  EXPECT_TRUE(buffer->WaitRoom(8 * kMiB, absl::Now()).ok());
}

TEST(HostBufferWindowTest, AReaderOfTheWholeBufferClosesTheWindow) {
  HostBufferStore store;
  std::shared_ptr<HostBuffer> buffer = Windowed(store, 1);
  std::thread writer([&] { EXPECT_TRUE(WriteChunks(*buffer, 0, 16, 'c').ok()); });
  absl::StatusOr<absl::string_view> all =
      buffer->WaitFor(16 * kMiB, absl::Now() + absl::Seconds(10));
  writer.join();
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(*all, std::string(16 * kMiB, 'c'));
  buffer->Sent(0, 16 * kMiB);  // closed for good: nothing is given back
  EXPECT_FALSE(buffer->dropped_any());
}

TEST(HostBufferWindowTest, WithNoReaderLeftTheRestIsDropped) {
  HostBufferStore store;
  std::shared_ptr<HostBuffer> buffer = Windowed(store, 1);
  ASSERT_TRUE(WriteChunks(*buffer, 0, 4, 'd').ok());
  buffer->Consumed();  // the request failed, or its put ended
  ASSERT_TRUE(WriteChunks(*buffer, 4, 12, 'd', absl::ZeroDuration()).ok());
  buffer->Finish();
  EXPECT_TRUE(buffer->Completion().ok());
  // So does a client's delete of an upload no request took.
  std::shared_ptr<HostBuffer> other = Windowed(store, 2);
  ASSERT_TRUE(WriteChunks(*other, 0, 4, 'e').ok());
  ASSERT_TRUE(store.Delete(2).ok());
  EXPECT_TRUE(WriteChunks(*other, 4, 12, 'e', absl::ZeroDuration()).ok());
}

TEST(HostBufferWindowTest, TheWriterStopsWhenItsClientGoes) {
  HostBufferStore store;
  std::shared_ptr<HostBuffer> buffer = Windowed(store, 1);
  ASSERT_TRUE(WriteChunks(*buffer, 0, 4, 'f').ok());
  EXPECT_EQ(buffer->WaitRoom(5 * kMiB, absl::Now() + absl::Seconds(10), [] { return true; }).code(),
            absl::StatusCode::kCancelled);
  // A small upload has no window: it is held whole.
  auto small = store.Begin(2, 2 * kMiB, 4 * kMiB);
  ASSERT_TRUE(small.ok());
  EXPECT_TRUE(WriteChunks(**small, 0, 2, 'g', absl::ZeroDuration()).ok());
}

TEST(HostBufferWindowTest, AWindowedBufferHasOneStreamingReader) {
  HostBufferStore store;
  std::shared_ptr<HostBuffer> buffer = Windowed(store, 1);
  EXPECT_TRUE(buffer->TakeReader());
  EXPECT_FALSE(buffer->TakeReader());
  auto small = store.Begin(2, 2 * kMiB);  // no window: read by any number
  ASSERT_TRUE(small.ok());
  EXPECT_TRUE((*small)->TakeReader());
  EXPECT_TRUE((*small)->TakeReader());
}

TEST(HostBufferWindowTest, AWindowedUploadIsChargedItsWindowUntilReadWhole) {
  auto budget = std::make_shared<HostBufferBudget>(/*max_bytes=*/40 * kMiB);
  HostBufferStore store(/*max_bytes=*/16 * kMiB, budget);
  // As large as the session's bound, yet two are admitted: each holds only its window.
  std::shared_ptr<HostBuffer> first = Windowed(store, 1);
  std::shared_ptr<HostBuffer> second = Windowed(store, 2);
  EXPECT_EQ(store.bytes(), 8 * kMiB);
  EXPECT_EQ(budget->held(), 8 * kMiB);
  // One chunk far larger than the window (let through when nothing is outstanding) is
  // charged for what it holds: past the bound it is refused.
  auto bulky = store.Begin(3, 16 * kMiB, 4 * kMiB);
  ASSERT_TRUE(bulky.ok());
  absl::Status room = (*bulky)->WaitRoom(16 * kMiB, absl::Now());
  EXPECT_EQ(room.code(), absl::StatusCode::kResourceExhausted) << room;
  bulky->reset();
  ASSERT_TRUE(store.Delete(3).ok());
  EXPECT_EQ(store.bytes(), 8 * kMiB);
  // A reader that needs one whole (a split or replicated array) is refused, naming
  // the bound, when the rest does not fit; the window stays, so the writer is bounded.
  absl::StatusOr<absl::string_view> whole = first->WaitFor(16 * kMiB, absl::Now());
  EXPECT_EQ(whole.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(whole.status().message().find("--session_max_host_buffer_bytes"), std::string::npos)
      << whole.status();
  EXPECT_EQ(WriteChunks(*first, 0, 5, 'h', absl::Milliseconds(20)).code(),
            absl::StatusCode::kNotFound);
  // Room once the other goes: read whole, it is charged whole.
  ASSERT_TRUE(store.Delete(2).ok());
  second.reset();
  EXPECT_EQ(store.bytes(), 4 * kMiB);
  std::thread writer([&] { EXPECT_TRUE(WriteChunks(*first, 4, 12, 'h').ok()); });
  EXPECT_TRUE(first->WaitFor(16 * kMiB, absl::Now() + absl::Seconds(10)).ok());
  writer.join();
  EXPECT_EQ(store.bytes(), 16 * kMiB);
  // Its request took it from the store: still charged while held, given back after.
  ASSERT_TRUE(store.Claim(1).ok());
  EXPECT_EQ(budget->held(), 16 * kMiB);
  first.reset();
  EXPECT_EQ(budget->held(), 0);
  EXPECT_EQ(store.bytes(), 0);
}

TEST(HostBufferWindowTest, AnUploadWaitingForItsReaderHoldsOnlyTheUnreadWindow) {
  constexpr int64_t kUnread = limits::kHostBufferUnreadWindowBytes;
  constexpr int64_t kWindow = 4 * kUnread;
  // Room for one whole window and three unread ones: the shards of a split array that
  // jax sends at once, read one at a time.
  HostBufferStore store(/*max_bytes=*/kWindow + 3 * kUnread);
  std::vector<std::shared_ptr<HostBuffer>> shards;
  for (uint64_t handle = 1; handle <= 4; ++handle) {
    auto shard = store.Begin(handle, 4 * kWindow, kWindow);
    ASSERT_TRUE(shard.ok()) << shard.status();
    shards.push_back(*shard);
  }
  EXPECT_EQ(store.bytes(), 4 * kUnread);
  // Unread, a writer stops at the unread window.
  const int64_t unread_chunks = kUnread / kMiB;
  ASSERT_TRUE(WriteChunks(*shards[0], 0, unread_chunks, 'a').ok());
  EXPECT_EQ(WriteChunks(*shards[0], unread_chunks, 1, 'a', absl::Milliseconds(50)).code(),
            absl::StatusCode::kNotFound);
  // Its reader widens it to the whole window, charged now.
  ASSERT_TRUE(shards[0]->TakeReader());
  EXPECT_EQ(store.bytes(), kWindow + 3 * kUnread);
  EXPECT_TRUE(WriteChunks(*shards[0], unread_chunks, kWindow / kMiB - unread_chunks, 'a').ok());
  EXPECT_EQ(store.bytes(), kWindow + 3 * kUnread);
  // Without room in the bound, a second reader streams on in the unread window: slower,
  // never refused.
  ASSERT_TRUE(shards[1]->TakeReader());
  EXPECT_EQ(store.bytes(), kWindow + 3 * kUnread);
  ASSERT_TRUE(WriteChunks(*shards[1], 0, unread_chunks, 'b').ok());
  EXPECT_EQ(WriteChunks(*shards[1], unread_chunks, 1, 'b', absl::Milliseconds(50)).code(),
            absl::StatusCode::kNotFound);
  shards.clear();
  for (uint64_t handle = 1; handle <= 4; ++handle) ASSERT_TRUE(store.Delete(handle).ok());
  EXPECT_EQ(store.bytes(), 0);
}

}  // namespace
}  // namespace switchyard::proxy
