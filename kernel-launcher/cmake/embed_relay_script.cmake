# Run as a script (cmake -P) at build time: writes OUTPUT, a C++ file defining
# cellgate::launcher::sandbox_relay_source() as the bytes of INPUT (the
# sandbox side of the gVisor relay), so the launcher needs no file at run time.
file(READ "${INPUT}" hex HEX)
string(LENGTH "${hex}" hex_len)
math(EXPR size "${hex_len} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "'\\\\x\\1'," bytes "${hex}")
file(WRITE "${OUTPUT}.tmp"
  "// Generated from kernel-launcher/sandbox/cellgate-relay.py by embed_relay_script.cmake. Do not edit.\n"
  "#include \"relay_process.hpp\"\n\n"
  "namespace cellgate::launcher {\n"
  "namespace {\nconst char source[] = {${bytes} 0};\n}  // namespace\n\n"
  "std::string_view sandbox_relay_source() { return {source, ${size}}; }\n\n"
  "}  // namespace cellgate::launcher\n")
file(COPY_FILE "${OUTPUT}.tmp" "${OUTPUT}" ONLY_IF_DIFFERENT)
