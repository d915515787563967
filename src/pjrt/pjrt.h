#pragma once

// The public face of src/pjrt: C++ over the PJRT C API. Callers include this
// header only; nothing outside src/pjrt sees pjrt_c_api.h.

#include "pjrt/buffer.h"           // IWYU pragma: export
#include "pjrt/client.h"           // IWYU pragma: export
#include "pjrt/dtype.h"            // IWYU pragma: export
#include "pjrt/event.h"            // IWYU pragma: export
#include "pjrt/executable.h"       // IWYU pragma: export
#include "pjrt/ffi.h"              // IWYU pragma: export
#include "pjrt/key_value_store.h"  // IWYU pragma: export
#include "pjrt/plugin.h"           // IWYU pragma: export
