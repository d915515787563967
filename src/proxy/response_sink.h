#pragma once

// Where a session's responses go: its client stream. The session's own thread writes
// its answers (`Write`, which may block on the client); answers that come later, from
// threads every session shares (a worker connection's reader when a CheckValueReady
// is settled) or from a fetch's thread, are only queued (`Post`) and written by the
// sink's own thread, so a client that stops reading stalls nobody but itself. Closed
// when the stream ends; late answers are dropped then. Thread-safe.

#include <functional>
#include <utility>

#include "absl/time/time.h"
#include "common/ordered_writer.h"
#include "ifrt/ifrt_service.pb.h"

namespace switchyard::proxy {

class ResponseSink {
 public:
  using Response = ::xla::ifrt::proxy::IfrtResponse;
  using WriteFn = OrderedWriter<Response>::WriteFn;
  // `cancel` ends the stream: it unblocks a write to a client that stopped reading.
  ResponseSink(WriteFn write, std::function<void()> cancel)
      : cancel_(std::move(cancel)), writer_(std::move(write), "sy-session-out") {}

  // On the session's thread. False once closed or when the stream has failed.
  bool Write(Response response) { return writer_.Write(std::move(response)); }
  // From any other thread; never blocks.
  bool Post(Response response) { return writer_.Post(std::move(response)); }
  // Drops what is still queued; a write still blocked after `grace` cancels the stream.
  void Close(absl::Duration grace = absl::Seconds(1)) { writer_.Close(grace, cancel_); }

 private:
  const std::function<void()> cancel_;
  OrderedWriter<Response> writer_;
};

}  // namespace switchyard::proxy
