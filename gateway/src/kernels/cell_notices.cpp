#include "kernels/cell_notices.hpp"

namespace cellgate::kernels::cell_notices {

std::string output_truncated(std::size_t limit_bytes) {
    return "\n[cellgate: output truncated after " + std::to_string(limit_bytes) + " bytes]\n";
}

std::string results_dropped(std::size_t limit_bytes) {
    return "[cellgate: rich outputs past " + std::to_string(limit_bytes) +
           " bytes (result_limit) were dropped; later ones are not shown]\n";
}

std::string time_limit(std::chrono::seconds limit) {
    return "\n[cellgate: this cell ran past its time limit of " + std::to_string(limit.count()) +
           " s (exec_timeout); interrupting it]\n";
}

std::string not_stopped(std::chrono::milliseconds grace) {
    const auto s = std::chrono::duration_cast<std::chrono::seconds>(grace + std::chrono::milliseconds(999)).count();
    return "[cellgate: the cell did not stop within " + std::to_string(s) +
           " s of the interrupt; restarting the kernel (its files are kept, its variables are not)]\n";
}

}  // namespace cellgate::kernels::cell_notices
