#include "tools/interrupt.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

namespace kiln::cli {

namespace {

// The handler may only call async-signal-safe functions, so it prints a message prepared in
// advance: two buffers, the one being rewritten never the one published.
std::string buffers[2];
std::atomic<const char*> published{nullptr};
int next_buffer = 0;

void handle(int) {
  const char* text = published.load();
  if (text != nullptr) {
    ssize_t ignored = write(STDERR_FILENO, text, std::strlen(text));
    (void)ignored;
  }
  _exit(130);
}

}  // namespace

void on_interrupt_say(const std::string& message) {
  std::string& buffer = buffers[next_buffer];
  next_buffer = 1 - next_buffer;
  buffer = "\n" + message + "\n";
  published.store(buffer.c_str());
  static const bool installed = [] {
    struct sigaction action {};
    action.sa_handler = handle;
    sigemptyset(&action.sa_mask);
    sigaction(SIGINT, &action, nullptr);
    sigaction(SIGTERM, &action, nullptr);
    return true;
  }();
  (void)installed;
}

}  // namespace kiln::cli
