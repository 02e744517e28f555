#pragma once
// What `kiln board` shows of a run directory, read from the files `kiln train` keeps up to date
// (tools/run_logs.h): config.json, summary.txt, history.csv, steps.csv, validation.json and, once
// the run finished, metrics.json. Files are only ever opened by joining the run directory with
// these fixed names; a file that is missing, half written or corrupt becomes a note in the
// result, never an error that stops the board.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace kiln::cli {

// A steps.csv longer than this is thinned (every k-th row, and always the last) for the page.
constexpr int64_t kBoardMaxSteps = 2000;

// The run in `dir` as JSON: {"name", "path", "status" ("training", "finished", "stopped",
// "waiting"), "epoch" (in progress, from 1), "epochs", "settings", "history" {column: [values]},
// "steps" {column: [values]}, "steps_total", "summary", "report" (metrics.json's test report, else
// validation.json), "report_source" ("test", "validation" or ""), "notes" [text], "modified"
// (when the newest file changed, in seconds since the Unix epoch)}.
nlohmann::json read_run(const std::string& dir, const std::string& name);

// Parses CSV text with a header of names and numeric cells into {column: [numbers]}; a cell that
// is not a finite number becomes null (counted in *bad_cells unless it is NaN or infinite), and a
// last line without its newline (a row being written) is left out. More than `max_rows` rows are
// thinned to about max_rows, keeping the last (0: keep all); *total_rows counts them all.
nlohmann::json parse_numeric_csv(const std::string& text, int64_t max_rows, int64_t* total_rows,
                                 int64_t* bad_cells = nullptr);

}  // namespace kiln::cli
