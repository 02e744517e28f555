#pragma once
// Runs a shell command from a test (Debian's Python for live parity, say) and collects its output.
#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace kiln::test {

// Runs `cmd` with stderr joined to stdout; returns its exit status (-1 when it could not run or
// did not exit normally) and appends its output to `out`.
inline int run_command(const std::string& cmd, std::string& out) {
  FILE* pipe = ::popen((cmd + " 2>&1").c_str(), "r");
  if (!pipe) return -1;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) out.append(buf, n);
  const int status = ::pclose(pipe);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace kiln::test
