#pragma once

// Element types are numbered as XLA's PrimitiveType in every layer: switchyard.DType on
// the wire, pjrt::DType at the plugin. One table of their sizes serves them all.

#include <cstdint>

namespace switchyard {

// Bits per element; 0 for tokens (no data), PRIMITIVE_TYPE_INVALID and unknown numbers.
int ElementBits(int primitive_type);

// Bytes per element in host memory, as PJRT takes and gives arrays and JAX's numpy
// arrays hold them: sub-byte types take one byte each, unpacked. 0 where ElementBits is.
int HostElementBytes(int primitive_type);

// Dense byte size of `num_elements` in device memory (sub-byte types packed).
int64_t DenseByteSize(int primitive_type, int64_t num_elements);

}  // namespace switchyard
