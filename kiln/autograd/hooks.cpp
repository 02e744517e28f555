// Tensor::register_hook and retain_grad (declared in core/tensor.h).
#include "kiln/autograd/node.h"
#include "kiln/ops/binary.h"

namespace kiln {

void Tensor::register_hook(GradHook hook, const Loc& loc) {
  if (!requires_grad())
    fail("register_hook", loc, "expected a tensor that requires grad, but got {}", describe());
  if (is_leaf()) {
    impl()->autograd().leaf_hooks.push_back(std::move(hook));
    return;
  }
  grad_fn()->output_hooks.at(output_nr()).push_back(std::move(hook));
}

void Tensor::retain_grad(const Loc& loc) {
  if (!requires_grad())
    fail("retain_grad", loc, "expected a tensor that requires grad, but got {}", describe());
  if (is_leaf() || retains_grad()) return;
  impl()->autograd().retains_grad = true;
  std::weak_ptr<TensorImpl> weak = impl_ptr();
  register_hook(
      [weak](const Tensor& g) {
        if (auto impl = weak.lock()) {
          Tensor self(impl);
          Tensor old = self.grad();
          self.set_grad(old.defined() ? add(old, g) : g.detach().clone());
        }
        return Tensor();
      },
      loc);
}

}  // namespace kiln
