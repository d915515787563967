#pragma once

// Private to src/pjrt: the layout of the PJRT FFI extension (version 2), which the
// header we build against does not carry. Field order and types as in XLA's
// pjrt_c_api_ffi_extension.h as the plugins we load have it (read off the CPU plugin of
// jaxlib 0.11.2, PJRT 0.115, which checks each struct's size: handler registration
// takes typed-FFI handlers only, with no api_version; a type registration carries the
// type's XLA_FFI_TypeInfo, whose deleter frees user data, which so has none of its own).

#include <cstddef>
#include <cstdint>

#include "pjrt_c_api.h"

namespace switchyard::pjrt {

struct FfiTypeIdRegisterArgs {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  const char* type_name;
  size_t type_name_size;
  int64_t type_id;        // in: 0 (assign one); out: the id
  const void* type_info;  // const XLA_FFI_TypeInfo*, required
};

struct FfiUserData {
  int64_t type_id;
  void* data;  // freed by its type's deleter
};

struct FfiUserDataAddArgs {
  size_t struct_size;
  PJRT_Extension_Base* extension_start;
  PJRT_ExecuteContext* context;
  FfiUserData user_data;
};

struct FfiRegisterHandlerArgs {
  size_t struct_size;
  const char* target_name;
  size_t target_name_size;
  void* handler;  // an XLA_FFI_Handler*
  const char* platform_name;
  size_t platform_name_size;
  uint32_t traits;
};

struct FfiExtension {
  PJRT_Extension_Base base;
  PJRT_Error* (*type_id_register)(FfiTypeIdRegisterArgs* args);
  PJRT_Error* (*user_data_add)(FfiUserDataAddArgs* args);
  PJRT_Error* (*register_handler)(FfiRegisterHandlerArgs* args);  // version 2
};

}  // namespace switchyard::pjrt
