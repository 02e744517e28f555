#include "kiln/data/csv.h"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/ranges.h>

#include "kiln/core/error.h"
#include "kiln/io/regular_file.h"
#include "kiln/ops/factories.h"

namespace kiln::data {
namespace {

// One field of a record, with where it starts (for error messages).
struct Cell {
  std::string text;
  int64_t line = 0;    // 1-based
  int64_t offset = 0;  // byte offset in the file
};

struct Record {
  std::vector<Cell> cells;
  int64_t line = 0;
  int64_t offset = 0;
};

// An RFC 4180 reader over the whole file's bytes.
class CsvParser {
 public:
  CsvParser(std::string_view data, char delimiter, const std::string& path, const Loc& loc)
      : data_(data), delimiter_(delimiter), path_(path), loc_(loc) {
    if (data_.substr(0, 3) == "\xEF\xBB\xBF") pos_ = 3;
  }

  // The next non-blank record; false at the end of the file.
  bool next(Record& record) {
    skip_blank_lines();
    if (pos_ >= data_.size()) return false;
    record.cells.clear();
    record.line = line_;
    record.offset = static_cast<int64_t>(pos_);
    while (true) {
      record.cells.push_back(read_field());
      if (pos_ < data_.size() && data_[pos_] == delimiter_) {
        ++pos_;
        continue;
      }
      end_line();
      return true;
    }
  }

 private:
  bool at_line_end() const {
    return pos_ >= data_.size() || data_[pos_] == '\n' ||
           (data_[pos_] == '\r' && pos_ + 1 < data_.size() && data_[pos_ + 1] == '\n');
  }
  void end_line() {
    if (pos_ >= data_.size()) return;
    pos_ += data_[pos_] == '\r' ? 2 : 1;
    ++line_;
  }
  void skip_blank_lines() {
    while (pos_ < data_.size() && at_line_end()) end_line();
  }

  Cell read_field() {
    Cell cell{std::string(), line_, static_cast<int64_t>(pos_)};
    if (pos_ >= data_.size() || data_[pos_] != '"') {
      size_t start = pos_;
      while (!at_line_end() && data_[pos_] != delimiter_) ++pos_;
      cell.text.assign(data_.substr(start, pos_ - start));
      return cell;
    }
    ++pos_;  // the opening quote
    while (true) {
      if (pos_ >= data_.size())
        fail("read_csv", loc_,
             "'{}' line {}, byte offset {}: expected a closing quote for the field opened here, "
             "but the file ended",
             path_, cell.line, cell.offset);
      char c = data_[pos_++];
      if (c == '"') {
        if (pos_ < data_.size() && data_[pos_] == '"') {
          cell.text.push_back('"');
          ++pos_;
          continue;
        }
        break;
      }
      if (c == '\n') ++line_;
      cell.text.push_back(c);
    }
    while (pos_ < data_.size() && (data_[pos_] == ' ' || data_[pos_] == '\t')) ++pos_;
    if (!at_line_end() && data_[pos_] != delimiter_)
      fail("read_csv", loc_,
           "'{}' line {}, byte offset {}: expected a delimiter or the end of the line after a "
           "closing quote, but got '{}'",
           path_, line_, pos_, data_[pos_]);
    return cell;
  }

  std::string_view data_;
  char delimiter_;
  const std::string& path_;
  const Loc& loc_;
  size_t pos_ = 0;
  int64_t line_ = 1;
};

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// A cell's text for an error message (long cells are cut).
std::string shorten(const std::string& text) {
  return text.size() <= 40 ? text : text.substr(0, 37) + "...";
}

template <class T>
bool parse_whole(std::string_view s, T& out) {
  s = trim(s);
  if (s.size() > 1 && s.front() == '+' && s[1] != '-') s.remove_prefix(1);
  if (s.empty()) return false;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && end == s.data() + s.size();
}

class CsvReader {
 public:
  CsvReader(const std::string& path, const CsvOptions& options, const Loc& loc)
      : path_(path), options_(options), loc_(loc) {}

  std::shared_ptr<TensorDataset> read() {
    check_options();
    std::string bytes = slurp();
    CsvParser parser(bytes, options_.delimiter, path_, loc_);
    Record record;
    if (options_.header) {
      if (!parser.next(record))
        fail("read_csv", loc_, "'{}': expected a header row, but the file is empty", path_);
      for (auto& cell : record.cells) names_.push_back(std::move(cell.text));
      columns_ = static_cast<int64_t>(names_.size());
    }
    int64_t rows = 0;
    while (parser.next(record)) {
      if (columns_ < 0) columns_ = static_cast<int64_t>(record.cells.size());
      if (rows == 0) resolve_target();
      if (static_cast<int64_t>(record.cells.size()) != columns_)
        fail("read_csv", loc_,
             "'{}' line {}, byte offset {}: expected {} fields (as the {}), but got {}", path_,
             record.line, record.offset, columns_, options_.header ? "header has" : "first row has",
             record.cells.size());
      for (int64_t c = 0; c < columns_; ++c) add_cell(record.cells[c], c);
      ++rows;
    }
    if (rows == 0)
      fail("read_csv", loc_, "'{}': expected at least one data row, but the file has none", path_);
    int64_t features = columns_ - (target_ >= 0 ? 1 : 0);
    Tensor data = tensor<double>(features_, Shape{rows, features}, TensorOptions{options_.dtype});
    if (target_ < 0) return std::make_shared<TensorDataset>(data, Tensor(), loc_);
    Tensor target =
        options_.target_dtype == DType::Int64
            ? tensor<int64_t>(labels_, Shape{rows})
            : tensor<double>(targets_, Shape{rows}, TensorOptions{options_.target_dtype});
    return std::make_shared<TensorDataset>(data, target, loc_);
  }

 private:
  void check_options() const {
    if (options_.dtype != DType::Float32 && options_.dtype != DType::Float64)
      fail("read_csv", loc_, "expected CsvOptions::dtype float32 or float64, but got {}",
           dtype_name(options_.dtype));
    DType t = options_.target_dtype;
    if (t != DType::Int64 && t != DType::Float32 && t != DType::Float64)
      fail("read_csv", loc_,
           "expected CsvOptions::target_dtype int64, float32 or float64, but got {}",
           dtype_name(t));
    if (options_.delimiter == '"' || options_.delimiter == '\n' || options_.delimiter == '\r')
      fail("read_csv", loc_,
           "expected a delimiter other than a quote or a line break, but got byte 0x{:02x}",
           static_cast<unsigned char>(options_.delimiter));
  }

  std::string slurp() const {
    std::vector<uint8_t> bytes = io::read_regular_file(path_, "read_csv", loc_);
    return std::string(bytes.begin(), bytes.end());
  }

  void resolve_target() {
    if (!options_.target_column) return;
    if (const auto* name = std::get_if<std::string>(&*options_.target_column)) {
      if (!options_.header)
        fail("read_csv", loc_,
             "'{}': target column \"{}\" is a name, but CsvOptions::header is false", path_, *name);
      for (int64_t c = 0; c < columns_; ++c) {
        if (names_[c] != *name) continue;
        if (target_ >= 0)
          fail("read_csv", loc_,
               "'{}': target column \"{}\" is ambiguous: columns {} and {} have that name", path_,
               *name, target_ + 1, c + 1);
        target_ = c;
      }
      if (target_ < 0)
        fail("read_csv", loc_,
             "'{}': expected a target column named \"{}\", but the header has [{}]", path_, *name,
             fmt::join(names_, ", "));
      return;
    }
    int64_t index = std::get<int64_t>(*options_.target_column);
    int64_t resolved = index < 0 ? index + columns_ : index;
    if (resolved < 0 || resolved >= columns_)
      fail("read_csv", loc_, "'{}': expected a target column index in [{}, {}), but got {}", path_,
           -columns_, columns_, index);
    target_ = resolved;
  }

  std::string column_name(int64_t c) const {
    if (names_.empty()) return fmt::format("column {}", c + 1);
    return fmt::format("column {} (\"{}\")", c + 1, names_[c]);
  }

  [[noreturn]] void bad_cell(const Cell& cell, int64_t c, std::string_view expected) const {
    fail("read_csv", loc_, "'{}' line {}, {}, byte offset {}: expected {}, but got \"{}\"", path_,
         cell.line, column_name(c), cell.offset, expected, shorten(cell.text));
  }

  void add_cell(const Cell& cell, int64_t c) {
    if (c != target_) {
      double v;
      if (!parse_whole(cell.text, v)) bad_cell(cell, c, "a number");
      features_.push_back(v);
      return;
    }
    if (options_.target_dtype != DType::Int64) {
      double v;
      if (!parse_whole(cell.text, v)) bad_cell(cell, c, "a number");
      targets_.push_back(v);
      return;
    }
    int64_t label;
    if (!parse_whole(cell.text, label)) {
      // "3.0" (as pandas writes integer columns holding NaN) is accepted as 3.
      double v;
      if (!parse_whole(cell.text, v) || !std::isfinite(v) || v != std::floor(v) ||
          std::fabs(v) > 9.0e15)
        bad_cell(cell, c, "an integer label");
      label = static_cast<int64_t>(v);
    }
    labels_.push_back(label);
  }

  const std::string& path_;
  const CsvOptions& options_;
  const Loc& loc_;
  std::vector<std::string> names_;
  int64_t columns_ = -1;
  int64_t target_ = -1;
  std::vector<double> features_;
  std::vector<double> targets_;
  std::vector<int64_t> labels_;
};

}  // namespace

std::shared_ptr<TensorDataset> read_csv(const std::string& path, const CsvOptions& options,
                                        const Loc& loc) {
  return CsvReader(path, options, loc).read();
}

}  // namespace kiln::data
