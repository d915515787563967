#pragma once

// The offers a bulk server has made: each a one-time ticket for the bytes of one
// buffer, good until its bytes have all been read or it expires. Pure logic, time
// passed in; not thread-safe (the server locks around it).

#include <cstdint>
#include <memory>

#include "absl/container/flat_hash_map.h"
#include "absl/hash/hash.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/bulk_wire.h"

namespace switchyard::bulk {

// The bytes an offer gives. Thread-safe: ranges of one source are read at once.
class Source {
 public:
  virtual ~Source() = default;
  virtual int64_t size() const = 0;
  // The bytes in host memory as one run, when they are (sent from there, no copy);
  // empty otherwise, and then `Read` copies ranges out.
  virtual absl::Span<const char> Contiguous() const { return {}; }
  virtual absl::Status Read(int64_t offset, absl::Span<char> out) const = 0;
  // For a source still filling from its start (an upload still arriving): returns once
  // its first `end` bytes are in place, or why they will not come (which ends the
  // transfer). Sources whose bytes are all there keep this.
  virtual absl::Status Await(int64_t end) const { return absl::OkStatus(); }
  // The bytes [offset, end) went out to the reader (they are in the socket's hands): a
  // source streamed through a window may let them go.
  virtual void Sent(int64_t offset, int64_t end) const {}
};

class Tickets {
 public:
  // `lifetime`: from the offer to the last read of its bytes. `max`: offers held at once.
  Tickets(absl::Duration lifetime, int64_t max) : lifetime_(lifetime), max_(max) {}

  // RESOURCE_EXHAUSTED past `max` offers still open (after the expired are dropped).
  absl::StatusOr<Ticket> Offer(std::shared_ptr<const Source> source, absl::Time now);

  // The source a request may read: PERMISSION_DENIED for a ticket that was never
  // offered, is used up or has expired (the same answer for each, so a guesser learns
  // nothing); OUT_OF_RANGE for a range outside the buffer. The ticket is used up once
  // as many bytes as the buffer has were handed out.
  absl::StatusOr<std::shared_ptr<const Source>> Redeem(const Request& request, absl::Time now);

  // Drops the expired offers (and with them their buffers).
  void Expire(absl::Time now);
  // Drops one offer now (its sender is done with it, served or not); reads already
  // under way go on.
  void Withdraw(const Ticket& ticket) { offers_.erase(ticket); }
  size_t open() const { return offers_.size(); }

 private:
  struct Offered {
    std::shared_ptr<const Source> source;
    absl::Time expires;
    uint64_t handed_out = 0;  // bytes granted so far
  };
  const absl::Duration lifetime_;
  const int64_t max_;
  absl::flat_hash_map<Ticket, Offered, absl::Hash<Ticket>> offers_;
};

}  // namespace switchyard::bulk
