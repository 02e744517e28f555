#pragma once
#include <fmt/format.h>

#include <source_location>
#include <stdexcept>
#include <string>
#include <string_view>

namespace kiln {

// A mistake of the caller (bad shape, dtype, device, file, request). Its text reads
// "[op] expectation, but got ... — at file.cpp:42".
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// A broken invariant inside kiln: a bug of ours, never of the user.
class InternalError : public std::logic_error {
 public:
  explicit InternalError(const std::string& what) : std::logic_error(what) {}
};

// "file.cpp:42" for a call site (the file's base name keeps messages short).
std::string format_location(const std::source_location& loc);

// Builds "[op] message — at file:line", the line being the user's (Note [user call site]).
std::string error_message(std::string_view op, std::string_view message,
                          const std::source_location& loc);

[[noreturn]] void throw_error(std::string_view op, std::string_view message,
                              const std::source_location& loc);

template <class... Args>
[[noreturn]] void fail(std::string_view op, const std::source_location& loc,
                       fmt::format_string<Args...> f, Args&&... args) {
  throw_error(op, fmt::format(f, std::forward<Args>(args)...), loc);
}

#define KILN_INTERNAL_ASSERT(cond, msg)                                                            \
  do {                                                                                             \
    if (!(cond))                                                                                   \
      throw ::kiln::InternalError(std::string("kiln internal error: ") + (msg) + " (" + __FILE__ + \
                                  ":" + std::to_string(__LINE__) + ")");                           \
  } while (0)

}  // namespace kiln
