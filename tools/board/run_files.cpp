#include "tools/board/run_files.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <vector>

namespace kiln::cli {
namespace {

namespace fs = std::filesystem;

// A run that wrote nothing for this long, without metrics.json, is shown as stopped.
constexpr double kStoppedAfterSeconds = 60.0;
// Larger files are not read (a run's own files are far smaller).
constexpr uintmax_t kMaxFileBytes = uintmax_t{64} << 20;

// The file's text, or nothing when it is absent, unreadable or too large (a note says which).
std::optional<std::string> read_text(const fs::path& path, nlohmann::json& notes) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return std::nullopt;
  const uintmax_t size = fs::file_size(path, ec);
  if (ec || size > kMaxFileBytes) {
    notes.push_back(fmt::format("{}: not read ({})", path.filename().string(),
                                ec ? ec.message() : "larger than 64 MiB"));
    return std::nullopt;
  }
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  if (!in) {
    notes.push_back(path.filename().string() + ": could not be read");
    return std::nullopt;
  }
  return ss.str();
}

std::optional<nlohmann::json> read_json(const fs::path& path, nlohmann::json& notes) {
  const std::optional<std::string> text = read_text(path, notes);
  if (!text) return std::nullopt;
  try {
    return nlohmann::json::parse(*text);
  } catch (const nlohmann::json::exception& e) {
    // A file is replaced atomically, so a parse error means a corrupt file, not a torn write.
    notes.push_back(fmt::format("{}: not valid JSON ({})", path.filename().string(), e.what()));
    return std::nullopt;
  }
}

std::vector<std::string> split(const std::string& line) {
  std::vector<std::string> cells;
  std::string cell;
  std::istringstream in(line);
  while (std::getline(in, cell, ',')) cells.push_back(cell);
  if (!line.empty() && line.back() == ',') cells.emplace_back();
  return cells;
}

double seconds_since(fs::file_time_type t) {
  return std::chrono::duration<double>(fs::file_time_type::clock::now() - t).count();
}

}  // namespace

nlohmann::json parse_numeric_csv(const std::string& text, int64_t max_rows, int64_t* total_rows,
                                 int64_t* bad_cells) {
  std::vector<std::string> lines;
  size_t begin = 0;
  while (begin < text.size()) {
    const size_t end = text.find('\n', begin);
    if (end == std::string::npos) break;  // no newline yet: a row being written
    std::string line = text.substr(begin, end - begin);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty()) lines.push_back(std::move(line));
    begin = end + 1;
  }
  nlohmann::json columns = nlohmann::json::object();
  if (lines.empty()) return columns;
  const std::vector<std::string> header = split(lines[0]);
  const auto rows = static_cast<int64_t>(lines.size()) - 1;
  if (total_rows != nullptr) *total_rows = rows;
  const int64_t stride = max_rows > 0 && rows > max_rows ? (rows + max_rows - 1) / max_rows : 1;
  for (const std::string& name : header) columns[name] = nlohmann::json::array();
  for (int64_t r = 0; r < rows; ++r) {
    if (r % stride != 0 && r != rows - 1) continue;
    const std::vector<std::string> cells = split(lines[static_cast<size_t>(r + 1)]);
    for (size_t c = 0; c < header.size(); ++c) {
      nlohmann::json value = nullptr;
      if (c < cells.size() && !cells[c].empty()) {
        char* end = nullptr;
        const double v = std::strtod(cells[c].c_str(), &end);
        if (end != nullptr && *end == '\0' && std::isfinite(v))
          value = v;
        else if (bad_cells != nullptr && (end == nullptr || *end != '\0'))
          ++*bad_cells;  // not a number (NaN and infinities are numbers: gaps in the curve)
      }
      columns[header[c]].push_back(value);
    }
  }
  return columns;
}

nlohmann::json read_run(const std::string& dir_name, const std::string& name) {
  const fs::path dir(dir_name);
  nlohmann::json notes = nlohmann::json::array();
  nlohmann::json run = {{"name", name}, {"path", dir_name}};

  std::error_code ec;
  fs::file_time_type newest = fs::file_time_type::min();
  for (const char* file : {"config.json", "summary.txt", "history.csv", "steps.csv",
                           "validation.json", "metrics.json"}) {
    const auto t = fs::last_write_time(dir / file, ec);
    if (!ec && t > newest) newest = t;
  }
  const bool any = newest != fs::file_time_type::min();
  // When the newest file changed, as seconds since the epoch (stable while nothing changes).
  const double age = any ? seconds_since(newest) : 0.0;
  run["modified"] =
      any ? nlohmann::json(std::llround(
                std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
                    .count() -
                age))
          : nlohmann::json(nullptr);

  nlohmann::json settings = nlohmann::json::object();
  if (auto config = read_json(dir / "config.json", notes)) {
    if (config->is_object() && config->contains("settings") && (*config)["settings"].is_object())
      settings = (*config)["settings"];
    else
      notes.push_back("config.json: no \"settings\" object");
  } else if (!fs::exists(dir / "config.json")) {
    notes.push_back("config.json: not yet written");
  }
  run["settings"] = settings;

  run["summary"] = read_text(dir / "summary.txt", notes).value_or("");
  int64_t epochs_done = 0, steps_total = 0, bad = 0;
  if (auto text = read_text(dir / "history.csv", notes)) {
    run["history"] = parse_numeric_csv(*text, 0, &epochs_done, &bad);
    if (!run["history"].contains("epoch")) notes.push_back("history.csv: no epoch column");
    if (bad > 0) notes.push_back(fmt::format("history.csv: {} cell(s) are not numbers", bad));
  } else {
    run["history"] = nlohmann::json::object();
    notes.push_back("history.csv: not yet written (no epoch finished)");
  }
  bad = 0;
  if (auto text = read_text(dir / "steps.csv", notes)) {
    run["steps"] = parse_numeric_csv(*text, kBoardMaxSteps, &steps_total, &bad);
    if (bad > 0) notes.push_back(fmt::format("steps.csv: {} cell(s) are not numbers", bad));
  } else {
    run["steps"] = nlohmann::json::object();
    notes.push_back("steps.csv: not written (no step yet, or a run from before kiln wrote it)");
  }
  run["steps_total"] = steps_total;

  const std::optional<nlohmann::json> metrics = read_json(dir / "metrics.json", notes);
  run["report"] = nullptr;
  run["report_source"] = "";
  if (metrics && metrics->is_object() && metrics->contains("test")) {
    run["report"] = (*metrics)["test"];
    run["report_source"] = "test";
    if (metrics->contains("test_name")) run["test_name"] = (*metrics)["test_name"];
    if (metrics->contains("train_seconds")) run["train_seconds"] = (*metrics)["train_seconds"];
  } else if (auto validation = read_json(dir / "validation.json", notes)) {
    run["report"] = *validation;
    run["report_source"] = "validation";
  } else if (!fs::exists(dir / "validation.json")) {
    notes.push_back("validation.json: not yet written (no epoch finished, or an older run)");
  }

  const int64_t epochs = settings.contains("epochs") && settings["epochs"].is_number_integer()
                             ? settings["epochs"].get<int64_t>()
                             : 0;
  // The epoch in progress is the last step's (steps.csv); before any step, the epochs done.
  int64_t epoch = epochs_done;
  if (run["steps"].contains("epoch") && !run["steps"]["epoch"].empty() &&
      run["steps"]["epoch"].back().is_number())
    epoch = std::max<int64_t>(epoch, run["steps"]["epoch"].back().get<int64_t>());
  run["epoch"] = epoch;
  run["epochs"] = epochs;
  if (metrics)
    run["status"] = "finished";
  else if (!any || (steps_total == 0 && epochs_done == 0))
    run["status"] = "waiting";
  else if (age > kStoppedAfterSeconds)
    run["status"] = "stopped";
  else
    run["status"] = "training";
  run["notes"] = notes;
  return run;
}

}  // namespace kiln::cli
