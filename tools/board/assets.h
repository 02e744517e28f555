#pragma once
// The board's page, script and style, embedded in the binary at build time (embed_assets.cmake),
// so `kiln board` works offline and from any directory.
#include <optional>
#include <string_view>

namespace kiln::cli {

// The bytes of the asset called `name` ("index.html", "board.js", "board.css"), or nothing.
std::optional<std::string_view> board_asset(std::string_view name);

}  // namespace kiln::cli
