#include "kiln/nn/module.h"

#include <algorithm>
#include <unordered_map>

#include "kiln/core/call_site.h"
#include "kiln/core/grad_mode.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/shape_ops.h"

namespace kiln::nn {

namespace {

std::string join(const std::vector<std::string>& parts, const char* sep) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) out += sep;
    out += parts[i];
  }
  return out;
}

std::string dotted(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

}  // namespace

void replace_tensor_data(const Tensor& dst, const Tensor& src) {
  TensorImpl* d = dst.impl();
  TensorImpl* s = src.impl();
  d->storage_ = s->storage_;
  d->shape_ = s->shape_;
  d->strides_ = s->strides_;
  d->offset_ = s->offset_;
  d->dtype_ = s->dtype_;
  d->is_view_ = false;
  if (d->autograd_) d->autograd_->grad.reset();
}

Tensor Module::forward(const Tensor&) {
  fail(type_name_, Loc::current(),
       "forward(x) is not implemented for this module; a module with several inputs is called "
       "as model({{x, y}}) (forward_many)");
}

std::vector<Tensor> Module::forward_many(const std::vector<Tensor>& inputs) {
  if (inputs.size() != 1)
    fail(type_name_, Loc::current(),
         "expected 1 input (this module implements forward(x)), but got {}; a module with several "
         "inputs overrides forward_many",
         inputs.size());
  return {forward(inputs[0])};
}

std::vector<Tensor> Module::operator()(const std::vector<Tensor>& inputs, const Loc& loc) {
  CallSiteScope call_site(loc);
  std::vector<Tensor> out = forward_many(inputs);
  auto hooks = hooks_;
  if (!inputs.empty() && !out.empty())
    for (auto& [id, hook] : hooks) hook(*this, inputs[0], out[0]);
  return out;
}

Tensor Module::operator()(const Tensor& input, const Loc& loc) {
  // Errors raised inside forward (and the hooks) name the caller's line.
  CallSiteScope call_site(loc);
  Tensor out = forward(input);
  // A copy: a hook may remove itself (or add others) while running.
  auto hooks = hooks_;
  for (auto& [id, hook] : hooks) hook(*this, input, out);
  return out;
}

void Module::check_new_name(const std::string& what, const std::string& name,
                            const Loc& loc) const {
  if (name.empty() || name.find('.') != std::string::npos)
    fail(what, loc, "expected a non-empty name without '.', but got '{}' in {}", name, type_name_);
  bool taken =
      std::any_of(params_.begin(), params_.end(), [&](const auto& p) { return p.first == name; }) ||
      std::any_of(buffers_.begin(), buffers_.end(),
                  [&](const auto& b) { return b.name == name; }) ||
      std::any_of(children_.begin(), children_.end(),
                  [&](const auto& c) { return c.first == name; });
  if (taken)
    fail(what, loc, "expected a new name, but '{}' is already registered in {}", name, type_name_);
}

Tensor& Module::register_parameter(const std::string& name, Tensor t, bool requires_grad,
                                   const Loc& loc) {
  check_new_name("register_parameter", name, loc);
  if (!t.defined())
    fail("register_parameter", loc, "expected a defined tensor for '{}', but got an undefined one",
         name);
  if (!t.is_leaf())
    fail("register_parameter", loc,
         "expected a leaf tensor for '{}', but got a non-leaf {} (computed by an op; use "
         "detach())",
         name, t.describe());
  t.set_requires_grad(requires_grad, loc);
  params_.emplace_back(name, std::move(t));
  return params_.back().second;
}

Tensor& Module::register_buffer(const std::string& name, Tensor t, bool persistent,
                                const Loc& loc) {
  check_new_name("register_buffer", name, loc);
  if (!t.defined())
    fail("register_buffer", loc, "expected a defined tensor for '{}', but got an undefined one",
         name);
  buffers_.push_back({name, std::move(t), persistent});
  return buffers_.back().tensor;
}

void Module::add_module(const std::string& name, ModulePtr module, const Loc& loc) {
  check_new_name("register_module", name, loc);
  if (!module)
    fail("register_module", loc, "expected a module for '{}', but got a null pointer", name);
  if (module.get() == this)
    fail("register_module", loc, "expected a different module for '{}', but got the {} itself",
         name, type_name_);
  children_.emplace_back(name, std::move(module));
}

void Module::collect_parameters(const std::string& prefix, StateDict& out,
                                std::vector<const TensorImpl*>& seen) const {
  for (const auto& [name, t] : params_) {
    if (std::find(seen.begin(), seen.end(), t.impl()) != seen.end()) continue;
    seen.push_back(t.impl());
    out.emplace_back(dotted(prefix, name), t);
  }
}

StateDict Module::named_parameters(bool recurse) const {
  StateDict out;
  std::vector<const TensorImpl*> seen;
  if (!recurse) {
    collect_parameters("", out, seen);
    return out;
  }
  for (const auto& [prefix, m] : named_modules()) m->collect_parameters(prefix, out, seen);
  return out;
}

std::vector<Tensor> Module::parameters(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_parameters(recurse)) out.push_back(t);
  return out;
}

void Module::collect_buffers(const std::string& prefix, bool persistent_only,
                             StateDict& out) const {
  for (const Buffer& b : buffers_)
    if (b.persistent || !persistent_only) out.emplace_back(dotted(prefix, b.name), b.tensor);
}

StateDict Module::named_buffers(bool recurse) const {
  StateDict out;
  if (!recurse) {
    collect_buffers("", false, out);
    return out;
  }
  for (const auto& [prefix, m] : named_modules()) m->collect_buffers(prefix, false, out);
  return out;
}

std::vector<Tensor> Module::buffers(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_buffers(recurse)) out.push_back(t);
  return out;
}

void Module::collect_modules(const std::string& prefix,
                             std::vector<std::pair<std::string, Module*>>& out) const {
  // Listed once even when shared, as PyTorch's named_modules does.
  for (const auto& [name, m] : out)
    if (m == this) return;
  out.emplace_back(prefix, const_cast<Module*>(this));
  for (const auto& [name, child] : children_) child->collect_modules(dotted(prefix, name), out);
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() const {
  std::vector<std::pair<std::string, Module*>> out;
  collect_modules("", out);
  return out;
}

void Module::apply(const std::function<void(Module&)>& fn) {
  for (auto& [name, child] : children_) child->apply(fn);
  fn(*this);
}

int64_t Module::num_parameters(bool trainable_only) const {
  int64_t n = 0;
  for (const Tensor& p : parameters())
    if (!trainable_only || p.requires_grad()) n += p.numel();
  return n;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

StateDict Module::state_dict() const {
  StateDict out;
  std::vector<const TensorImpl*> seen;
  for (const auto& [prefix, m] : named_modules()) {
    m->collect_parameters(prefix, out, seen);
    m->collect_buffers(prefix, true, out);
  }
  for (auto& [name, t] : out) t = t.detach();
  return out;
}

void Module::load_state_dict(const StateDict& entries, bool strict, const Loc& loc) {
  StateDict own = state_dict();
  std::unordered_map<std::string, const Tensor*> given;
  for (const auto& [name, t] : entries) given.emplace(name, &t);
  std::unordered_map<std::string, bool> known;
  for (const auto& [name, t] : own) known.emplace(name, true);

  std::vector<std::string> missing, unexpected, shape_bad, dtype_bad;
  for (const auto& [name, t] : own) {
    auto it = given.find(name);
    if (it == given.end()) {
      missing.push_back(name);
      continue;
    }
    const Tensor& src = *it->second;
    if (!src.defined() || src.shape() != t.shape())
      shape_bad.push_back(fmt::format("{} expected {} but got {}", name, shape_str(t.shape()),
                                      src.defined() ? shape_str(src.shape()) : "undefined"));
    else if (src.dtype() != t.dtype())
      dtype_bad.push_back(fmt::format("{} expected {} but got {}", name, dtype_name(t.dtype()),
                                      dtype_name(src.dtype())));
  }
  for (const auto& [name, t] : entries)
    if (!known.count(name)) unexpected.push_back(name);

  std::vector<std::string> problems;
  if (strict && !missing.empty()) problems.push_back("missing keys: " + join(missing, ", "));
  if (strict && !unexpected.empty())
    problems.push_back("unexpected keys: " + join(unexpected, ", "));
  if (!shape_bad.empty()) problems.push_back("shape mismatch: " + join(shape_bad, ", "));
  if (!dtype_bad.empty()) problems.push_back("dtype mismatch: " + join(dtype_bad, ", "));
  if (!problems.empty()) fail("load_state_dict", loc, "{}", join(problems, "; "));

  NoGradGuard no_grad;
  for (auto& [name, t] : own) {
    auto it = given.find(name);
    if (it != given.end()) t.copy_(*it->second, loc);
  }
}

void Module::zero_grad(bool set_to_none) {
  for (Tensor& p : parameters()) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    if (set_to_none) {
      p.set_grad(Tensor());
    } else {
      NoGradGuard no_grad;
      p.set_grad(g.detach());
      p.grad().zero_();
    }
  }
}

Module& Module::to(DType dtype, const Loc& loc) {
  NoGradGuard no_grad;
  auto convert = [&](const Tensor& t) {
    if (!is_floating(t.dtype()) || t.dtype() == dtype) return;
    replace_tensor_data(t, to_dtype(t, dtype, loc));
  };
  if (!is_floating(dtype))
    fail("Module.to", loc, "expected a floating-point dtype, but got {}", dtype_name(dtype));
  for (const Tensor& p : parameters()) convert(p);
  for (const Tensor& b : buffers()) convert(b);
  return *this;
}

void Module::add_regularizer(const std::string& param_name, Regularizer regularizer,
                             const Loc& loc) {
  // Module names hold no '.', so everything before the last '.' names the owning module.
  const size_t dot = param_name.rfind('.');
  const std::string prefix = dot == std::string::npos ? "" : param_name.substr(0, dot);
  const std::string local = dot == std::string::npos ? param_name : param_name.substr(dot + 1);
  Module* owner = nullptr;
  for (const auto& [name, m] : named_modules())
    if (name == prefix) owner = m;
  bool found = owner && std::any_of(owner->params_.begin(), owner->params_.end(),
                                    [&](const auto& p) { return p.first == local; });
  if (!found) {
    std::vector<std::string> names;
    for (const auto& [name, t] : named_parameters()) names.push_back(name);
    fail("add_regularizer", loc, "expected the name of a parameter of {}, but got '{}' ({})",
         type_name_, param_name,
         names.empty() ? "it has no parameters" : "its parameters: " + join(names, ", "));
  }
  owner->regularizers_.emplace_back(local, std::move(regularizer));
}

Tensor Module::regularization_loss(const Loc& loc) const {
  Tensor total;
  for (const auto& [prefix, m] : named_modules()) {
    for (const auto& [name, regularizer] : m->regularizers_) {
      auto it = std::find_if(m->params_.begin(), m->params_.end(),
                             [&](const auto& p) { return p.first == name; });
      KILN_INTERNAL_ASSERT(it != m->params_.end(), "regularized parameter " + name + " vanished");
      Tensor term = regularizer(it->second, loc);
      total = total.defined() ? add(total, term, loc) : term;
    }
  }
  return total;
}

int64_t Module::register_forward_hook(ForwardHook hook) {
  hooks_.emplace_back(next_hook_id_, std::move(hook));
  return next_hook_id_++;
}

void Module::remove_forward_hook(int64_t id) {
  std::erase_if(hooks_, [&](const auto& h) { return h.first == id; });
}

}  // namespace kiln::nn
