#include "kiln/core/call_site.h"

#include <cxxabi.h>
#include <dlfcn.h>
#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>
#include <execinfo.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <vector>

#include "kiln/core/error.h"

#if !defined(KILN_LIBRARY_SOURCE_DIR) || !defined(KILN_LIBRARY_SOURCE_DIR_FROM_BUILD)
#error "KILN_LIBRARY_SOURCE_DIR(_FROM_BUILD) must name kiln's source folder (set by CMakeLists.txt)"
#endif

namespace kiln {

namespace {

thread_local std::vector<std::source_location> scopes;

std::string base_name(std::string_view path) {
  auto slash = path.find_last_of('/');
  return std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
}

// A file of the C++ standard library's headers (unique_ptr.h, stl_construct.h, ...).
bool is_standard_header(std::string_view path) {
  return path.find("/include/c++/") != std::string_view::npos;
}

std::string demangle(const char* name) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> out(abi::__cxa_demangle(name, nullptr, nullptr, &status),
                                             std::free);
  std::string s = status == 0 && out ? out.get() : name;
  // "train_step(kiln::nn::Module&, ...)" reads better as "train_step".
  if (auto paren = s.find('('); paren != std::string::npos && paren > 0) s.resize(paren);
  return s;
}

// The base address of the module that holds `address` (0 when none).
const void* module_base(const void* address) {
  Dl_info info{};
  return dladdr(address, &info) ? info.dli_fbase : nullptr;
}

const void* library_base() {
  static const void* base = module_base(reinterpret_cast<const void*>(&is_library_location));
  return base;
}

// A file of kiln's own sources, or a standard header: a line there is never the user's (a kiln
// header's inline function, SymInt's conversion to int64_t, inlined into the user's binary).
bool not_users_file(std::string_view path) {
  static constexpr std::string_view dir = KILN_LIBRARY_SOURCE_DIR;
  static constexpr std::string_view from_build = KILN_LIBRARY_SOURCE_DIR_FROM_BUILD;
  return path.starts_with(dir) || path.starts_with(from_build) || is_standard_header(path);
}

// Source lines from DWARF through elfutils' libdwfl: one session for the process, made on first
// use and refreshed when an address falls outside every module it knows (a dlopen since).
class LineTable {
 public:
  ~LineTable() {
    if (dwfl_) dwfl_end(dwfl_);
  }

  struct Frame {
    std::string file;  // empty when the module has no line information
    int line = 0;
    std::string function;
    std::string binary;
    bool standard = false;  // the line lies in a standard library or kiln header
  };

  std::optional<Frame> lookup(uintptr_t pc) {
    std::lock_guard<std::mutex> lock(mutex_);
    Dwfl_Module* mod = find_module(pc);
    if (!mod) return std::nullopt;
    Frame f;
    const char* module_name =
        dwfl_module_info(mod, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr);
    f.binary = module_name ? base_name(module_name) : "?";
    if (const char* sym = dwfl_module_addrname(mod, pc)) f.function = demangle(sym);
    if (Dwfl_Line* line = dwfl_module_getsrc(mod, pc)) {
      int lineno = 0;
      const char* file = dwfl_lineinfo(line, nullptr, &lineno, nullptr, nullptr, nullptr);
      if (file && lineno > 0) {
        std::string path = file;
        if (not_users_file(path)) inlined_call_site(mod, pc, path, lineno);
        f.standard = not_users_file(path);
        f.file = base_name(path);
        f.line = lineno;
      }
    }
    return f;
  }

 private:
  // A line in a standard or kiln header that was inlined (std::make_unique's body, say) is
  // replaced by the line that called it: the DW_AT_call_file/line of the innermost inlined scope
  // at pc whose call site is the user's. Unchanged when the DWARF does not say.
  static void inlined_call_site(Dwfl_Module* mod, uintptr_t pc, std::string& path, int& lineno) {
    Dwarf_Addr bias = 0;
    Dwarf_Die* cu = dwfl_module_addrdie(mod, pc, &bias);
    Dwarf_Files* files = nullptr;
    size_t file_count = 0;
    if (cu == nullptr || dwarf_getsrcfiles(cu, &files, &file_count) != 0) return;
    Dwarf_Die* scopes = nullptr;
    const int n = dwarf_getscopes(cu, pc - bias, &scopes);
    for (int i = 0; i < n; ++i) {
      if (dwarf_tag(&scopes[i]) != DW_TAG_inlined_subroutine) continue;
      Dwarf_Attribute attr;
      Dwarf_Word file_index = 0, call_line = 0;
      if (dwarf_attr(&scopes[i], DW_AT_call_file, &attr) == nullptr ||
          dwarf_formudata(&attr, &file_index) != 0 ||
          dwarf_attr(&scopes[i], DW_AT_call_line, &attr) == nullptr ||
          dwarf_formudata(&attr, &call_line) != 0 || file_index >= file_count)
        continue;
      const char* call_file = dwarf_filesrc(files, file_index, nullptr, nullptr);
      if (call_file == nullptr || not_users_file(call_file)) continue;
      path = call_file;
      lineno = static_cast<int>(call_line);
      break;
    }
    std::free(scopes);
  }

  Dwfl_Module* find_module(uintptr_t pc) {
    for (int attempt = 0; attempt < 2; ++attempt) {
      if (!dwfl_ || attempt == 1) report();
      if (!dwfl_) return nullptr;
      if (Dwfl_Module* mod = dwfl_addrmodule(dwfl_, pc)) return mod;
    }
    return nullptr;
  }

  void report() {
    if (dwfl_) dwfl_end(dwfl_);
    callbacks_.find_elf = dwfl_linux_proc_find_elf;
    callbacks_.find_debuginfo = dwfl_standard_find_debuginfo;
    dwfl_ = dwfl_begin(&callbacks_);
    if (!dwfl_) return;
    if (dwfl_linux_proc_report(dwfl_, getpid()) != 0 || dwfl_report_end(dwfl_, nullptr, nullptr)) {
      dwfl_end(dwfl_);
      dwfl_ = nullptr;
    }
  }

  std::mutex mutex_;
  Dwfl_Callbacks callbacks_{};
  Dwfl* dwfl_ = nullptr;
};

LineTable& line_table() {
  static LineTable* table = new LineTable();  // never destroyed: errors may be raised at exit
  return *table;
}

// Steps 1 and 3 of Note [user call site]: the frames outside libkiln, innermost first.
struct StackAnswer {
  std::string exact;     // "file.cpp:42" of the first outside frame with a line
  std::string function;  // "main (train)" of the first outside frame
};

StackAnswer outside_frames() {
  StackAnswer answer;
  void* pcs[64];
  int n = backtrace(pcs, 64);
  const void* lib = library_base();
  if (!lib) return answer;
  // Frames before the first libkiln one are the unwinder's (a sanitizer intercepts backtrace()).
  bool seen_library = false;
  for (int i = 0; i < n; ++i) {
    const void* base = module_base(pcs[i]);
    if (base == lib) {
      seen_library = true;
      continue;
    }
    if (!seen_library) continue;
    // A return address points after the call; the call itself is one byte earlier.
    auto pc = reinterpret_cast<uintptr_t>(pcs[i]) - 1;
    std::optional<LineTable::Frame> f = line_table().lookup(pc);
    if (!f) continue;
    if (answer.function.empty() && !f->function.empty())
      answer.function = fmt::format("{} ({})", f->function, f->binary);
    if (!f->file.empty() && !f->standard) {
      answer.exact = fmt::format("{}:{}", f->file, f->line);
      break;
    }
  }
  return answer;
}

}  // namespace

bool is_library_location(const std::source_location& loc) {
  static constexpr std::string_view dir = KILN_LIBRARY_SOURCE_DIR;
  static constexpr std::string_view from_build = KILN_LIBRARY_SOURCE_DIR_FROM_BUILD;
  const std::string_view file = loc.file_name();
  // A location inside the C++ standard library is never the user's line: a constructor's
  // defaulted Loc::current() evaluated in std::make_unique / std::make_shared records
  // unique_ptr.h or stl_construct.h. Counted as the library's, so the stack names the caller.
  return file.starts_with(dir) || file.starts_with(from_build) || is_standard_header(file);
}

CallSiteScope::CallSiteScope(const std::source_location& loc) : pushed_(!is_library_location(loc)) {
  if (pushed_) scopes.push_back(loc);
}

CallSiteScope::~CallSiteScope() {
  if (pushed_) scopes.pop_back();
}

std::source_location user_location(const std::source_location& loc) {
  if (!is_library_location(loc) || scopes.empty()) return loc;
  return scopes.back();
}

std::string describe_call_site(const std::source_location& loc) {
  if (!is_library_location(loc)) return format_location(loc);
  StackAnswer stack;
  try {
    stack = outside_frames();
  } catch (...) {
    // Formatting or allocation failed while describing another error: fall back below.
  }
  if (!stack.exact.empty()) return stack.exact;
  if (!scopes.empty()) return format_location(scopes.back());
  if (!stack.function.empty()) return stack.function;
  return format_location(loc);
}

}  // namespace kiln
