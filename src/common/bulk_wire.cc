#include "common/bulk_wire.h"

#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace switchyard::bulk {
namespace {

// Little-endian, byte by byte: the same on every host.
void PutLittle(std::string* out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

uint64_t GetLittle(const char* in, int bytes) {
  uint64_t value = 0;
  for (int i = 0; i < bytes; ++i) value |= uint64_t{static_cast<uint8_t>(in[i])} << (8 * i);
  return value;
}

}  // namespace

std::string EncodeRequest(const Request& request) {
  std::string out(kMagic, kMagicBytes);
  const absl::string_view ticket = TicketBytes(request.ticket);
  out.append(ticket.data(), ticket.size());
  PutLittle(&out, request.offset, 8);
  PutLittle(&out, request.length, 8);
  return out;
}

absl::StatusOr<Request> ParseRequest(absl::string_view bytes) {
  if (bytes.size() != kRequestBytes || bytes.substr(0, kMagicBytes) != kMagic) {
    return absl::InvalidArgumentError("not a Switchyard bulk-transfer request");
  }
  Request request;
  std::memcpy(request.ticket.data(), bytes.data() + kMagicBytes, kTicketBytes);
  const char* numbers = bytes.data() + kMagicBytes + kTicketBytes;
  request.offset = GetLittle(numbers, 8);
  request.length = GetLittle(numbers + 8, 8);
  return request;
}

std::string EncodeReply(const absl::Status& status) {
  std::string out;
  const absl::string_view message =
      status.message().substr(0, std::min<size_t>(status.message().size(), kReplyMessageMax));
  PutLittle(&out, static_cast<uint32_t>(status.code()), 4);
  PutLittle(&out, message.size(), 4);
  out.append(message.data(), message.size());
  return out;
}

absl::StatusOr<ReplyHead> ParseReplyHead(absl::string_view bytes) {
  if (bytes.size() != kReplyHeadBytes) return absl::DataLossError("a truncated bulk reply");
  const uint64_t code = GetLittle(bytes.data(), 4);
  const uint64_t length = GetLittle(bytes.data() + 4, 4);
  if (code > static_cast<uint64_t>(absl::StatusCode::kUnauthenticated) ||
      length > kReplyMessageMax || (code == 0 && length != 0)) {
    return absl::DataLossError(
        absl::StrCat("a bulk reply no server sends (code ", code, ", message of ", length, ")"));
  }
  return ReplyHead{static_cast<absl::StatusCode>(code), static_cast<uint32_t>(length)};
}

Ticket NewTicket() {
  Ticket ticket;
  size_t filled = 0;
  while (filled < ticket.size()) {
    const ssize_t n = getrandom(ticket.data() + filled, ticket.size() - filled, 0);
    if (n > 0) {
      filled += n;
    } else if (errno != EINTR) {
      // getrandom cannot fail for 16 bytes on any kernel we run on (>= 3.17, after the
      // pool is seeded); if it ever did, no ticket is better than a guessable one.
      std::abort();
    }
  }
  return ticket;
}

absl::StatusOr<Ticket> TicketFromBytes(absl::string_view bytes) {
  if (bytes.size() != kTicketBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("a bulk ticket has ", kTicketBytes, " bytes, not ", bytes.size()));
  }
  Ticket ticket;
  std::memcpy(ticket.data(), bytes.data(), kTicketBytes);
  return ticket;
}

}  // namespace switchyard::bulk
