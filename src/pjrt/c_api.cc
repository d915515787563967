#include "pjrt/c_api.h"

#include <string>

namespace switchyard::pjrt {

bool HasFunction(const PJRT_Api* api, size_t offset, const void* function) {
  // Read the pointer only if the plugin's table is long enough to hold it.
  if (api->struct_size < offset + sizeof(void*)) return false;
  return function != nullptr;
}

absl::Status ToStatus(const PJRT_Api* api, PJRT_Error* error) {
  if (error == nullptr) return absl::OkStatus();
  Args<PJRT_Error_Message_Args> message;
  message->error = error;
  api->PJRT_Error_Message(message.get());
  std::string text(message->message, message->message_size);

  Args<PJRT_Error_GetCode_Args> code;
  code->error = error;
  absl::StatusCode status_code = absl::StatusCode::kUnknown;
  if (api->PJRT_Error_GetCode(code.get()) == nullptr) {
    status_code = static_cast<absl::StatusCode>(code->code);
  }

  Args<PJRT_Error_Destroy_Args> destroy;
  destroy->error = error;
  api->PJRT_Error_Destroy(destroy.get());
  if (status_code == absl::StatusCode::kOk) status_code = absl::StatusCode::kUnknown;
  return absl::Status(status_code, text);
}

}  // namespace switchyard::pjrt

namespace switchyard::pjrt {
namespace {

struct TypePair {
  DType dtype;
  PJRT_Buffer_Type pjrt;
};

constexpr TypePair kTypes[] = {
    {DType::kPred, PJRT_Buffer_Type_PRED},
    {DType::kS8, PJRT_Buffer_Type_S8},
    {DType::kS16, PJRT_Buffer_Type_S16},
    {DType::kS32, PJRT_Buffer_Type_S32},
    {DType::kS64, PJRT_Buffer_Type_S64},
    {DType::kU8, PJRT_Buffer_Type_U8},
    {DType::kU16, PJRT_Buffer_Type_U16},
    {DType::kU32, PJRT_Buffer_Type_U32},
    {DType::kU64, PJRT_Buffer_Type_U64},
    {DType::kF16, PJRT_Buffer_Type_F16},
    {DType::kF32, PJRT_Buffer_Type_F32},
    {DType::kF64, PJRT_Buffer_Type_F64},
    {DType::kBF16, PJRT_Buffer_Type_BF16},
    {DType::kToken, PJRT_Buffer_Type_TOKEN},
    {DType::kC64, PJRT_Buffer_Type_C64},
    {DType::kC128, PJRT_Buffer_Type_C128},
    {DType::kF8E5M2, PJRT_Buffer_Type_F8E5M2},
    {DType::kF8E4M3FN, PJRT_Buffer_Type_F8E4M3FN},
    {DType::kF8E4M3B11FNUZ, PJRT_Buffer_Type_F8E4M3B11FNUZ},
    {DType::kF8E5M2FNUZ, PJRT_Buffer_Type_F8E5M2FNUZ},
    {DType::kF8E4M3FNUZ, PJRT_Buffer_Type_F8E4M3FNUZ},
    {DType::kS4, PJRT_Buffer_Type_S4},
    {DType::kU4, PJRT_Buffer_Type_U4},
    {DType::kS2, PJRT_Buffer_Type_S2},
    {DType::kU2, PJRT_Buffer_Type_U2},
    {DType::kF8E4M3, PJRT_Buffer_Type_F8E4M3},
    {DType::kF8E3M4, PJRT_Buffer_Type_F8E3M4},
    {DType::kF4E2M1FN, PJRT_Buffer_Type_F4E2M1FN},
    {DType::kF8E8M0FNU, PJRT_Buffer_Type_F8E8M0FNU},
};

}  // namespace

PJRT_Buffer_Type ToPjrtType(DType dtype) {
  for (const TypePair& pair : kTypes) {
    if (pair.dtype == dtype) return pair.pjrt;
  }
  return PJRT_Buffer_Type_INVALID;
}

DType FromPjrtType(PJRT_Buffer_Type type) {
  for (const TypePair& pair : kTypes) {
    if (pair.pjrt == type) return pair.dtype;
  }
  return DType::kInvalid;
}

}  // namespace switchyard::pjrt
