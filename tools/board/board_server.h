#pragma once
// `kiln board RUN_DIR...`: a small HTTP server (cpp-httplib) on one page that shows runs live
// while they train: per-step and per-epoch curves (runs overlaid), the lr, samples/s, the model
// summary, the confusion matrix and per-class scores, and each run's configuration. The page polls
// GET /api/runs; the server reads the run directories on every request (no state of its own).
#include <string>
#include <vector>

namespace kiln::cli {

struct BoardArgs {
  std::vector<std::string> dirs;
  std::string host = "127.0.0.1";
  int port = 6006;  // 0: any free port (printed)
};

// Serves until SIGINT or SIGTERM; returns the exit code. Directories that do not exist, a host
// that cannot be bound or a port in use are Errors naming them.
int run_board(const BoardArgs& args);

}  // namespace kiln::cli
