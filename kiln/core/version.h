#pragma once

namespace kiln {

// kiln's version, recorded in what it writes (a saved model's producer). CMakeLists.txt refuses to
// configure when it differs from project(kiln VERSION ...), so the two cannot drift apart.
inline constexpr const char* kVersion = "0.1.0";

}  // namespace kiln
