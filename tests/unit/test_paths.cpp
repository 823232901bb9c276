#include "test_paths.hpp"

namespace cellgate::fixtures {

const char* const golden_dir = CELLGATE_GOLDEN_DIR;
const char* const configuration_md = CELLGATE_CONFIGURATION_MD;
const char* const exec_shim = CELLGATE_EXEC_SHIM;

}  // namespace cellgate::fixtures
