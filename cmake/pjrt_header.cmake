# Finds pjrt_c_api.h and the CPU plugin inside the Python venv; the header is not
# copied into the repository (see README, "Where the PJRT header comes from").
#
# PJRT_HEADER_DIR: directory holding pjrt_c_api.h (override with -DPJRT_HEADER_DIR=...).
# SWITCHYARD_TEST_PLUGIN: the plugin the tests load (override with -DSWITCHYARD_TEST_PLUGIN=...).
file(GLOB _sy_site "${SWITCHYARD_VENV}/lib/python3*/site-packages")
if(NOT PJRT_HEADER_DIR)
  find_path(PJRT_HEADER_DIR pjrt_c_api.h
    PATHS "${_sy_site}/xla_plugins/xla_cpu_pjrt/include" NO_DEFAULT_PATH)
endif()
if(NOT PJRT_HEADER_DIR)
  message(FATAL_ERROR "pjrt_c_api.h not found: run ./dev setup (it installs the xla-cpu-pjrt "
                      "wheel into .venv) or pass -DPJRT_HEADER_DIR=<dir>.")
endif()
# XLA_FFI_INCLUDE_DIR: holds xla/ffi/api/ffi.h, XLA's header-only FFI API, which jaxlib ships.
if(NOT XLA_FFI_INCLUDE_DIR)
  find_path(XLA_FFI_INCLUDE_DIR xla/ffi/api/ffi.h PATHS "${_sy_site}/jaxlib/include" NO_DEFAULT_PATH)
endif()
if(NOT XLA_FFI_INCLUDE_DIR)
  message(FATAL_ERROR "xla/ffi/api/ffi.h not found: run ./dev setup (jaxlib ships it) or pass "
                      "-DXLA_FFI_INCLUDE_DIR=<dir>.")
endif()
if(NOT SWITCHYARD_TEST_PLUGIN)
  find_file(SWITCHYARD_TEST_PLUGIN pjrt_c_api_cpu_plugin.so
    PATHS "${_sy_site}/lammps_jax_pjrt_cpu" NO_DEFAULT_PATH)
endif()
message(STATUS "PJRT header: ${PJRT_HEADER_DIR}")
message(STATUS "XLA FFI headers: ${XLA_FFI_INCLUDE_DIR}")
message(STATUS "PJRT plugin for tests: ${SWITCHYARD_TEST_PLUGIN}")
