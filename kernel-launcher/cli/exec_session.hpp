#pragma once

#include "cellgate/launcher/exec_process.hpp"

namespace cellgate::launcher {

// The CLI's `exec ID -- ARGV…`: connects this terminal (or these pipes) to an
// exec'd process until it ends. Without a tty, stdin is copied only when the
// process has a stdin pipe, and SIGINT, SIGTERM and SIGHUP to the CLI are
// passed on; with one, this terminal is put in raw mode (so ^C is a byte for
// the process's own terminal) and its size follows. Returns the shell-style
// exit code (128 + n for signal n; 255 when unknown).
int run_exec_session(exec_process& p);

}  // namespace cellgate::launcher
