#include "kiln/nn/container.h"

#include <fmt/ranges.h>

namespace kiln::nn {

Sequential::Sequential(std::initializer_list<ModulePtr> modules) : Module("Sequential") {
  for (const ModulePtr& m : modules) push_back(m);
}

void Sequential::push_back(ModulePtr module, const Loc& loc) {
  add_module(std::to_string(items_.size()), module, loc);
  items_.push_back(std::move(module));
}

void Sequential::extend(const std::vector<ModulePtr>& modules, const Loc& loc) {
  for (const ModulePtr& m : modules) push_back(m, loc);
}

Tensor Sequential::forward(const Tensor& input) {
  Tensor x = input;
  for (const ModulePtr& m : items_) x = (*m)(x);
  return x;
}

ModuleList::ModuleList(std::initializer_list<ModulePtr> modules) : Module("ModuleList") {
  for (const ModulePtr& m : modules) push_back(m);
}

void ModuleList::push_back(ModulePtr module, const Loc& loc) {
  add_module(std::to_string(items_.size()), module, loc);
  items_.push_back(std::move(module));
}

void ModuleDict::insert(const std::string& key, ModulePtr module, const Loc& loc) {
  add_module(key, std::move(module), loc);
}

bool ModuleDict::contains(const std::string& key) const {
  for (const auto& [name, m] : named_children())
    if (name == key) return true;
  return false;
}

const ModulePtr& ModuleDict::at(const std::string& key, const Loc& loc) const {
  for (const auto& [name, m] : named_children())
    if (name == key) return m;
  fail("ModuleDict", loc, "expected one of the keys [{}], but got '{}'", fmt::join(keys(), ", "),
       key);
}

std::vector<std::string> ModuleDict::keys() const {
  std::vector<std::string> out;
  for (const auto& [name, m] : named_children()) out.push_back(name);
  return out;
}

}  // namespace kiln::nn
