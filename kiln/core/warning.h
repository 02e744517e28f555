#pragma once
#include <functional>
#include <string>
#include <string_view>

namespace kiln {

// Note [warnings]: kiln warns where it chooses something the user did not ask for and should know
// about (autocast keeping float32 on a CPU without native 16-bit kernels). A warning is printed
// once per process and key, on stderr as "kiln: warning: ...", or handed to the handler that
// set_warning_handler installed (tests capture them; an application may log them).
void warn_once(std::string_view key, const std::string& message);

// Replaces the handler (nullptr restores printing to stderr) and returns the previous one.
using WarningHandler = std::function<void(const std::string& message)>;
WarningHandler set_warning_handler(WarningHandler handler);

// Forgets which keys were warned about, so the next warn_once of each prints again (tests).
void reset_warnings();

}  // namespace kiln
