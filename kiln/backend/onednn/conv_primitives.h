#pragma once
// The convolutions' oneDNN primitives: which pass runs (forward for training or inference,
// Winograd, the two gradients), the layouts each operand is held in, and the primitive cache that
// keeps one built primitive, with its operands' reorders, per geometry, pass and layout.
#include <memory>
#include <string>

#include "kiln/backend/onednn/dnnl_utils.h"
#include "kiln/ops/conv_attrs.h"
#include "kiln/ops/conv_geometry.h"

namespace kiln {
namespace detail {

// Note [conv layouts]: kiln's tensors hold plain layouts (nchw activations, oihw / goihw
// weights). Primitives created for plain layouts run oneDNN's im2col + GEMM fallback, 1.5-3x
// slower than its direct kernels, which want blocked layouts (nChw16c, OIhw16i16o, ...). So each
// primitive is created with format_tag::any, oneDNN picks its layouts, and every operand whose
// chosen layout differs from kiln's is reordered in (inputs) or out (the output) around the call,
// as PyTorch's mkldnn path does. Primitives and reorders are cached by geometry. Where the
// chosen layout is NHWC (single-image inference), kiln holds the activations channels-last
// instead, so neither the input nor the output is reordered (Note [channels-last]); blocked
// layouts (nChw8c, chosen for larger batches) are not expressible as strides and are still
// reordered per call.
//
// Note [conv determinism]: the forward and data-gradient primitives compute each output element
// as one dot product. oneDNN's weight gradient may split the batch between threads and add the
// partial sums, so its last bits can depend on the thread count (float32 only; the float64 loops
// never do).
// Note [weight-gradient accuracy]: on CPUs without AVX-512, oneDNN 2.6's direct weight-gradient
// kernel (jit:avx2) sums its float32 products in an order that loses ~10x more than its others:
// against a float64 reference, 2.4e-6 of the largest gradient (small CNN's first convolution,
// batch 32, 28x28) and 2.0e-6 (32 -> 64 channels, 14x14), where the im2col + GEMM implementation
// gives 3.9e-7 and 2.0e-7 and the AVX-512 kernels ~3e-7 (the AVX kernels, ONEDNN_MAX_CPU_ISA=AVX:
// 2.7e-7). Twenty steps of SGD amplify that to a 1.6e-4 relative difference from PyTorch's float64
// loss (tests/parity/test_e2e_parity.cpp asks for 1e-4). So where oneDNN picks jit:avx2 for a
// weight gradient, kiln takes its GEMM implementation on plain layouts instead (slower for
// large layers: 141 vs 95 ms for ResNet-18's 64 -> 64 channels at 32x32, batch 128).
// Note [conv inference kind]: oneDNN 2.6 answers prop_kind forward_inference with its brgemm
// kernels and forward_training with its direct jit kernels (same math, different blocking).
// Measured on ResNet-18 without grad, 2 threads (kiln_profile --workload resnet18-infer): batch 1
// 6.2 ms with brgemm vs 7.2 ms direct, but batch 2 12.8 vs 10.0, batch 4 23.7 vs 18.4 and batch
// 64 360 vs 275 ms. So kInference, the forward_inference primitive, is used for forwards of a
// single image whose purpose is inference (Note [conv algorithm]); it is chosen by the op's
// attributes and the shape alone, so results never depend on timing or grad mode.
//
// Note [conv winograd]: for an inference forward of a batch (more than one image) with a 3x3
// kernel, stride 1, dilation 1 and no groups, kiln asks oneDNN for its Winograd F(4x4, 3x3) kernel
// (jit_wino_4x3), which does the work of the direct kernel in about half the multiplications:
// measured on this machine at batch 64, 64->64 channels at 32x32 11.7 ms vs 21.8 ms (brgemm) and
// 16-17 ms (direct, in the network), 512->512 at 4x4 10.9 vs 30.3 ms. Its rounding differs from
// the direct kernel's: against a float64 reference, the largest error relative to the largest
// output was 1.2e-6 to 2.4e-6 (direct: 0.7e-6 to 1.6e-6) over 64..512 channels, and
// tests/ops/test_conv_winograd.cpp holds it under 1e-5. Where oneDNN has no Winograd kernel for
// the shape (channel counts, post-ops), the direct kernel runs. This is ConvAlgorithm::kAuto's
// choice (Note [conv algorithm] in conv.h); under kAuto, training (the "training" purpose) and
// single images never use it: the gradients keep the direct kernels' numerics, and at batch 1 the
// transformed weights (4x the size) would stream from memory on every call. kWinograd asks for it
// in every case, kDirect in none. The Winograd primitive is created for forward_inference in both
// purposes: a convolution's forward keeps no state for its backward (no workspace), so the prop
// kind only selects kernels.
//
// Note [channels-last training]: the training passes (the forward of a recorded convolution and
// both gradients) take oneDNN's `any` layouts only while kiln's activations are NCHW. When the
// activation a pass reads (the input, or the output gradient of the data gradient) is
// channels-last, the primitive is created for NHWC activations instead (weights still `any`):
// the output is then channels-last too, and a chain of convolutions, batch norms and elementwise
// ops runs with no activation reorder at all, as PyTorch's channels_last does. On AVX-512 oneDNN
// 2.6 answers NHWC with its brgemm forward (brgconv) and jit backward kernels, which measured as
// fast as or faster than the blocked ones (ResNet-18 CIFAR shapes, batch 128: 587 vs 634 ms summed
// over 5 shapes x 3 passes); on AVX2 NHWC is slower (jit:avx2 both ways, 13.7 vs 12.1 s), which
// is why nothing switches layouts behind the user's back: an eager user asks for it with a
// channels-last input, and the graph pass `layout` does it where prefer_channels_last_training()
// says the CPU gains (kiln/graph/passes/layout.cpp). Inference passes keep their own choice
// (Note [conv inference kind], Note [conv winograd]).
enum class Pass { kForward, kInference, kWinograd, kBackwardData, kBackwardWeights };

bool is_forward(Pass p);

// What shapes a primitive beyond the geometry: which activations (the input-shaped one and the
// output-shaped one, whatever the pass) kiln holds channels-last (Note [channels-last]) rather
// than contiguous, and the forward's fused epilogue (Note [conv epilogue]).
// `nhwc_kernel`: the primitive itself is created for NHWC activations instead of letting oneDNN
// choose (Note [channels-last training]).
struct ActivationLayouts {
  bool src_nhwc = false, dst_nhwc = false;
  bool sum = false, relu = false;
  bool nhwc_kernel = false;
  char key() const {
    return static_cast<char>('0' + (src_nhwc ? 1 : 0) + (dst_nhwc ? 2 : 0) + (sum ? 4 : 0) +
                             (relu ? 8 : 0) + (nhwc_kernel ? 16 : 0));
  }
};

// One operand of a pass: kiln's plain layout, the primitive's, and the reorder between them
// (empty when they agree).
struct Operand {
  int arg = 0;
  dnnl::memory::desc plain, chosen;
  dnnl::reorder reorder;
  bool needs_reorder() const { return plain != chosen; }
};

struct ConvEntry {
  dnnl::primitive primitive;
  Operand a, b, out;  // the pass's two inputs (in the kernels' order) and its output
  dnnl::memory::desc bias, scratch;
  // oneDNN's reference implementation was the only one to accept the request (some post-op
  // combinations), orders of magnitude slower than its jit kernels.
  bool reference = false;
  // A Winograd pass found a Winograd kernel (else its primitive is the direct one).
  bool winograd = false;
  std::string implementation;  // oneDNN's name for the kernel (impl_info_str)
};

// The cached entry of one pass (built on a miss).
// `dtype`: the activations' and weights' (float32, or bfloat16 on a CPU with native kernels, Note
// [low-precision convolutions] in conv_kernels.cpp); a bias is float32 either way.
std::shared_ptr<const ConvEntry> conv_entry(Pass pass, const ConvGeometry& g, bool with_bias,
                                            ActivationLayouts l, DType dtype = DType::Float32);

// A float32 buffer of `bytes` from kiln's caching allocator, for a blocked copy of an operand.
Tensor scratch(const dnnl::memory::desc& desc);

// The direct forward pass of policy p (Note [conv inference kind]).
Pass direct_pass(const ConvGeometry& g, ConvPolicy p);

// Whether oneDNN's training kernels for NHWC activations are its brgemm ones on this CPU (AVX-512),
// where channels-last training pays (Note [channels-last training]). oneDNN is asked once; the
// environment variable KILN_CHANNELS_LAST_TRAINING=0 or 1, read on every call, overrides it.
bool prefer_channels_last_training();

// The forward pass that runs for policy p, with a bias or not, on operands in layouts l: the
// requested one, except that a Winograd request oneDNN has no kernel for runs the direct pass of
// the same purpose.
Pass forward_pass(const ConvGeometry& g, ConvPolicy p, bool with_bias, ActivationLayouts l,
                  DType dtype = DType::Float32);

}  // namespace detail
}  // namespace kiln
