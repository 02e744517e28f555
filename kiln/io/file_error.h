#pragma once
// How the file readers of kiln/io (safetensors, .npy) word their errors: "[op] 'file': message —
// at <the caller's line>".
#include <fmt/format.h>

#include <string>
#include <string_view>
#include <utility>

#include "kiln/core/error.h"

namespace kiln::io {

// Prefixes every message with the operation and the file, and appends the caller's line.
class FileErrorReporter {
 public:
  FileErrorReporter(std::string_view op, const std::string& file, const Loc& loc)
      : op_(op), file_(file), loc_(loc) {}
  template <class... Args>
  [[noreturn]] void operator()(fmt::format_string<Args...> f, Args&&... args) const {
    throw_error(op_, fmt::format("'{}': {}", file_, fmt::format(f, std::forward<Args>(args)...)),
                loc_);
  }

 private:
  std::string_view op_;
  const std::string& file_;
  const Loc& loc_;
};

}  // namespace kiln::io
