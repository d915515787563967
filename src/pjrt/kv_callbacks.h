#pragma once

// Private to src/pjrt: a `KeyValueStore` as the C callbacks of PJRT_Client_Create.

#include "pjrt/c_api.h"
#include "pjrt/key_value_store.h"

namespace switchyard::pjrt {

// Points the args' kv callbacks at `store`, which must outlive the client.
void BindKeyValueStore(KeyValueStore* store, PJRT_Client_Create_Args* args);

// The callbacks themselves, for tests.
PJRT_Error* KeyValueGet(PJRT_KeyValueGetCallback_Args* args);
PJRT_Error* KeyValueTryGet(PJRT_KeyValueTryGetCallback_Args* args);
PJRT_Error* KeyValuePut(PJRT_KeyValuePutCallback_Args* args);

}  // namespace switchyard::pjrt
