#include "worker/transfers.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <optional>
#include <thread>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/bulk_client.h"
#include "common/call_metadata.h"
#include "common/copy_count.h"
#include "common/grpc_server.h"
#include "common/grpc_status.h"
#include "common/guarded.h"
#include "common/host_array.h"
#include "common/limits.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/thread_name.h"
#include "common/trace.h"
#include "common/wire_numbers.h"
#include "pjrt/buffer.h"
#include "pjrt/dtype.h"

namespace switchyard::worker {
namespace {

// A pull of one buffer from a peer, queueing behind the operations that make it.
constexpr absl::Duration kTransferTimeout = absl::Minutes(10);
// On a status from PullOffered: the data plane did not serve this pull; fetch over gRPC.
constexpr char kFetchAgain[] = "switchyard.dev/fetch-again";

// A stored buffer's bytes for the data plane: read range by range from the device
// where the plugin allows it, else from one host copy made now.
class BufferSource final : public bulk::Source {
 public:
  BufferSource(std::shared_ptr<const StoredBuffer> stored, std::unique_ptr<HostBytes> whole)
      : stored_(std::move(stored)), whole_(std::move(whole)) {}
  int64_t size() const override { return stored_->buffer->host_size_bytes(); }
  absl::Span<const char> Contiguous() const override {
    return whole_ == nullptr ? absl::Span<const char>() : whole_->span();
  }
  absl::Status Read(int64_t offset, absl::Span<char> out) const override {
    return stored_->buffer->CopyRangeToHost(offset, out);
  }

 private:
  std::shared_ptr<const StoredBuffer> stored_;
  std::unique_ptr<HostBytes> whole_;
};

// The read of a piece's source on its peer.
GetBufferRequest ReadOf(const BufferPiece& piece, bool bulk) {
  GetBufferRequest request;
  request.set_buffer_id(piece.source_buffer_id());
  request.set_bulk(bulk);
  if (piece.source_stream() != 0) {
    request.set_after_stream(piece.source_stream());
    request.set_after_seq(piece.source_seq());
  } else {
    request.set_wait_ms(limits::kBufferWaitMs);  // its producer may still be on the way
  }
  return request;
}

// A piece that is all of its source and all of the buffer (a reshard between equal
// boxes names its coordinates; a copy leaves them out). The source's own dims are
// checked once it arrives.
bool IsWhole(const BufferPiece& piece, const std::vector<int64_t>& dims) {
  auto zeros = [&](const auto& field) {
    return field.empty() ||
           (static_cast<size_t>(field.size()) == dims.size() &&
            std::all_of(field.begin(), field.end(), [](int64_t v) { return v == 0; }));
  };
  const bool whole_size =
      piece.size().empty() ||
      std::equal(piece.size().begin(), piece.size().end(), dims.begin(), dims.end());
  return zeros(piece.source_start()) && zeros(piece.dest_start()) && whole_size;
}

}  // namespace

absl::StatusOr<int64_t> CheckHeader(const BufferHeader& header) {
  const auto dtype = static_cast<pjrt::DType>(header.dtype());
  if (pjrt::BitWidth(dtype) == 0) {
    return absl::InvalidArgumentError(absl::StrCat("unsupported dtype ", header.dtype()));
  }
  const std::vector<int64_t> dims(header.dims().begin(), header.dims().end());
  SY_ASSIGN_OR_RETURN(const int64_t elements, CheckedElements(dims, "buffer header"));
  int64_t bytes = pjrt::HostByteSize(dtype, elements);
  if (static_cast<uint64_t>(bytes) != header.size_bytes()) {
    return absl::InvalidArgumentError(absl::StrCat(pjrt::DTypeName(dtype), " array of ", elements,
                                                   " elements has ", bytes, " bytes, not ",
                                                   header.size_bytes()));
  }
  return bytes;
}

absl::StatusOr<std::shared_ptr<const bulk::Source>> BulkSourceOf(
    std::shared_ptr<const StoredBuffer> stored) {
  if (stored->buffer == nullptr) return absl::FailedPreconditionError("not a device buffer");
  std::unique_ptr<HostBytes> whole;
  if (!stored->buffer->can_copy_ranges()) {
    SY_ASSIGN_OR_RETURN(whole, HostBytes::Allocate(stored->buffer->host_size_bytes()));
    SY_RETURN_IF_ERROR(stored->buffer->ToHost(absl::MakeSpan(whole->data(), whole->size())));
  }
  return std::make_shared<BufferSource>(std::move(stored), std::move(whole));
}

void Transfers::SetOwnAddress(std::string address) {
  absl::MutexLock lock(&mutex_);
  own_address_ = std::move(address);
}

Worker::Stub* Transfers::Peer(const std::string& address) {
  absl::MutexLock lock(&mutex_);
  auto& stub = peers_[address];
  if (stub == nullptr) stub = Worker::NewStub(CreateChannel(address));
  return stub.get();
}

absl::StatusOr<Transfers::Source> Transfers::Fetch(const BufferPiece& piece) {
  const std::string& address = piece.source_address();
  const uint64_t buffer_id = piece.source_buffer_id();
  bool local;
  {
    absl::MutexLock lock(&mutex_);
    local = address.empty() || address == own_address_;
  }
  Source source;
  if (local) {
    if (piece.source_stream() != 0) {
      // Made by an operation of that stream: present once it has run (on this very
      // stream, it has), and never if it did not.
      SY_RETURN_IF_ERROR(progress_->WaitFor(piece.source_stream(), piece.source_seq(),
                                            absl::Now() + kTransferTimeout,
                                            absl::Seconds(limits::kStreamAppearS), nullptr));
    }
    // Anything else that makes a local buffer (a put, an earlier operation of this
    // stream) is done by now: a missing source is missing for good.
    SY_ASSIGN_OR_RETURN(std::shared_ptr<const StoredBuffer> stored, buffers_->Get(buffer_id));
    source.dims = stored->buffer->dims();
    SY_ASSIGN_OR_RETURN(source.bytes, HostBytes::Allocate(stored->buffer->host_size_bytes()));
    SY_RETURN_IF_ERROR(
        stored->buffer->ToHost(absl::MakeSpan(source.bytes->data(), source.bytes->size())));
    return source;
  }
  if (!IsMetadataValue(piece.source_boot())) {
    return absl::InvalidArgumentError("source_boot must be printable ASCII");
  }
  absl::StatusOr<Source> pulled = Pull(piece, /*bulk=*/WantsBulk(address));
  if (pulled.status().GetPayload(kFetchAgain).has_value()) {
    pulled = Pull(piece, /*bulk=*/false);
  }
  if (!pulled.ok()) {
    const absl::Status& status = pulled.status();
    // A peer that cannot be reached took the source with it.
    const absl::StatusCode code = absl::IsUnavailable(status) || absl::IsCancelled(status)
                                      ? absl::StatusCode::kDataLoss
                                      : status.code();
    return absl::Status(code, absl::StrCat("pulling buffer ", buffer_id, " from worker ", address,
                                           ": ", status.message()));
  }
  return pulled;
}

bool Transfers::WantsBulk(const std::string& address) {
  absl::MutexLock lock(&mutex_);
  return !no_bulk_.contains(address);
}

absl::StatusOr<Transfers::Source> Transfers::Pull(const BufferPiece& piece, bool bulk) {
  const std::string& address = piece.source_address();
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + kTransferTimeout));
  if (!piece.source_boot().empty()) context.AddMetadata(kBootMetadata, piece.source_boot());
  auto reader = Peer(address)->GetBuffer(&context, ReadOf(piece, bulk));
  Source source;
  GetBufferChunk chunk;
  std::optional<BulkOffer> offer;
  size_t filled = 0;
  absl::Status bad;
  while (reader->Read(&chunk)) {
    if (chunk.has_header() && source.bytes == nullptr) {
      absl::StatusOr<Source> made = NewSource(chunk.header());
      if (!made.ok()) {
        bad = made.status();
        context.TryCancel();
        break;
      }
      source = *std::move(made);
      if (chunk.has_offer()) {
        // The bytes come on the data plane; the stream ends here.
        offer = chunk.offer();
        continue;
      }
    }
    if (source.bytes == nullptr || offer.has_value() ||
        filled + chunk.data().size() > source.bytes->size()) {
      bad = absl::DataLossError("the peer sent more bytes than its header announced");
      context.TryCancel();
      break;
    }
    std::memcpy(source.bytes->data() + filled, chunk.data().data(), chunk.data().size());
    CountCopied(chunk.data().size(), 3);  // the kernel's, protobuf's parse, then ours
    filled += chunk.data().size();
  }
  absl::Status status = FromGrpcStatus(reader->Finish());
  if (status.ok()) status = bad;
  if (status.ok() && offer.has_value()) {
    status = PullOffered(address, *offer, *source.bytes);
    if (status.ok()) filled = source.bytes->size();
  }
  if (status.ok() && (source.bytes == nullptr || filled != source.bytes->size())) {
    status = absl::DataLossError(absl::StrCat("the peer sent ", filled, " bytes of ",
                                              source.bytes ? source.bytes->size() : 0));
  }
  if (!status.ok()) return status;
  return source;
}

absl::StatusOr<Transfers::Source> Transfers::NewSource(const BufferHeader& header) {
  absl::StatusOr<int64_t> size = CheckHeader(header);
  if (!size.ok()) {
    return absl::DataLossError(
        absl::StrCat("the peer sent a bad header: ", size.status().message()));
  }
  Source source;
  SY_ASSIGN_OR_RETURN(source.bytes, HostBytes::Allocate(*size));
  source.dims.assign(header.dims().begin(), header.dims().end());
  return source;
}

std::vector<std::optional<BufferOffer>> Transfers::AskOffers(
    const AssembleBuffersRequest& request) {
  std::vector<std::optional<BufferOffer>> offers(request.buffers_size());
  // By peer and the boot it is expected to have: the pieces each call may ask for.
  std::map<std::pair<std::string, std::string>, std::vector<int>> by_peer;
  for (int i = 0; i < request.buffers_size(); ++i) {
    const AssembleBufferRequest& buffer = request.buffers(i);
    if (buffer.pieces_size() != 1 ||
        buffer.header().size_bytes() > limits::kOfferedAtOnceMaxBytes) {
      continue;
    }
    const BufferPiece& piece = buffer.pieces(0);
    const std::vector<int64_t> dims(buffer.header().dims().begin(), buffer.header().dims().end());
    const std::string& address = piece.source_address();
    if (address.empty() || !IsWhole(piece, dims) || !IsMetadataValue(piece.source_boot()) ||
        !WantsBulk(address)) {
      continue;
    }
    {
      absl::MutexLock lock(&mutex_);
      if (address == own_address_) continue;
    }
    by_peer[{address, piece.source_boot()}].push_back(i);
  }
  for (const auto& [peer, entries] : by_peer) {
    if (entries.size() < 2) continue;  // one alone asks as it pulls
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + kTransferTimeout));
    if (!peer.second.empty()) context.AddMetadata(kBootMetadata, peer.second);
    OfferBuffersRequest ask;
    for (int i : entries) *ask.add_reads() = ReadOf(request.buffers(i).pieces(0), /*bulk=*/true);
    OfferBuffersResponse answer;
    // Any failure (an older peer, one gone): each is fetched alone, which says why.
    if (!Peer(peer.first)->OfferBuffers(&context, ask, &answer).ok() ||
        answer.offers_size() != static_cast<int>(entries.size())) {
      continue;
    }
    for (size_t k = 0; k < entries.size(); ++k) {
      const BufferOffer& offer = answer.offers(static_cast<int>(k));
      if (offer.code() == 0 && offer.has_offer()) offers[entries[k]] = offer;
    }
  }
  return offers;
}

absl::Status Transfers::PullOffered(const std::string& peer, const BulkOffer& offer,
                                    HostBytes& bytes) {
  absl::StatusOr<bulk::Ticket> ticket = bulk::TicketFromBytes(offer.ticket());
  if (!ticket.ok()) return absl::DataLossError(ticket.status().message());
  trace::Scoped span(absl::StrCat("bulk pull ", bytes.size(), " bytes"), "transfer");
  absl::Status status =
      bulk::Pull(offer.address(), *ticket, absl::MakeSpan(bytes.data(), bytes.size()),
                 bulk::StreamsFor(bytes.size()));
  if (status.ok()) {
    bulk_bytes_pulled_ += bytes.size();
    return status;
  }
  const bulk::PullFailure failure = bulk::ClassifyFailure(status);
  if (failure == bulk::PullFailure::kBroken) return status;
  ++bulk_fallbacks_;
  if (failure == bulk::PullFailure::kUnreachable) {
    // This peer's bytes come over gRPC from now on.
    bool first;
    {
      absl::MutexLock lock(&mutex_);
      first = no_bulk_.insert(peer).second;
    }
    if (first) {
      SY_LOG(Warning) << "bulk transfers from worker " << peer
                      << " go over gRPC: " << status.message();
    }
  }
  status.SetPayload(kFetchAgain, absl::Cord("1"));
  return status;
}

absl::Status Transfers::Build(const AssembleBufferRequest& request, uint64_t owner,
                              const BufferOffer* offered) {
  const BufferHeader& header = request.header();
  SY_ASSIGN_OR_RETURN(int64_t size, CheckHeader(header));
  SY_ASSIGN_OR_RETURN(int ordinal, devices_->OrdinalOf(header.device_id()));
  const auto dtype = static_cast<pjrt::DType>(header.dtype());
  const int64_t element_bytes = pjrt::HostElementBytes(dtype);
  if (element_bytes == 0) return absl::UnimplementedError("sub-byte types cannot be assembled");
  const std::vector<int64_t> dims(header.dims().begin(), header.dims().end());
  SY_ASSIGN_OR_RETURN(BufferStore::Reservation memory, buffers_->Reserve(size, [&] {
    return absl::StrCat("buffer ", header.buffer_id(), " (a transfer)");
  }));
  // The common case, a whole buffer moved: no cutting and pasting.
  std::map<std::pair<std::string, uint64_t>, Source> fetched;  // each source once
  if (request.pieces_size() == 1 && IsWhole(request.pieces(0), dims)) {
    const BufferPiece& piece = request.pieces(0);
    absl::StatusOr<Source> source_or = absl::UnknownError("not offered");
    if (offered != nullptr) {
      // Asked for with its batch. Should that fail (an expired ticket, a plane out of
      // reach), the piece is fetched alone, which asks again.
      source_or = NewSource(offered->header());
      if (source_or.ok() &&
          !PullOffered(piece.source_address(), offered->offer(), *source_or->bytes).ok()) {
        source_or = absl::UnknownError("offered pull failed");
      }
      if (source_or.ok()) ++offered_at_once_;
    }
    if (!source_or.ok()) source_or = Fetch(piece);
    SY_ASSIGN_OR_RETURN(Source source, std::move(source_or));
    if (source.dims == dims) {
      SY_ASSIGN_OR_RETURN(auto buffer, client_->BufferFromOwnedHost(source.bytes, dtype, dims,
                                                                    ordinal, header.memory_kind()));
      return buffers_->Add(header.buffer_id(), header.device_id(), std::move(buffer), owner);
    }
    if (piece.size().empty()) return absl::InvalidArgumentError("source shape differs");
    // A corner of a bigger source: cut below.
    fetched.emplace(std::make_pair(piece.source_address(), piece.source_buffer_id()),
                    std::move(source));
  }
  SY_ASSIGN_OR_RETURN(std::unique_ptr<HostBytes> data, HostBytes::Allocate(size));
  std::memset(data->data(), 0, data->size());
  for (const BufferPiece& piece : request.pieces()) {
    auto key = std::make_pair(piece.source_address(), piece.source_buffer_id());
    auto it = fetched.find(key);
    if (it == fetched.end()) {
      SY_ASSIGN_OR_RETURN(Source source, Fetch(piece));
      it = fetched.emplace(key, std::move(source)).first;
    }
    const Source& source = it->second;
    const size_t rank = source.dims.size();
    if (rank != dims.size())
      return absl::InvalidArgumentError("piece rank differs from the buffer's");
    std::vector<int64_t> box_size(piece.size().begin(), piece.size().end());
    if (box_size.empty()) box_size = source.dims;
    auto origin = [&](const auto& field) {
      std::vector<int64_t> out(field.begin(), field.end());
      if (out.empty()) out.assign(rank, 0);
      return out;
    };
    IndexDomain from{origin(piece.source_start()), {}};
    IndexDomain to{origin(piece.dest_start()), {}};
    if (from.start.size() != rank || to.start.size() != rank || box_size.size() != rank) {
      return absl::InvalidArgumentError("piece coordinates have the wrong rank");
    }
    // Each coordinate within its array, so the sums below cannot overflow.
    for (size_t d = 0; d < rank; ++d) {
      if (from.start[d] < 0 || from.start[d] > source.dims[d] || to.start[d] < 0 ||
          to.start[d] > dims[d] || box_size[d] < 0 || box_size[d] > source.dims[d]) {
        return absl::InvalidArgumentError(absl::StrCat("piece of buffer ", piece.source_buffer_id(),
                                                       " lies outside its arrays in dimension ",
                                                       d));
      }
    }
    for (size_t d = 0; d < rank; ++d) {
      from.limit.push_back(from.start[d] + box_size[d]);
      to.limit.push_back(to.start[d] + box_size[d]);
    }
    SY_ASSIGN_OR_RETURN(std::string box,
                        ExtractShard(absl::string_view(source.bytes->data(), source.bytes->size()),
                                     source.dims, {}, element_bytes, from));
    SY_RETURN_IF_ERROR(
        InsertShard(box, dims, {}, element_bytes, to, absl::MakeSpan(data->data(), data->size())));
  }
  SY_ASSIGN_OR_RETURN(auto buffer, client_->BufferFromOwnedHost(std::move(data), dtype, dims,
                                                                ordinal, header.memory_kind()));
  return buffers_->Add(header.buffer_id(), header.device_id(), std::move(buffer), owner);
}

absl::Status Transfers::Assemble(const AssembleBufferRequest& request, uint64_t owner) {
  return Assemble(request, owner, nullptr);
}

absl::Status Transfers::Assemble(const AssembleBufferRequest& request, uint64_t owner,
                                 const BufferOffer* offered) {
  trace::Scoped span(absl::StrCat("assemble ", request.pieces_size(), " pieces"), "transfer");
  absl::Status status = Guarded("AssembleBuffer", [&] { return Build(request, owner, offered); });
  if (!status.ok() && !buffers_->Contains(request.header().buffer_id())) {
    buffers_->AddError(request.header().buffer_id(), status, owner);
  }
  return status;
}

absl::Status Transfers::AssembleAll(const AssembleBuffersRequest& request, uint64_t owner) {
  const int count = request.buffers_size();
  if (count > limits::kAssembleBatchMax) {
    return absl::InvalidArgumentError(
        absl::StrCat("a batch of ", count, " buffers; at most ", limits::kAssembleBatchMax));
  }
  batched_ += count;
  trace::Scoped span(absl::StrCat("assemble ", count, " buffers"), "transfer");
  const std::vector<std::optional<BufferOffer>> offers = AskOffers(request);
  std::atomic<int> next{0};
  absl::Mutex mutex;
  absl::Status first;
  auto work = [&] {
    for (int i = next++; i < count; i = next++) {
      const std::optional<BufferOffer>& offer = offers[i];
      absl::Status status = Assemble(request.buffers(i), owner, offer ? &*offer : nullptr);
      if (status.ok()) continue;
      absl::MutexLock lock(&mutex);
      if (first.ok()) first = std::move(status);
    }
  };
  std::vector<std::thread> helpers;
  const int64_t parallel = std::min<int64_t>(count, limits::kAssembleParallel);
  for (int64_t h = 1; h < parallel; ++h) {
    helpers.emplace_back([&] {
      NameThisThread("sy-assemble");
      work();
    });
  }
  work();
  for (std::thread& helper : helpers) helper.join();
  return first;
}

}  // namespace switchyard::worker
