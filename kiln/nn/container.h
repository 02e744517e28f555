#pragma once
#include <initializer_list>
#include <map>
#include <string>
#include <type_traits>
#include <vector>

#include "kiln/nn/module.h"

namespace kiln::nn {

// Runs its children in order; they are named "0", "1", ... as in torch.nn.Sequential, so state
// dicts read "0.weight".
class Sequential : public Module {
 public:
  Sequential() : Module("Sequential") {}
  Sequential(std::initializer_list<ModulePtr> modules);
  // For std::make_shared<Sequential>(a, b, c).
  template <class... M>
  requires(sizeof...(M) > 0 &&
           (std::is_base_of_v<Module, M> && ...)) explicit Sequential(std::shared_ptr<M>... modules)
      : Module("Sequential") {
    (push_back(std::move(modules)), ...);
  }
  void push_back(ModulePtr module, const Loc& loc = Loc::current());
  void extend(const std::vector<ModulePtr>& modules, const Loc& loc = Loc::current());
  size_t size() const { return items_.size(); }
  const ModulePtr& operator[](size_t i) const { return items_.at(i); }
  Tensor forward(const Tensor& input) override;

 private:
  std::vector<ModulePtr> items_;
};

// Holds modules by index; it has no forward of its own (the owner decides how to call them).
class ModuleList : public Module {
 public:
  ModuleList() : Module("ModuleList") {}
  ModuleList(std::initializer_list<ModulePtr> modules);
  void push_back(ModulePtr module, const Loc& loc = Loc::current());
  size_t size() const { return items_.size(); }
  const ModulePtr& operator[](size_t i) const { return items_.at(i); }
  std::vector<ModulePtr>::const_iterator begin() const { return items_.begin(); }
  std::vector<ModulePtr>::const_iterator end() const { return items_.end(); }

 private:
  std::vector<ModulePtr> items_;
};

// Holds modules by name, in insertion order.
class ModuleDict : public Module {
 public:
  ModuleDict() : Module("ModuleDict") {}
  void insert(const std::string& key, ModulePtr module, const Loc& loc = Loc::current());
  bool contains(const std::string& key) const;
  const ModulePtr& at(const std::string& key, const Loc& loc = Loc::current()) const;
  const ModulePtr& operator[](const std::string& key) const { return at(key); }
  std::vector<std::string> keys() const;
  size_t size() const { return named_children().size(); }
};

}  // namespace kiln::nn
