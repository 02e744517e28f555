#include "kiln/nn/summary.h"

#include <algorithm>

#include "kiln/core/grad_mode.h"
#include "kiln/core/storage.h"
#include "kiln/ops/autocast.h"

namespace kiln::nn {

namespace {

// "421,834"
std::string with_commas(int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return n < 0 ? "-" + out : out;
}

std::string batch_shape_str(const Shape& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) out += ", ";
    out += i == 0 ? "None" : std::to_string(shape[i]);
  }
  return out + "]";
}

// Points every parameter and buffer at meta storage and puts the module in eval mode; the
// destructor restores storage, modes and removes the hooks it was given.
class SummaryScope {
 public:
  explicit SummaryScope(Module& root) : modules_(root.named_modules()) {
    std::vector<const TensorImpl*> seen;
    auto swap = [&](const Tensor& t) {
      if (t.is_meta() || std::find(seen.begin(), seen.end(), t.impl()) != seen.end()) return;
      seen.push_back(t.impl());
      saved_.emplace_back(t, t.storage());
      t.impl()->storage_ = std::make_shared<Storage>(t.storage()->nbytes(), kMeta);
    };
    for (auto& [name, m] : modules_) {
      modes_.push_back(m->is_training());
      for (const Tensor& p : m->parameters(false)) swap(p);
      for (const Tensor& b : m->buffers(false)) swap(b);
    }
    root.eval();
  }
  ~SummaryScope() {
    for (auto& [t, storage] : saved_) t.impl()->storage_ = storage;
    // Pre-order: a parent's recursive train() runs before its children set their own flag.
    for (size_t i = 0; i < modules_.size(); ++i) modules_[i].second->train(modes_[i]);
    for (auto& [m, id] : hooks_) m->remove_forward_hook(id);
  }
  SummaryScope(const SummaryScope&) = delete;
  SummaryScope& operator=(const SummaryScope&) = delete;

  const std::vector<std::pair<std::string, Module*>>& modules() const { return modules_; }
  void add_hook(Module* m, ForwardHook hook) {
    hooks_.emplace_back(m, m->register_forward_hook(std::move(hook)));
  }

 private:
  std::vector<std::pair<std::string, Module*>> modules_;
  std::vector<bool> modes_;
  std::vector<std::pair<Tensor, std::shared_ptr<Storage>>> saved_;
  std::vector<std::pair<Module*, int64_t>> hooks_;
};

struct Row {
  std::string layer, shape, params, dtype;
};

}  // namespace

std::string summary(const Module& module, Shape input_shape, DType dtype, const Loc& loc) {
  return summary(module, std::move(input_shape), dtype, std::nullopt, loc);
}

std::string summary(const Module& module, Shape input_shape, DType dtype,
                    std::optional<DType> compute_dtype, const Loc& loc) {
  for (int64_t d : input_shape)
    if (d < 0)
      fail("summary", loc, "expected non-negative sizes (batch dim excluded), but got {}",
           shape_str(input_shape));
  Module& root = const_cast<Module&>(module);
  std::vector<Row> rows;
  {
    SummaryScope scope(root);
    for (auto& [name, m] : scope.modules()) {
      if (!m->named_children().empty()) continue;
      std::string label =
          (name.empty() ? std::string("(root)") : name) + " (" + m->type_name() + ")";
      int64_t count = 0;
      for (const Tensor& p : m->parameters(false)) count += p.numel();
      scope.add_hook(m, [&rows, label, count](Module&, const Tensor&, const Tensor& out) {
        rows.push_back(
            {label, batch_shape_str(out.shape()), with_commas(count), dtype_name(out.dtype())});
      });
    }
    Shape shape{1};
    shape.insert(shape.end(), input_shape.begin(), input_shape.end());
    NoGradGuard no_grad;
    std::optional<AutocastGuard> region;
    if (compute_dtype) {
      AutocastOptions forced;
      forced.force = true;
      region.emplace(*compute_dtype, forced, loc);
    }
    root(empty(shape, {dtype, kMeta}));
  }

  int64_t total = module.num_parameters(false);
  int64_t trainable = module.num_parameters(true);
  Row header{"Layer (type)", "Output Shape", "Param #", "Dtype"};
  size_t w0 = header.layer.size(), w1 = header.shape.size(), w2 = header.params.size();
  size_t w3 = header.dtype.size();
  for (const Row& r : rows) {
    w0 = std::max(w0, r.layer.size());
    w1 = std::max(w1, r.shape.size());
    w2 = std::max(w2, r.params.size());
    w3 = std::max(w3, r.dtype.size());
  }
  w0 += 3;
  w1 += 3;
  size_t width = w0 + w1 + w2 + (compute_dtype ? w3 + 3 : 0);
  auto line = [&](const Row& r) {
    std::string s = fmt::format("{:<{}}{:<{}}{:>{}}", r.layer, w0, r.shape, w1, r.params, w2);
    if (compute_dtype) s += "   " + r.dtype;
    return s + "\n";
  };
  std::string out = fmt::format("Model: \"{}\"\n", module.type_name());
  out += std::string(width, '_') + "\n";
  out += line(header);
  out += std::string(width, '=') + "\n";
  for (const Row& r : rows) out += line(r);
  out += std::string(width, '=') + "\n";
  out += "Total params: " + with_commas(total) + "\n";
  out += "Trainable params: " + with_commas(trainable) + "\n";
  out += "Non-trainable params: " + with_commas(total - trainable) + "\n";
  if (compute_dtype)
    out += fmt::format("Compute dtype: {}, variable dtype: {}\n", dtype_name(*compute_dtype),
                       dtype_name(dtype));
  out += std::string(width, '_') + "\n";
  return out;
}

}  // namespace kiln::nn
