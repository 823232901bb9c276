# Checks that the gateway's rooms depend only downwards: every
# `#include "<room>/…"` in gateway/src/<room>/ must name the room itself or
# one it may use. Run as a build step (the build fails on a back-arrow) and
# as a CTest, with a fixture holding a deliberately wrong include that must
# fail the check.
#
#   cmake -DROOT=<dir holding the rooms> -P cmake/check_rooms.cmake
#
# The direction (docs/architecture.md): protocol (its own library) ← util,
# metrics, contents, jupyter ← wire ← kernels ← agent, http ← api ← config ← main.
cmake_minimum_required(VERSION 3.25)
if(NOT ROOT)
  message(FATAL_ERROR "check_rooms: pass -DROOT=<gateway source dir>")
endif()
get_filename_component(ROOT "${ROOT}" ABSOLUTE)

set(rooms util metrics contents jupyter wire kernels agent http api config)
set(allowed_util "")
set(allowed_metrics "")
set(allowed_contents util)
set(allowed_jupyter util)
set(allowed_wire jupyter util metrics)
set(allowed_kernels jupyter wire contents metrics util)
set(allowed_agent kernels jupyter wire contents metrics util)
set(allowed_http kernels wire jupyter metrics util)
set(allowed_api http agent kernels wire jupyter contents metrics util)
set(allowed_config api http agent kernels wire jupyter contents metrics util)

# Known back-arrows still to be removed, one "file→room" each; anything else
# fails. None are left; the list stays for a move that lands in slices.
set(pending "")

set(failures "")
foreach(room IN LISTS rooms)
  if(NOT IS_DIRECTORY "${ROOT}/${room}")
    continue()
  endif()
  file(GLOB_RECURSE sources RELATIVE "${ROOT}" "${ROOT}/${room}/*.hpp" "${ROOT}/${room}/*.cpp")
  foreach(src IN LISTS sources)
    file(STRINGS "${ROOT}/${src}" includes REGEX "^[ \t]*#[ \t]*include[ \t]+\"[a-z_]+/")
    foreach(line IN LISTS includes)
      string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]+\"([a-z_]+)/.*" "\\1" target "${line}")
      if(target STREQUAL room OR NOT target IN_LIST rooms)
        continue()
      endif()
      if(target IN_LIST allowed_${room} OR "${src}→${target}" IN_LIST pending)
        continue()
      endif()
      list(APPEND failures "${src} includes ${target}/ (a ${room} file may include only: ${allowed_${room}})")
    endforeach()
  endforeach()
endforeach()

if(failures)
  list(JOIN failures "\n  " text)
  message(FATAL_ERROR "include that runs back up a room:\n  ${text}")
endif()
message(STATUS "check_rooms: every include in ${ROOT} points down")
