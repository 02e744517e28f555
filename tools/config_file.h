#pragma once
// `kiln train --config run.json`: every flag of the command settable from a JSON file. The file is
// an object of settings keyed by the flag's name in snake_case ({"lr": 0.01, "batch_size": 64,
// "augment": true}), or a run's own config.json (its "settings" object), so a recorded run can be
// trained again as it was. The settings become command-line arguments placed before the real ones
// and parsed by the same flag definitions, so they meet the same checks; a flag also typed on the
// command line wins over the file.
#include <set>
#include <string>
#include <vector>

namespace kiln::cli {

// The arguments the file at `path` stands for ("--lr", "0.01", "--augment", ...), leaving out
// settings whose flag appears in `command_line` (as "--flag" or "--flag=value"). `flags` are the
// subcommand's long flags ("--lr"); a key naming none of them, a value that is an array, object or
// null, or an unreadable / malformed file is an Error naming the file and the key.
std::vector<std::string> config_arguments(const std::string& path,
                                          const std::set<std::string>& flags,
                                          const std::vector<std::string>& command_line);

}  // namespace kiln::cli
