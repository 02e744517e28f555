#include "tools/flag_checks.h"

#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>

namespace kiln::cli {

namespace {

// The whole of `text` as a double, or an error message.
std::string parse(const std::string& text, double& value) {
  const char* begin = text.c_str();
  char* end = nullptr;
  errno = 0;
  value = std::strtod(begin, &end);
  if (text.empty() || end == begin || *end != '\0')
    return fmt::format("'{}' is not a number", text);
  if (!std::isfinite(value) || errno == ERANGE)
    return fmt::format("expected a finite number, but got '{}'", text);
  return "";
}

CLI::Validator bounded(double lo, double hi, bool lo_open, std::string description) {
  return CLI::Validator(
      [lo, hi, lo_open](std::string& text) -> std::string {
        double v = 0;
        if (std::string bad = parse(text, v); !bad.empty()) return bad;
        if (lo_open ? !(v > lo) : !(v >= lo))
          return fmt::format("expected a number {} {}, but got {}", lo_open ? ">" : ">=", lo, text);
        if (!(v <= hi)) return fmt::format("expected a number <= {}, but got {}", hi, text);
        return "";
      },
      std::move(description));
}

}  // namespace

CLI::Validator number_in(double lo, double hi, bool lo_open) {
  return bounded(lo, hi, lo_open, fmt::format("NUMBER in {}{}, {}]", lo_open ? "(" : "[", lo, hi));
}

CLI::Validator positive_number() {
  return bounded(0.0, std::numeric_limits<double>::max(), true, "NUMBER > 0");
}

CLI::Validator non_negative_number() {
  return bounded(0.0, std::numeric_limits<double>::max(), false, "NUMBER >= 0");
}

CLI::Validator non_negative_integer() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        const bool digits =
            !text.empty() && text.find_first_not_of("0123456789") == std::string::npos;
        if (!digits) return fmt::format("expected a whole number >= 0, but got '{}'", text);
        errno = 0;
        std::strtoull(text.c_str(), nullptr, 10);
        if (errno == ERANGE) return fmt::format("expected a number below 2^64, but got {}", text);
        return "";
      },
      "INTEGER >= 0");
}

std::string without_call_site(const std::string& message) {
  const std::string mark = " \u2014 at ";
  const size_t at = message.rfind(mark);
  // Only a trailing "file:line" (no newline after it) is a call site.
  if (at == std::string::npos || message.find('\n', at) != std::string::npos) return message;
  return message.substr(0, at);
}

}  // namespace kiln::cli
