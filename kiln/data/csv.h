#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <variant>

#include "kiln/core/tensor.h"
#include "kiln/data/dataset.h"

namespace kiln::data {

struct CsvOptions {
  // The first record names the columns.
  bool header = true;
  char delimiter = ',';
  // The column that becomes the target: a header name, or a 0-based index (negative counts from
  // the end, as in Python). Unset: every column is a feature and the dataset has no target.
  std::optional<std::variant<std::string, int64_t>> target_column;
  // Features: Float32 or Float64.
  DType dtype = DType::Float32;
  // Target: Int64 (class labels; a cell must hold an integer, "3" or "3.0") or Float32 / Float64.
  DType target_dtype = DType::Int64;
};

// Note [csv]
// ~~~~~~~~~~
// Reads a numeric CSV file (RFC 4180: fields may be quoted with ", "" is a quote inside quotes,
// quoted fields may hold delimiters and line breaks; records end with LF or CRLF) into a
// TensorDataset of features [N, F] (F = columns minus the target) and, with target_column, a
// target [N]. Blank lines (a UTF-8 byte-order mark, empty trailing lines) are skipped; spaces
// around a number are ignored. Every cell must be a number (C locale: "1.5", "-2e3", "nan",
// "inf"); there are no missing values. A row with a different number of fields than the header
// (or the first row), a cell that is not a number, or an unterminated quote is a kiln::Error that
// names the file, the line (1-based), the column (1-based, and its header name) and the byte
// offset of the cell in the file. The whole file is read into memory.
std::shared_ptr<TensorDataset> read_csv(const std::string& path, const CsvOptions& options = {},
                                        const Loc& loc = Loc::current());

}  // namespace kiln::data
