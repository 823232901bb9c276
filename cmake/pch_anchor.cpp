// The one source of cellgate_pch, the target whose precompiled header every
// room of the gateway reuses (gateway/CMakeLists.txt).
