#include "common/bulk_client.h"

#include <unistd.h>

#include <algorithm>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/bulk_socket.h"
#include "common/limits.h"
#include "common/thread_name.h"

namespace switchyard::bulk {
namespace {

// `arrived`, when given, hears the bytes in place from the start of `out` as they come;
// `cancelled`, when given, is asked between chunks.
absl::Status PullRange(const std::string& address, const Ticket& ticket, uint64_t offset,
                       absl::Span<char> out, const Arrived* arrived, absl::Duration idle,
                       const Cancelled* cancelled) {
  absl::StatusOr<int> fd = Connect(address, idle);
  if (!fd.ok()) return fd.status();
  const absl::Status sent = WriteAll(*fd, EncodeRequest(Request{ticket, offset, out.size()}));
  // Read the answer even when sending failed: a server that refused at once (too many
  // transfers) may have closed before our request reached it, its reason already queued.
  char head[kReplyHeadBytes];
  absl::Status status = ReadAll(*fd, absl::MakeSpan(head, sizeof(head)));
  if (!status.ok()) {
    // No answer, so no byte of ours was written: a refusal whose reply a TCP reset
    // overtook, or a server going away. Worth asking again another way.
    close(*fd);
    return absl::AbortedError(
        absl::StrCat("the data plane at ", address,
                     " closed before answering: ", (sent.ok() ? status : sent).message()));
  }
  absl::StatusOr<ReplyHead> reply = ParseReplyHead(absl::string_view(head, sizeof(head)));
  if (!reply.ok()) {
    status = reply.status();
  } else if (reply->code != absl::StatusCode::kOk) {
    std::string message(reply->message_bytes, '\0');
    status = ReadAll(*fd, absl::MakeSpan(message.data(), message.size()));
    status = absl::Status(reply->code, status.ok() ? message : "(its reason was cut off)");
  } else if (arrived == nullptr && cancelled == nullptr) {
    status = ReadAll(*fd, out);
  } else {
    for (size_t done = 0; status.ok() && done < out.size();) {
      if (cancelled != nullptr && (*cancelled)()) {
        close(*fd);  // the server sees the reader go, and lets go of the ticket's bytes
        return absl::CancelledError("the reader of the transfer has gone");
      }
      const size_t n = std::min<size_t>(limits::kBulkChunkBytes, out.size() - done);
      status = ReadAll(*fd, out.subspan(done, n));
      done += n;
      if (status.ok() && arrived != nullptr) (*arrived)(done);
    }
  }
  close(*fd);
  // Once connected, anything short of the bytes is a broken transfer.
  if (absl::IsUnavailable(status)) return absl::DataLossError(status.message());
  return status;
}

}  // namespace

PullFailure ClassifyFailure(const absl::Status& status) {
  // Pull's codes: UNAVAILABLE before connecting; ABORTED when the server closed before
  // answering; RESOURCE_EXHAUSTED when it serves as many transfers as it takes.
  if (absl::IsUnavailable(status)) return PullFailure::kUnreachable;
  if (absl::IsAborted(status) || absl::IsResourceExhausted(status)) return PullFailure::kElsewhere;
  return PullFailure::kBroken;
}

int StreamsFor(int64_t bytes) {
  return static_cast<int>(
      std::clamp<int64_t>(bytes / limits::kBulkStreamBytes, 1, limits::kBulkStreamsMax));
}

absl::Status Pull(const std::string& address, const Ticket& ticket, absl::Span<char> out,
                  int streams, const Cancelled& cancelled) {
  if (out.empty()) return absl::OkStatus();
  streams = std::clamp<int>(streams, 1, limits::kBulkStreamsMax);
  // Whole pages per range, so that no two streams write one page.
  const uint64_t page = 4096;
  const uint64_t share = (out.size() / streams + page - 1) / page * page;
  std::vector<absl::Status> results(streams);
  std::vector<std::thread> threads;
  for (int i = 0; i < streams; ++i) {
    const uint64_t begin = std::min<uint64_t>(i * share, out.size());
    const uint64_t end =
        i + 1 == streams ? out.size() : std::min<uint64_t>(begin + share, out.size());
    if (begin == end) continue;
    auto pull = [&, i, begin, end] {
      results[i] = PullRange(address, ticket, begin, out.subspan(begin, end - begin), nullptr,
                             absl::Seconds(limits::kBulkIdleS), cancelled ? &cancelled : nullptr);
    };
    if (i + 1 == streams) {
      pull();  // the last range on this thread
    } else {
      threads.emplace_back([pull] {
        NameThisThread("sy-bulk-pull");
        pull();
      });
    }
  }
  for (std::thread& thread : threads) thread.join();
  // The first stream's answer speaks for the transfer (an unreachable server fails it
  // first); any other failure breaks it.
  for (const absl::Status& result : results) {
    if (!result.ok()) return result;
  }
  return absl::OkStatus();
}

absl::Status PullInOrder(const std::string& address, const Ticket& ticket, absl::Span<char> out,
                         const Arrived& arrived, absl::Duration idle, const Cancelled& cancelled) {
  if (out.empty()) return absl::OkStatus();
  return PullRange(address, ticket, 0, out, arrived ? &arrived : nullptr, idle,
                   cancelled ? &cancelled : nullptr);
}

}  // namespace switchyard::bulk
