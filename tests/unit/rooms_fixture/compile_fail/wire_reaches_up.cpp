// Compiled as if it were a file of the wire room (with the include path and
// definitions of cellgate_wire's own sources) by the CTest rooms_build_refuses_an_include_that_runs_back_up,
// which passes only if the compiler cannot find the kernels header: wire
// sits below kernels, so kernels is not on its include path.
#include "messaging/ws_codec.hpp"      // a room below wire: found
#include "kernels/kernel_manager.hpp" // a room above wire: must not be

int fixture_reaches_up();
