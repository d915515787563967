#include "common/element_type.h"

#include <array>

namespace switchyard {
namespace {

// Indexed by PrimitiveType number (xla_data.proto); 0 where there is no data.
constexpr std::array<int, 32> kBits = {
    0,    // 0 INVALID
    8,    // 1 PRED
    8,    // 2 S8
    16,   // 3 S16
    32,   // 4 S32
    64,   // 5 S64
    8,    // 6 U8
    16,   // 7 U16
    32,   // 8 U32
    64,   // 9 U64
    16,   // 10 F16
    32,   // 11 F32
    64,   // 12 F64
    0,    // 13 TUPLE
    0,    // 14 OPAQUE_TYPE
    64,   // 15 C64
    16,   // 16 BF16
    0,    // 17 TOKEN
    128,  // 18 C128
    8,    // 19 F8E5M2
    8,    // 20 F8E4M3FN
    4,    // 21 S4
    4,    // 22 U4
    8,    // 23 F8E4M3B11FNUZ
    8,    // 24 F8E5M2FNUZ
    8,    // 25 F8E4M3FNUZ
    2,    // 26 S2
    2,    // 27 U2
    8,    // 28 F8E4M3
    8,    // 29 F8E3M4
    4,    // 30 F4E2M1FN
    8,    // 31 F8E8M0FNU
};

}  // namespace

int ElementBits(int primitive_type) {
  if (primitive_type < 0 || primitive_type >= static_cast<int>(kBits.size())) return 0;
  return kBits[primitive_type];
}

int HostElementBytes(int primitive_type) {
  const int bits = ElementBits(primitive_type);
  return bits == 0 ? 0 : (bits < 8 ? 1 : bits / 8);
}

int64_t DenseByteSize(int primitive_type, int64_t num_elements) {
  return (num_elements * ElementBits(primitive_type) + 7) / 8;
}

}  // namespace switchyard
