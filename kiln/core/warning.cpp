#include "kiln/core/warning.h"

#include <cstdio>
#include <mutex>
#include <set>

namespace kiln {

namespace {
struct Warnings {
  std::mutex mutex;
  std::set<std::string, std::less<>> seen;
  WarningHandler handler;
};
Warnings& warnings() {
  static auto* w = new Warnings;  // never destroyed: warnings may come from static destructors
  return *w;
}
}  // namespace

void warn_once(std::string_view key, const std::string& message) {
  Warnings& w = warnings();
  WarningHandler handler;
  {
    std::lock_guard<std::mutex> lock(w.mutex);
    if (!w.seen.emplace(key).second) return;
    handler = w.handler;
  }
  if (handler) {
    handler(message);
  } else {
    std::fprintf(stderr, "kiln: warning: %s\n", message.c_str());
    std::fflush(stderr);
  }
}

WarningHandler set_warning_handler(WarningHandler handler) {
  Warnings& w = warnings();
  std::lock_guard<std::mutex> lock(w.mutex);
  std::swap(w.handler, handler);
  return handler;
}

void reset_warnings() {
  Warnings& w = warnings();
  std::lock_guard<std::mutex> lock(w.mutex);
  w.seen.clear();
}

}  // namespace kiln
