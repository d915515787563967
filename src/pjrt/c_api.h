#pragma once

// Private to src/pjrt: the C header, struct-size handling and error conversion.
//
// Why the tail: the header we compile against (PJRT 0.81, from the xla-cpu-pjrt
// wheel) is older than the plugins we load (0.115 for jaxlib 0.11.2's XLA). A plugin
// may reject an argument struct whose `struct_size` is smaller than its own, and
// ignores what lies past the fields it knows. So every argument struct is built
// here, zero-extended by a tail that covers fields newer plugins appended; zero
// means "not set" for every appended field. (The 0.115 CPU plugin happens to accept
// the 0.81 sizes for every call we make; other plugins check.) This is the only
// place that knows about it.

#include <cstddef>
#include <cstring>
#include <new>

#include "absl/status/status.h"
#include "pjrt_c_api.h"

namespace switchyard::pjrt {

// Room for fields appended to an argument struct after our header's version.
inline constexpr size_t kArgsTailBytes = 512;

// A zero-initialized `T` followed by a zeroed tail, with `struct_size` covering both.
template <typename T>
class Args {
 public:
  Args() {
    std::memset(storage_, 0, sizeof(storage_));
    value_ = new (storage_) T{};
    value_->struct_size = sizeof(storage_);
  }
  Args(const Args&) = delete;
  Args& operator=(const Args&) = delete;

  T* operator->() { return value_; }
  T* get() { return value_; }

 private:
  alignas(std::max_align_t) unsigned char storage_[sizeof(T) + kArgsTailBytes];
  T* value_;
};

// Converts and destroys a `PJRT_Error*` (nullptr is OK).
absl::Status ToStatus(const PJRT_Api* api, PJRT_Error* error);

// True if the plugin's function table has the entry at `offset` and it is set.
bool HasFunction(const PJRT_Api* api, size_t offset, const void* function);

}  // namespace switchyard::pjrt

// Calls api->PJRT_<name>(args) and returns its status; UNIMPLEMENTED if the plugin's
// table is too old to have the function.
#define SY_PJRT_CALL(api, name, args)                                                 \
  (::switchyard::pjrt::HasFunction((api), offsetof(PJRT_Api, PJRT_##name),            \
                                   reinterpret_cast<const void*>((api)->PJRT_##name)) \
       ? ::switchyard::pjrt::ToStatus((api), (api)->PJRT_##name(args))                \
       : ::absl::UnimplementedError("the PJRT plugin does not implement PJRT_" #name))

#include "pjrt/dtype.h"

namespace switchyard::pjrt {

// PJRT_Buffer_Type_INVALID / DType::kInvalid for types the other side lacks.
PJRT_Buffer_Type ToPjrtType(DType dtype);
DType FromPjrtType(PJRT_Buffer_Type type);

}  // namespace switchyard::pjrt
