#pragma once
#include <functional>
#include <string>

#include "kiln/core/tensor.h"

namespace kiln::nn {

// Note [regularizers]
// ~~~~~~~~~~~~~~~~~~~
// Keras' weight regularizers (keras.regularizers), attached to a module's parameters with
// Module::add_regularizer and summed by Module::regularization_loss, which the training loop adds
// to the data loss:
//   l1(f)         f * sum(|x|)
//   l2(f)         f * sum(x^2)              (no 1/2 factor: Keras' definition, so the gradient
//                                            is 2 f x; PyTorch's weight_decay wd matches f = wd /
//                                            2)
//   l1_l2(f1, f2) f1 * sum(|x|) + f2 * sum(x^2)
// Factors must be finite and >= 0 (Keras' check). As in Keras' L1L2, a zero factor drops its
// term, and with both zero the penalty is a constant 0 (no gradient). Every term is built from
// differentiable kiln ops; the result is a zero-dim tensor of x's dtype. |x| has gradient
// sign(x), 0 at 0, as TensorFlow's abs.
class Regularizer {
 public:
  using Fn = std::function<Tensor(const Tensor&)>;

  // Keras' L1L2(l1, l2).
  Regularizer(double l1, double l2, const Loc& loc = Loc::current());
  // A custom penalty (Keras accepts any callable): fn(x) must return a one-element tensor.
  // `name` appears in to_string() and in errors.
  Regularizer(std::string name, Fn fn, const Loc& loc = Loc::current());

  // The penalty of x: a zero-dim tensor.
  Tensor operator()(const Tensor& x, const Loc& loc = Loc::current()) const;

  // The factors (0 for a custom regularizer).
  double l1() const { return l1_; }
  double l2() const { return l2_; }
  // "L1(l1=0.01)" (l2 == 0), "L2(l2=0.0001)" (l1 == 0), "L1L2(l1=0.01, l2=0.01)", or the
  // custom name.
  std::string to_string() const;

 private:
  double l1_ = 0.0, l2_ = 0.0;
  std::string name_;  // custom only
  Fn fn_;
};

// Keras' defaults: 0.01 for every factor.
Regularizer l1(double factor = 0.01, const Loc& loc = Loc::current());
Regularizer l2(double factor = 0.01, const Loc& loc = Loc::current());
Regularizer l1_l2(double l1_factor = 0.01, double l2_factor = 0.01,
                  const Loc& loc = Loc::current());

}  // namespace kiln::nn
