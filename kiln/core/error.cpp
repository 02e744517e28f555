#include "kiln/core/error.h"

#include "kiln/core/call_site.h"

namespace kiln {

std::string format_location(const std::source_location& loc) {
  std::string_view file = loc.file_name();
  auto slash = file.find_last_of('/');
  if (slash != std::string_view::npos) file = file.substr(slash + 1);
  return fmt::format("{}:{}", file, loc.line());
}

std::string error_message(std::string_view op, std::string_view message,
                          const std::source_location& loc) {
  return fmt::format("[{}] {} — at {}", op, message, describe_call_site(loc));
}

void throw_error(std::string_view op, std::string_view message, const std::source_location& loc) {
  throw Error(error_message(op, message, loc));
}

}  // namespace kiln
