# Checks that the gateway's rooms depend only downwards: every
# `#include "<room>/…"` in gateway/src/<room>/ must name the room itself or
# one it may use (so a surface never includes another surface), no file
# includes a retired room (api/), and no file of a core room holds a string
# literal that is a surface's URL ("/v1/…", "/api/…"). Run as a build step (the build fails on a back-arrow) and
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
    file(STRINGS "${ROOT}/${src}" includes REGEX "^[ \t]*#[ \t]*include[ \t]+\"[a-z0-9_]+/")
    foreach(line IN LISTS includes)
      string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]+\"([a-z0-9_]+)/.*" "\\1" target "${line}")
      if(target IN_LIST cellgate_retired_rooms)
        list(APPEND failures "${src} includes ${target}/, which is gone (the surfaces share kit/, the core is core/)")
        continue()
      endif()
      if(target STREQUAL room OR NOT target IN_LIST cellgate_rooms)
        continue()
      endif()
      if(target IN_LIST cellgate_room_uses_${room} OR "${src}→${target}" IN_LIST pending)
        continue()
      endif()
      list(JOIN cellgate_room_uses_${room} " " allowed)
      list(APPEND failures "${src} includes ${target}/ (a ${room} file may include only: ${allowed})")
    endforeach()
    # The core knows no surface: each surface renders its own links.
    if(room IN_LIST cellgate_core_rooms)
      foreach(prefix IN LISTS cellgate_surface_url_prefixes)
        file(STRINGS "${ROOT}/${src}" literals REGEX "\"${prefix}")
        foreach(line IN LISTS literals)
          string(STRIP "${line}" line)
          string(REPLACE ";" "" line "${line}")
          if(NOT line MATCHES "^//")
            list(APPEND failures "${src} names a surface's URL (\"${prefix}…\"), which the core may not know: ${line}")
          endif()
        endforeach()
      endforeach()
    endif()
  endforeach()
endforeach()

if(failures)
  list(JOIN failures "\n  " text)
  message(FATAL_ERROR "a rule of the rooms is broken:\n  ${text}")
endif()
message(STATUS "check_rooms: every include in ${ROOT} points down")
