# The include arrows of the house (docs/architecture.md, "The source tree"), checked on the
# sources themselves: run by ctest as house.include_rules (label unit),
#   cmake -DSOURCE_DIR=<repository root> -P tests/house/include_rules.cmake
# Fails naming each file and line that includes a header its directory may not use.

cmake_policy(SET CMP0057 NEW)  # if(... IN_LIST ...) in a script run with -P
set(violations "")

# Checks every #include "..." of the sources under `dir` against `mode`: ONLY (each include must
# start with one of the prefixes) or NEVER (none may).
function(check_includes dir mode)
  file(GLOB_RECURSE files "${SOURCE_DIR}/${dir}/*.h" "${SOURCE_DIR}/${dir}/*.cc")
  foreach(path IN LISTS files)
    file(STRINGS "${path}" lines REGEX "^#include \"")
    file(RELATIVE_PATH shown "${SOURCE_DIR}" "${path}")
    get_filename_component(own_dir "${path}" DIRECTORY)
    foreach(line IN LISTS lines)
      string(REGEX REPLACE "^#include \"([^\"]*)\".*" "\\1" header "${line}")
      # A header beside the file itself (tools/idem's "migrate_command.h") is its own.
      if(NOT header MATCHES "/" AND EXISTS "${own_dir}/${header}")
        continue()
      endif()
      set(matched FALSE)
      foreach(prefix IN LISTS ARGN)
        string(FIND "${header}" "${prefix}" at)
        if(at EQUAL 0)
          set(matched TRUE)
        endif()
      endforeach()
      if((mode STREQUAL "ONLY" AND NOT matched) OR (mode STREQUAL "NEVER" AND matched))
        string(REPLACE ";" " " listed "${ARGN}")
        string(APPEND violations "  ${shown}: ${line}  (${dir} ${mode} ${listed})\n")
      endif()
    endforeach()
  endforeach()
  set(violations "${violations}" PARENT_SCOPE)
endfunction()

# The base modules include only what lies below them.
check_includes(src/core ONLY idem/ core/)
check_includes(src/admin ONLY idem/ core/ admin/)
check_includes(src/log ONLY idem/ core/ log/)
# src/pg, the one PostgreSQL module: below every layer that uses it.
check_includes(src/pg ONLY idem/ core/ pg/)
# The stores know nothing of the layers built on them.
check_includes(src/store NEVER outbox/ worker/ gateway/ sweep/ chaos/ client/)
# The layers on PostgreSQL reach it through src/pg, never through the store's internals.
check_includes(src/outbox NEVER store/)
# The worker and emit layers stand beside the gateway, not on it.
check_includes(src/worker NEVER store/postgres/ gateway/)
check_includes(src/outbox NEVER gateway/ worker/)
check_includes(src/sweep NEVER store/)
check_includes(tools NEVER store/postgres/)

# The public headers. The core ones (what a user of a store alone includes) include the C++
# standard library and each other, nothing else; no public header includes Boost (Asio stays
# out of the public API) or an internal header.
set(core_headers status.h clock.h scope.h fingerprint.h record.h store.h store_wrapper.h
  version.h)
file(GLOB public_headers "${SOURCE_DIR}/include/idem/*.h")
foreach(path IN LISTS public_headers)
  get_filename_component(name "${path}" NAME)
  file(STRINGS "${path}" lines REGEX "^#include ")
  foreach(line IN LISTS lines)
    set(broken "")
    if(line MATCHES "^#include <boost/")
      set(broken "no public header includes Boost")
    elseif(line MATCHES "^#include \"" AND NOT line MATCHES "^#include \"idem/")
      set(broken "a public header includes only idem/ headers")
    elseif(name IN_LIST core_headers)
      if(line MATCHES "^#include \"idem/([^\"]*)\"" AND NOT CMAKE_MATCH_1 IN_LIST core_headers)
        set(broken "a core header includes only core headers")
      elseif(line MATCHES "^#include <([^>]*)>" AND CMAKE_MATCH_1 MATCHES "[./]")
        set(broken "a core header includes only the C++ standard library")
      endif()
    endif()
    if(broken)
      string(APPEND violations "  include/idem/${name}: ${line}  (${broken})\n")
    endif()
  endforeach()
endforeach()

if(violations)
  message(FATAL_ERROR "includes against the house's rules:\n${violations}")
endif()
message(STATUS "include rules hold")
