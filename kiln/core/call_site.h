#pragma once
#include <source_location>
#include <string>

namespace kiln {

// Note [user call site]
// ~~~~~~~~~~~~~~~~~~~~~
// An error names the user's line. Public functions take `loc = std::source_location::current()`,
// which is the user's line when the user calls them, but kiln's own line when kiln code calls
// kiln code: a layer's forward calling linear(), `a + b` calling add() (an operator cannot take a
// defaulted source_location), the backward engine calling a node. Such a location is "library"
// (its file is under kiln's own source folder). An error raised at a library location names,
// in this order:
//   1. the first stack frame outside libkiln whose source line is known (the user's program built
//      with -g or -g1): the exact line, also for operators and for forward() called directly;
//   2. the innermost CallSiteScope: user-facing entry points that are not ops (Module::operator(),
//      backward(), grad()) open one with the caller's line, so programs built without debug
//      information still get their line;
//   3. the first frame outside libkiln by function and binary, "main (./train)";
//   4. the library location itself.
// Locations recorded for later (the op a tape node was made by) use user_location(), which is
// cheap: the location itself if it is the user's, else the innermost scope.

// True when loc lies in kiln's own sources.
bool is_library_location(const std::source_location& loc);

// Opens a user call site for the code it encloses (this thread). A library location opens
// nothing, so nested kiln entry points keep the user's outer line.
class CallSiteScope {
 public:
  explicit CallSiteScope(const std::source_location& loc);
  ~CallSiteScope();
  CallSiteScope(const CallSiteScope&) = delete;
  CallSiteScope& operator=(const CallSiteScope&) = delete;

 private:
  bool pushed_;
};

// loc if it is the user's; else the innermost CallSiteScope's location; else loc.
std::source_location user_location(const std::source_location& loc);

// "file.cpp:42" (or "function (binary)") for an error raised at loc; see the Note.
std::string describe_call_site(const std::source_location& loc);

}  // namespace kiln
