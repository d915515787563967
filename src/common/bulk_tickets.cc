#include "common/bulk_tickets.h"

#include "absl/strings/str_cat.h"

namespace switchyard::bulk {

absl::StatusOr<Ticket> Tickets::Offer(std::shared_ptr<const Source> source, absl::Time now) {
  if (static_cast<int64_t>(offers_.size()) >= max_) Expire(now);
  if (static_cast<int64_t>(offers_.size()) >= max_) {
    return absl::ResourceExhaustedError(
        absl::StrCat(offers_.size(), " bulk transfers are open on this server"));
  }
  Ticket ticket = NewTicket();
  offers_[ticket] = Offered{std::move(source), now + lifetime_, 0};
  return ticket;
}

absl::StatusOr<std::shared_ptr<const Source>> Tickets::Redeem(const Request& request,
                                                              absl::Time now) {
  auto it = offers_.find(request.ticket);
  if (it == offers_.end() || it->second.expires <= now) {
    if (it != offers_.end()) offers_.erase(it);
    return absl::PermissionDeniedError("no bulk transfer has this ticket (used up or expired)");
  }
  Offered& offered = it->second;
  const auto size = static_cast<uint64_t>(offered.source->size());
  if (request.offset > size || request.length > size - request.offset) {
    return absl::OutOfRangeError(absl::StrCat("bytes [", request.offset, ", +", request.length,
                                              ") lie outside a buffer of ", size));
  }
  std::shared_ptr<const Source> source = offered.source;
  offered.handed_out += request.length;
  if (offered.handed_out >= size) offers_.erase(it);
  return source;
}

void Tickets::Expire(absl::Time now) {
  absl::erase_if(offers_, [now](const auto& entry) { return entry.second.expires <= now; });
}

}  // namespace switchyard::bulk
