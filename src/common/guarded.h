#pragma once

// The last line of defence at every edge that serves a peer: an exception escaping a
// handler would end the call with UNKNOWN (gRPC) or the process. Allocation failures
// become RESOURCE_EXHAUSTED; anything else INTERNAL, naming `what`.

#include <exception>
#include <new>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace switchyard {

// `f()` returns absl::Status or absl::StatusOr<T>; so does Guarded.
template <typename F>
auto Guarded(absl::string_view what, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(absl::StrCat("out of memory while handling ", what));
  } catch (const std::exception& e) {
    return absl::InternalError(
        absl::StrCat("unexpected error while handling ", what, ": ", e.what()));
  }
}

}  // namespace switchyard
