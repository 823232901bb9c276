# The gateway's rooms, lowest first, and the rooms each may use. One table,
# read by the build (gateway/CMakeLists.txt makes one library per room that
# links only these) and by the include check (cmake/check_rooms.cmake).
# docs/architecture.md draws it.
#
# Three floors. The core's rooms (util … core) own sessions, cells, files
# and networks and know no surface: they name no surface's URL. `http` is
# the transport. The surfaces (jupyter, v1, web, e2b, mcp, piston) are adapters over
# the core: each may use the kit (what they share) and the core's rooms,
# never another surface; `api/` is gone. `config` composes them.
set(cellgate_rooms util cluster egress metrics contents messaging wire kernels agent processes templates core http kit jupyter v1 web e2b mcp piston config)
set(cellgate_core_rooms util cluster egress metrics contents messaging wire kernels agent processes templates core)
set(cellgate_surface_rooms jupyter v1 web e2b mcp piston)
# Rooms that no longer exist: an include of one is refused wherever it is.
set(cellgate_retired_rooms api)
# A string literal that starts with one of these, in a core room, is a
# surface's URL (check_rooms.cmake).
set(cellgate_surface_url_prefixes /api/ /v1/ /e2b/ /mcp /files/ /terminals/ /static/)

set(cellgate_room_uses_util "")
set(cellgate_room_uses_cluster util)
set(cellgate_room_uses_egress "")
set(cellgate_room_uses_metrics "")
set(cellgate_room_uses_contents util)
# The Jupyter messaging protocol: kernel messages and the WebSocket framings.
set(cellgate_room_uses_messaging util)
set(cellgate_room_uses_wire messaging util metrics)
set(cellgate_room_uses_kernels messaging wire contents metrics util)
set(cellgate_room_uses_agent kernels messaging wire contents metrics util)
set(cellgate_room_uses_processes kernels messaging wire contents metrics util)
# Environments: template definitions, builds in build sandboxes, their layers and kernelspecs.
set(cellgate_room_uses_templates kernels egress messaging wire contents metrics util)
# The core's front door: the typed verbs every surface calls (sessions, cells, one-shot runs, files, networks).
set(cellgate_room_uses_core templates agent processes kernels egress messaging wire contents metrics util)
# The transport: listener, sessions, dispatch, router, auth, SSE, the WebSocket handoffs. No kernel.
set(cellgate_room_uses_http metrics util)
# The kit: what the surfaces share (services, failures as statuses, file work, the cluster's list join).
set(cellgate_room_uses_kit templates core processes http agent kernels wire messaging contents metrics egress util)
set(cellgate_room_uses_jupyter templates kit core processes http agent kernels wire messaging contents metrics egress util)
set(cellgate_room_uses_v1 templates kit core processes http agent kernels wire messaging contents metrics egress util)
set(cellgate_room_uses_web http contents util)
set(cellgate_room_uses_e2b templates kit core processes http agent kernels wire messaging contents metrics egress util)
set(cellgate_room_uses_mcp templates kit core http agent kernels wire messaging contents metrics egress util)
# Piston's one-shot API (/api/v2): runtimes, execute, the WebSocket job, packages.
set(cellgate_room_uses_piston templates kit core processes http agent kernels wire messaging contents metrics egress util)
set(cellgate_room_uses_config templates core cluster piston mcp e2b web v1 jupyter kit processes http agent kernels wire messaging contents metrics egress util)
