// What the bulk data plane decodes from whoever connects: a request (magic, ticket,
// offset, length) redeemed against open offers, and, on the pulling side, a reply's
// head. Input: one selector byte, then the bytes. Selector bit 0 swaps in the ticket of
// an open offer, so the range checks are reached and not only the ticket's.

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/time/time.h"
#include "common/bulk_tickets.h"
#include "common/bulk_wire.h"

namespace {

using switchyard::bulk::Source;

class Sized final : public Source {
 public:
  explicit Sized(int64_t size) : size_(size) {}
  int64_t size() const override { return size_; }
  absl::Status Read(int64_t, absl::Span<char>) const override { return absl::OkStatus(); }

 private:
  const int64_t size_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return -1;
  const absl::string_view bytes(reinterpret_cast<const char*>(data + 1), size - 1);
  (void)switchyard::bulk::ParseReplyHead(bytes.substr(0, switchyard::bulk::kReplyHeadBytes));
  absl::StatusOr<switchyard::bulk::Request> request = switchyard::bulk::ParseRequest(bytes);
  if (!request.ok()) return 0;
  const absl::Time now = absl::UnixEpoch() + absl::Hours(1);
  switchyard::bulk::Tickets tickets(absl::Seconds(60), 4);
  absl::StatusOr<switchyard::bulk::Ticket> offered =
      tickets.Offer(std::make_shared<Sized>(int64_t{1} << ((data[0] >> 2) % 48)), now);
  if (!offered.ok()) __builtin_trap();
  if (data[0] & 1) request->ticket = *offered;
  absl::StatusOr<std::shared_ptr<const Source>> source = tickets.Redeem(*request, now);
  // A grant lies inside the buffer.
  if (source.ok() && (request->offset > static_cast<uint64_t>((*source)->size()) ||
                      request->length > (*source)->size() - request->offset)) {
    __builtin_trap();
  }
  return 0;
}
