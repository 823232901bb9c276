#pragma once

// Where the unit tests find files of the tree and the build. Set in one unit
// (test_paths.cpp) from CMake: absolute paths in the flags of every test unit
// would change with each clone and miss the compiler cache for all of them.

namespace cellgate::fixtures {

extern const char* const golden_dir;        // tests/unit/launcher/golden
extern const char* const configuration_md;  // docs/configuration.md
extern const char* const exec_shim;         // the built cellgate-exec-shim

}  // namespace cellgate::fixtures
