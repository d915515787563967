#pragma once

#include <cstdint>
#include <string>

namespace switchyard::pjrt {

// Element types numbered as XLA's PrimitiveType (and switchyard.DType on the wire).
enum class DType : int {
  kInvalid = 0,
  kPred = 1,
  kS8 = 2,
  kS16 = 3,
  kS32 = 4,
  kS64 = 5,
  kU8 = 6,
  kU16 = 7,
  kU32 = 8,
  kU64 = 9,
  kF16 = 10,
  kF32 = 11,
  kF64 = 12,
  kC64 = 15,
  kBF16 = 16,
  kToken = 17,  // ordering only: no data (JAX's ordered effects pass them between launches)
  kC128 = 18,
  kF8E5M2 = 19,
  kF8E4M3FN = 20,
  kS4 = 21,
  kU4 = 22,
  kF8E4M3B11FNUZ = 23,
  kF8E5M2FNUZ = 24,
  kF8E4M3FNUZ = 25,
  kS2 = 26,
  kU2 = 27,
  kF8E4M3 = 28,
  kF8E3M4 = 29,
  kF4E2M1FN = 30,
  kF8E8M0FNU = 31,
};

// Bits per element; 0 for kInvalid or an unknown value.
int BitWidth(DType dtype);
std::string DTypeName(DType dtype);
// Dense byte size of an array of `num_elements` in device memory (sub-byte types packed).
int64_t DenseByteSize(DType dtype, int64_t num_elements);
// Bytes per element in host memory as PJRT takes and gives arrays (and as JAX's numpy
// arrays hold them): sub-byte types take one byte each, unpacked. 0 for tokens.
int HostElementBytes(DType dtype);
int64_t HostByteSize(DType dtype, int64_t num_elements);

}  // namespace switchyard::pjrt
