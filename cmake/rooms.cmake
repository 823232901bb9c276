# The gateway's rooms, lowest first, and the rooms each may use. One table,
# read by the build (gateway/CMakeLists.txt makes one library per room that
# links only these) and by the include check (cmake/check_rooms.cmake).
# docs/architecture.md draws it.
set(cellgate_rooms util cluster egress metrics contents jupyter wire kernels agent processes core http api e2b mcp config)
set(cellgate_room_uses_util "")
set(cellgate_room_uses_cluster util)
set(cellgate_room_uses_egress "")
set(cellgate_room_uses_metrics "")
set(cellgate_room_uses_contents util)
set(cellgate_room_uses_jupyter util)
set(cellgate_room_uses_wire jupyter util metrics)
set(cellgate_room_uses_kernels jupyter wire contents metrics util)
set(cellgate_room_uses_agent kernels jupyter wire contents metrics util)
set(cellgate_room_uses_processes kernels jupyter wire contents metrics util)
# The core's front door: the typed verbs every surface calls (sessions, files, networks).
set(cellgate_room_uses_core agent kernels egress jupyter wire contents metrics util)
set(cellgate_room_uses_http kernels wire jupyter metrics util)
set(cellgate_room_uses_api core processes http agent kernels wire jupyter contents metrics egress util)
set(cellgate_room_uses_e2b core processes api http agent kernels wire jupyter contents metrics egress util)
set(cellgate_room_uses_mcp core api http agent kernels wire jupyter contents metrics egress util)
set(cellgate_room_uses_config core cluster mcp e2b processes api http agent kernels wire jupyter contents metrics egress util)
