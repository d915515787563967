#include "pjrt/dtype.h"

#include "common/element_type.h"

namespace switchyard::pjrt {

int BitWidth(DType dtype) { return ElementBits(static_cast<int>(dtype)); }

std::string DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kPred:
      return "pred";
    case DType::kS8:
      return "s8";
    case DType::kS16:
      return "s16";
    case DType::kS32:
      return "s32";
    case DType::kS64:
      return "s64";
    case DType::kU8:
      return "u8";
    case DType::kU16:
      return "u16";
    case DType::kU32:
      return "u32";
    case DType::kU64:
      return "u64";
    case DType::kF16:
      return "f16";
    case DType::kF32:
      return "f32";
    case DType::kF64:
      return "f64";
    case DType::kC64:
      return "c64";
    case DType::kBF16:
      return "bf16";
    case DType::kC128:
      return "c128";
    case DType::kF8E5M2:
      return "f8e5m2";
    case DType::kF8E4M3FN:
      return "f8e4m3fn";
    case DType::kS4:
      return "s4";
    case DType::kU4:
      return "u4";
    case DType::kF8E4M3B11FNUZ:
      return "f8e4m3b11fnuz";
    case DType::kF8E5M2FNUZ:
      return "f8e5m2fnuz";
    case DType::kF8E4M3FNUZ:
      return "f8e4m3fnuz";
    case DType::kToken:
      return "token";
    case DType::kS2:
      return "s2";
    case DType::kU2:
      return "u2";
    case DType::kF8E4M3:
      return "f8e4m3";
    case DType::kF8E3M4:
      return "f8e3m4";
    case DType::kF4E2M1FN:
      return "f4e2m1fn";
    case DType::kF8E8M0FNU:
      return "f8e8m0fnu";
    case DType::kInvalid:
      break;
  }
  return "invalid(" + std::to_string(static_cast<int>(dtype)) + ")";
}

int64_t DenseByteSize(DType dtype, int64_t num_elements) {
  return switchyard::DenseByteSize(static_cast<int>(dtype), num_elements);
}

int HostElementBytes(DType dtype) { return switchyard::HostElementBytes(static_cast<int>(dtype)); }

int64_t HostByteSize(DType dtype, int64_t num_elements) {
  return num_elements * HostElementBytes(dtype);
}

}  // namespace switchyard::pjrt
