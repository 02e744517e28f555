#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <ostream>
#include <string>

namespace kiln::train {

// Seconds since an arbitrary origin; only differences are used.
using Clock = std::function<double()>;
// std::chrono::steady_clock in seconds.
double steady_seconds();

// Note [progress output]
// ~~~~~~~~~~~~~~~~~~~~~~
// A Keras-like bar:
//   " 5/10 [==============>...............] - ETA 3s - loss: 0.4321 - accuracy: 0.8765 - 1234
//   samples/s"
// On a terminal every update redraws the line with '\r'. Logs and CI output are not terminals:
// there a redraw would leave one line per step, so only the first update at or past each 10% of
// the steps prints a line, and finish() prints the final one (with the elapsed time instead of the
// ETA). An update at the last step is left to finish(), which usually carries more metrics
// (validation). "loss" is printed first, the other metrics in name order ("lr" with 3 significant
// digits, the others with 4 decimals).
// With `columns` (the terminal's width; 0: unknown) a line never reaches the last column: a line
// that does wraps, and every redraw then leaves a line behind. The bar narrows first (down to 10
// columns), then the line is cut. samples/s counts training time only: the final line's rate is
// taken at the last update(), before validation ran; validating() shows that it runs.
class ProgressBar {
 public:
  ProgressBar(int64_t total_steps, std::ostream& out, bool is_tty, Clock clock = steady_seconds,
              int width = 30, int columns = 0);

  // `step` counts finished steps (1..total); samples_seen is the running sample count of this
  // run, used for the throughput (left out when negative).
  void update(int64_t step, const std::map<std::string, double>& metrics,
              int64_t samples_seen = -1);
  // On a terminal, redraws the line with " - validating..." appended (nothing in a log).
  void validating();
  // Prints the final line (total/total) and ends it with '\n'.
  void finish(const std::map<std::string, double>& metrics, int64_t samples_seen = -1);

  // The text of one line, without '\r' or '\n' (exposed for tests).
  std::string format_line(int64_t step, const std::map<std::string, double>& metrics,
                          int64_t samples_seen, bool final) const;

 private:
  std::string line_with_bar(int64_t step, const std::map<std::string, double>& metrics,
                            int64_t samples_seen, bool final, int width) const;
  // Draws `line` over the previous one (terminal mode).
  void redraw(const std::string& line);

 public:
 private:
  int64_t total_;
  std::ostream& out_;
  bool is_tty_;
  Clock clock_;
  int width_;
  int columns_;
  double start_;
  double last_update_ = -1.0;  // clock at the last update(): the end of the training steps
  std::string last_line_;      // the line drawn last (terminal mode)
  int64_t last_decile_ = 0;    // deciles already printed (non-terminal mode)
  size_t last_length_ = 0;     // length of the drawn line (terminal mode), to blank leftovers
  bool finished_ = false;
};

// "3s", "1:05", "1:01:05".
std::string format_duration(double seconds);

}  // namespace kiln::train
