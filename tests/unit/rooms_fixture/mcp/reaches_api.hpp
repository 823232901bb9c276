#pragma once
// Deliberately wrong: api/ is gone, and a surface that included it would be
// leaning on another surface. The rooms check must name this file.
#include "api/api.hpp"
