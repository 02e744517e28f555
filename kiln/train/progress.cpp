#include "kiln/train/progress.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>

namespace kiln::train {

double steady_seconds() {
  using std::chrono::duration;
  using std::chrono::steady_clock;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

std::string format_duration(double seconds) {
  const auto s = static_cast<int64_t>(std::llround(std::max(0.0, seconds)));
  if (s >= 3600) return fmt::format("{}:{:02d}:{:02d}", s / 3600, (s % 3600) / 60, s % 60);
  if (s >= 60) return fmt::format("{}:{:02d}", s / 60, s % 60);
  return fmt::format("{}s", s);
}

ProgressBar::ProgressBar(int64_t total_steps, std::ostream& out, bool is_tty, Clock clock,
                         int width, int columns)
    : total_(std::max<int64_t>(total_steps, 0)),
      out_(out),
      is_tty_(is_tty),
      clock_(std::move(clock)),
      width_(std::max(width, 1)),
      columns_(std::max(columns, 0)),
      start_(clock_()) {}

std::string ProgressBar::format_line(int64_t step, const std::map<std::string, double>& metrics,
                                     int64_t samples_seen, bool final) const {
  std::string line = line_with_bar(step, metrics, samples_seen, final, width_);
  if (columns_ <= 0) return line;
  const auto room = static_cast<size_t>(std::max(columns_ - 1, 1));
  if (line.size() > room) {
    const int narrower =
        std::max(std::min(width_, 10), width_ - static_cast<int>(line.size() - room));
    line = line_with_bar(step, metrics, samples_seen, final, narrower);
  }
  if (line.size() > room) line.resize(room);
  return line;
}

std::string ProgressBar::line_with_bar(int64_t step, const std::map<std::string, double>& metrics,
                                       int64_t samples_seen, bool final, int width) const {
  const std::string total_text = std::to_string(total_);
  std::string line = fmt::format("{:>{}}/{}", step, total_text.size(), total_text);

  // Integer arithmetic, so that 2/20 of 10 columns is exactly 1 column.
  const int64_t done = total_ > 0 ? std::clamp<int64_t>(step, 0, total_) : 1;
  const auto filled = static_cast<int>(done * width / std::max<int64_t>(total_, 1));
  std::string bar;
  if (filled > 0) {
    bar.append(static_cast<size_t>(filled - 1), '=');
    bar.push_back(step < total_ ? '>' : '=');
  }
  bar.append(static_cast<size_t>(width - filled), '.');
  line += " [" + bar + "]";

  const double elapsed = clock_() - start_;
  if (final) {
    line += " - " + format_duration(elapsed);
  } else if (step > 0) {
    const double eta = elapsed / static_cast<double>(step) * static_cast<double>(total_ - step);
    line += " - ETA " + format_duration(eta);
  }

  if (auto it = metrics.find("loss"); it != metrics.end())
    line += fmt::format(" - loss: {:.4f}", it->second);
  for (const auto& [name, value] : metrics)
    if (name == "lr")  // learning rates span decades: 0.001, 3e-05
      line += fmt::format(" - lr: {:.3g}", value);
    else if (name != "loss")
      line += fmt::format(" - {}: {:.4f}", name, value);

  // Training time only: on the final line, validation ran after the last update.
  const double trained = final && last_update_ >= 0.0 ? last_update_ - start_ : elapsed;
  if (samples_seen >= 0 && trained > 0.0)
    line += fmt::format(" - {:.0f} samples/s", static_cast<double>(samples_seen) / trained);
  return line;
}

void ProgressBar::update(int64_t step, const std::map<std::string, double>& metrics,
                         int64_t samples_seen) {
  if (finished_) return;
  last_update_ = clock_();
  if (is_tty_) {
    redraw(format_line(step, metrics, samples_seen, /*final=*/false));
    return;
  }
  if (total_ <= 0 || step >= total_) return;  // the last line belongs to finish()
  const int64_t decile = step * 10 / total_;
  if (decile <= last_decile_) return;
  last_decile_ = decile;
  // Flushed per line: a log file (or a pipe) must show progress while the epoch runs, and keep
  // it when the process is killed.
  out_ << format_line(step, metrics, samples_seen, /*final=*/false) << '\n';
  out_.flush();
}

void ProgressBar::redraw(const std::string& line) {
  out_ << '\r' << line;
  if (line.size() < last_length_) out_ << std::string(last_length_ - line.size(), ' ');
  last_length_ = line.size();
  last_line_ = line;
  out_.flush();
}

void ProgressBar::validating() {
  if (finished_ || !is_tty_) return;
  const std::string note = " - validating...";
  std::string line = last_line_;
  // The note replaces the line's tail where the terminal has no room for both.
  if (columns_ > 0 && line.size() + note.size() > static_cast<size_t>(columns_ - 1))
    line.resize(static_cast<size_t>(
        std::max<int64_t>(columns_ - 1 - static_cast<int64_t>(note.size()), 0)));
  redraw(line + note);
}

void ProgressBar::finish(const std::map<std::string, double>& metrics, int64_t samples_seen) {
  if (finished_) return;
  finished_ = true;
  const std::string line = format_line(total_, metrics, samples_seen, /*final=*/true);
  if (is_tty_) {
    out_ << '\r' << line;
    if (line.size() < last_length_) out_ << std::string(last_length_ - line.size(), ' ');
  } else {
    out_ << line;
  }
  out_ << '\n';
  out_.flush();
}

}  // namespace kiln::train
