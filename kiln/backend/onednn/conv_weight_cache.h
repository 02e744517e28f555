#pragma once
// The caches of blocked operand copies (Note [conv weight cache] in conv_weight_cache.cpp): the
// weights of inference convolutions (folded by a per-channel scale or not), and a convolution
// backward's grad_output, which both gradient passes read in the same blocked layout.
#include "kiln/backend/onednn/conv_primitives.h"

namespace kiln {
namespace detail {

// Weight w (dense float32 [O, ...]), times fold[o] per output channel when fold is given, in
// operand op's chosen layout: w itself when nothing is to be done.
Tensor fold_and_block(const Tensor& w, const Tensor* fold, const Operand& op);

// The cached blocked copy of weight w (times fold per output channel when given, a float32
// [O]) in operand op's chosen layout, computed by fold_and_block on a miss.
Tensor blocked_weight(const Tensor& w, const Operand& op, const Tensor* fold);

// The cached blocked copy of grad_output g in operand op's chosen layout.
Tensor blocked_grad_output(const Tensor& g, const Operand& op);

}  // namespace detail
}  // namespace kiln
