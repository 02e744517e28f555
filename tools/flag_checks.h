#pragma once
// Checks of the `kiln` command's numeric flags, with messages a user can act on. CLI11's own
// validators let NaN through (every comparison with it is false), print an open bound as the
// largest double (309 digits), call "abc" out of range, and parse "-1" into an unsigned seed as
// 18446744073709551615; these do none of that.
#include <CLI/CLI.hpp>
#include <string>

namespace kiln::cli {

// A finite number x with lo <= x <= hi (lo < x when lo_open); "abc", "nan", "inf" and values
// outside are refused, naming the bound that failed.
CLI::Validator number_in(double lo, double hi, bool lo_open = false);
// A finite number > 0 / >= 0, with no upper bound.
CLI::Validator positive_number();
CLI::Validator non_negative_number();
// A whole number >= 0 (for unsigned flags such as --seed, which must not wrap a negative).
CLI::Validator non_negative_integer();

// An error's text for the command line: kiln's messages end in "— at file:line", the line of
// the C++ call that failed; for a user of the command that line is inside the command itself, so
// it is dropped.
std::string without_call_site(const std::string& message);

}  // namespace kiln::cli
