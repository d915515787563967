#pragma once

// Captures messages as they arrive off the wire, to seed the fuzzers' corpora with real
// client traffic (tests/fuzz/README.md). With SWITCHYARD_RECORD_WIRE=DIR set, each
// distinct message is written once to DIR/<kind>/<hash of its bytes>; unset (always, in
// production), a call costs one branch.

#include "absl/strings/string_view.h"
#include "google/protobuf/message_lite.h"

namespace switchyard {

void RecordWire(absl::string_view kind, const google::protobuf::MessageLite& message);
// Bytes already serialized.
void RecordWireBytes(absl::string_view kind, absl::string_view bytes);

}  // namespace switchyard
