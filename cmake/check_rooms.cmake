# Checks that the gateway's rooms depend only downwards: every
# `#include "<room>/…"` in gateway/src/<room>/ must name the room itself or
# one it may use. Run as a build step (the build fails on a back-arrow) and
# as a CTest, with a fixture holding a deliberately wrong include that must
# fail the check.
#
#   cmake -DROOT=<dir holding the rooms> -P cmake/check_rooms.cmake
#
# The table is cmake/rooms.cmake. The compiler enforces the same table (each
# room's library sees only the include roots of the rooms it links); this
# check runs first, names the file and the rule in one line, and also covers
# a header that no source of its room compiles.
cmake_minimum_required(VERSION 3.25)
if(NOT ROOT)
  message(FATAL_ERROR "check_rooms: pass -DROOT=<gateway source dir>")
endif()
get_filename_component(ROOT "${ROOT}" ABSOLUTE)

include(${CMAKE_CURRENT_LIST_DIR}/rooms.cmake)

# Known back-arrows still to be removed, one "file→room" each; anything else
# fails. None are left; the list stays for a move that lands in slices.
set(pending "")

set(failures "")
foreach(room IN LISTS cellgate_rooms)
  if(NOT IS_DIRECTORY "${ROOT}/${room}")
    continue()
  endif()
  file(GLOB_RECURSE sources RELATIVE "${ROOT}" "${ROOT}/${room}/*.hpp" "${ROOT}/${room}/*.cpp")
  foreach(src IN LISTS sources)
    file(STRINGS "${ROOT}/${src}" includes REGEX "^[ \t]*#[ \t]*include[ \t]+\"[a-z_]+/")
    foreach(line IN LISTS includes)
      string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]+\"([a-z_]+)/.*" "\\1" target "${line}")
      if(target STREQUAL room OR NOT target IN_LIST cellgate_rooms)
        continue()
      endif()
      if(target IN_LIST cellgate_room_uses_${room} OR "${src}→${target}" IN_LIST pending)
        continue()
      endif()
      list(APPEND failures "${src} includes ${target}/ (a ${room} file may include only: ${cellgate_room_uses_${room}})")
    endforeach()
  endforeach()
endforeach()

if(failures)
  list(JOIN failures "\n  " text)
  message(FATAL_ERROR "include that runs back up a room:\n  ${text}")
endif()
message(STATUS "check_rooms: every include in ${ROOT} points down")
