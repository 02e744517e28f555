#include "tools/config_file.h"

#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "kiln/core/error.h"

namespace kiln::cli {

namespace {

bool on_command_line(const std::string& flag, const std::vector<std::string>& args) {
  for (const std::string& arg : args)
    if (arg == flag || arg.rfind(flag + "=", 0) == 0) return true;
  return false;
}

}  // namespace

std::vector<std::string> config_arguments(const std::string& path,
                                          const std::set<std::string>& flags,
                                          const std::vector<std::string>& command_line) {
  std::ifstream in(path);
  if (!in) throw Error("[kiln train] --config: cannot read " + path);
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::parse_error& e) {
    throw Error(fmt::format("[kiln train] --config: {} is not valid JSON: {}", path, e.what()));
  }
  if (j.is_object() && j.contains("settings") && j["settings"].is_object()) j = j["settings"];
  if (!j.is_object())
    throw Error("[kiln train] --config: expected " + path +
                " to hold a JSON object of settings ({\"lr\": 0.01, ...}), but got " +
                std::string(j.type_name()));
  std::vector<std::string> args;
  for (const auto& [key, value] : j.items()) {
    std::string flag = "--" + key;
    for (char& c : flag)
      if (c == '_') c = '-';
    if (!flags.contains(flag) || flag == "--config")
      throw Error(
          fmt::format("[kiln train] --config: {} sets \"{}\", which is not a setting of "
                      "kiln train (they are the flags' names: {})",
                      path, key, fmt::join(flags, ", ")));
    if (on_command_line(flag, command_line)) continue;
    if (value.is_boolean()) {
      if (value.get<bool>()) args.push_back(flag);
    } else if (value.is_string()) {
      args.insert(args.end(), {flag, value.get<std::string>()});
    } else if (value.is_number()) {
      args.insert(args.end(), {flag, value.dump()});
    } else {
      throw Error(
          fmt::format("[kiln train] --config: expected \"{}\" in {} to be a string, number "
                      "or boolean, but got {}",
                      key, path, value.dump()));
    }
  }
  return args;
}

}  // namespace kiln::cli
