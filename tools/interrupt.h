#pragma once
// Ctrl-C during `kiln train` (issue 16, defect 8): the run stops at once and says where its last
// checkpoint is and how to continue, instead of dying silently. Checkpoints are replaced
// atomically, so stopping at any moment leaves the last complete one in place.
#include <string>

namespace kiln::cli {

// Installs the SIGINT/SIGTERM handler; `message` is what it prints (to stderr) before exiting
// with status 130.
void on_interrupt_say(const std::string& message);

}  // namespace kiln::cli
