#include "kiln/optim/update_op.h"

#include <map>
#include <mutex>

#include "kiln/ops/dispatcher.h"
#include "kiln/ops/loops.h"

namespace kiln::optim::detail {

namespace {

class UpdateOp final : public Op {
 public:
  UpdateOp(const char* name, nlohmann::json attrs, UpdateKernel kernel)
      : name_(name), attrs_(std::move(attrs)), kernel_(kernel) {
    Attrs(name_, attrs_);  // an object, or a clear error
  }
  const char* name() const override { return name_; }
  nlohmann::json attrs() const override { return attrs_; }
  bool differentiable() const override { return false; }
  Saves saves() const override { return {false, false}; }
  uint64_t mutates() const override { return ~uint64_t{2}; }

  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc& loc) const override {
    if (in.size() < 2)
      fail(name(), loc, "expected a parameter and its gradient, but got {} tensors", in.size());
    const Tensor& p = in[0];
    if (!is_floating(p.dtype()))
      fail(name(), loc, "expected a floating-point parameter, but got {}", p.describe());
    std::vector<TensorMeta> out;
    for (size_t i = 0; i < in.size(); ++i) {
      if (in[i].shape() != p.shape() || in[i].dtype() != p.dtype())
        fail(name(), loc, "expected tensor {} of the parameter's shape and dtype ({}), but got {}",
             i, p.describe(), in[i].describe());
      if (i > 0 && !in[i].is_contiguous())
        fail(name(), loc, "expected a contiguous tensor {}, but got {} with strides {}", i,
             in[i].describe(), shape_str(in[i].strides()));
      if (i == 1) continue;
      TensorMeta m{in[i].shape(), in[i].dtype(), in[i].device()};
      m.strides = in[i].strides();
      m.storage_offset = in[i].storage_offset();
      m.alias_of = static_cast<int>(i);
      out.push_back(m);
    }
    return out;
  }

  std::vector<Tensor> forward(const std::vector<Tensor>& in,
                              const std::vector<TensorMeta>&) const override {
    const Tensor& param = in[0];
    // The loop runs over contiguous memory; a strided parameter is copied and written back here,
    // inside the op, so the write is this op's alone.
    std::vector<Tensor> t = in;
    if (!param.is_contiguous()) {
      t[0] = empty(param.shape(), {param.dtype(), param.device()});
      copy_into(t[0], param);
    }
    kernel_(Attrs(name_, attrs_), t);
    if (!t[0].is_same(param)) copy_into(param, t[0]);
    param.storage()->bump_version(name_, kernel_call_site());
    std::vector<Tensor> out;
    for (size_t i = 0; i < in.size(); ++i)
      if (i != 1) out.push_back(in[i]);
    return out;
  }

 private:
  const char* name_;
  nlohmann::json attrs_;
  UpdateKernel kernel_;
};

std::map<std::string, std::pair<const char*, UpdateKernel>>& kernels() {
  static auto* k = new std::map<std::string, std::pair<const char*, UpdateKernel>>();
  return *k;
}
std::mutex kernels_mutex;

}  // namespace

bool register_update_op(const char* name, UpdateKernel kernel) {
  {
    std::lock_guard<std::mutex> lock(kernels_mutex);
    kernels()[name] = {name, kernel};
  }
  return register_op({name,
                      {{"param", "grad", "state..."}, {"param", "state..."}},
                      [name, kernel](const Attrs& a) -> OpPtr {
                        return std::make_shared<const UpdateOp>(name, a.json(), kernel);
                      }});
}

void run_update(const char* name, nlohmann::json attrs, const std::vector<Tensor>& tensors,
                const Loc& loc) {
  UpdateKernel kernel = nullptr;
  {
    std::lock_guard<std::mutex> lock(kernels_mutex);
    auto it = kernels().find(name);
    KILN_INTERNAL_ASSERT(it != kernels().end(), std::string("no update op ") + name);
    kernel = it->second.second;
  }
  dispatch(std::make_shared<const UpdateOp>(name, std::move(attrs), kernel), tensors, loc);
}

}  // namespace kiln::optim::detail
