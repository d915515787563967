#pragma once

// The bulk data plane's framing: how a puller asks for a range of an offered buffer on
// a raw stream socket, and how the server answers. gRPC carries the offer (a one-time
// ticket and the address, over the authenticated control plane); this socket carries
// only bytes, written from and read into their final memory.
//
//   request (puller -> server), kRequestBytes:
//     magic "SYBULK01" | ticket (16 bytes) | offset (u64 LE) | length (u64 LE)
//   reply (server -> puller):
//     code (u32 LE, absl::StatusCode) | message length (u32 LE) | message
//     then, when code is OK, exactly `length` bytes of the buffer from `offset`.
//
// One request per connection: the server closes after the bytes.

#include <array>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace switchyard::bulk {

inline constexpr size_t kTicketBytes = 16;
using Ticket = std::array<uint8_t, kTicketBytes>;

inline constexpr char kMagic[] = "SYBULK01";
inline constexpr size_t kMagicBytes = 8;
inline constexpr size_t kRequestBytes = kMagicBytes + kTicketBytes + 8 + 8;
inline constexpr size_t kReplyHeadBytes = 8;
// A refusal's sentence, at most: a peer cannot make the puller allocate more.
inline constexpr uint32_t kReplyMessageMax = 1024;

struct Request {
  Ticket ticket{};
  uint64_t offset = 0;
  uint64_t length = 0;
};

std::string EncodeRequest(const Request& request);
// INVALID_ARGUMENT for a wrong size or magic (not a puller of ours).
absl::StatusOr<Request> ParseRequest(absl::string_view bytes);

// The reply's head and message; the bytes follow an OK one.
std::string EncodeReply(const absl::Status& status);
struct ReplyHead {
  absl::StatusCode code = absl::StatusCode::kOk;
  uint32_t message_bytes = 0;
};
// DATA_LOSS for a head no server of ours sends (unknown code, message too long).
absl::StatusOr<ReplyHead> ParseReplyHead(absl::string_view bytes);

// A fresh ticket from the kernel's random source (unguessable: it is the capability).
Ticket NewTicket();
// Tickets travel in protobuf `bytes` fields; anything but 16 bytes is INVALID_ARGUMENT.
absl::StatusOr<Ticket> TicketFromBytes(absl::string_view bytes);
inline absl::string_view TicketBytes(const Ticket& ticket) {
  return {reinterpret_cast<const char*>(ticket.data()), ticket.size()};
}

}  // namespace switchyard::bulk
