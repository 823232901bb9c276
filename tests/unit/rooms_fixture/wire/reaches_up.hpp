#pragma once
// Deliberately wrong: the wire room may not know the HTTP surface. The
// rooms check must fail on this file (tests/unit/CMakeLists.txt, WILL_FAIL).
#include "http/http_types.hpp"
