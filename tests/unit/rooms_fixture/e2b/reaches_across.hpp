#pragma once
// Deliberately wrong: a surface may not include another surface. The rooms
// check must name this file (tests/unit/CMakeLists.txt).
#include "v1/v1_api.hpp"
