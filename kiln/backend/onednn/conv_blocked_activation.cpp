// The deferred contents that hold a convolution's blocked output (Note [deferred contents] in
// core/storage.h) and the lookup of a pending one.
#include "kiln/backend/onednn/conv_blocked_activation.h"

#include <memory>

#include "kiln/core/storage.h"

namespace kiln {
namespace detail {

namespace {

// Note [blocked activations]: for inference, batched convolutions (oneDNN's direct kernels)
// compute in a blocked layout (nChw16c), which strides cannot express, so each one would reorder
// its input in and its output out. When a convolution's output is the next one's input (ResNet's
// conv-bn-relu chains after folding, Note [conv epilogue]) the second reorder only undoes the
// first, and the plain output is never read at all. So an inference convolution that writes its
// whole output itself leaves the output's storage holding the blocked result (Note [deferred
// contents] in core/storage.h), and a convolution reading that tensor, as its input or as the
// residual of its sum post-op, takes the blocked form directly. Anything else that touches the
// memory (another op, a print, a copy, an in-place write) makes the storage write the plain
// contents first, so no other code sees a difference. A pending output keeps its blocked buffer
// alive until it is written out or freed.
class BlockedActivation final : public DeferredContents {
 public:
  BlockedActivation(Tensor blocked, const Operand& out)
      : blocked(std::move(blocked)), chosen(out.chosen), plain(out.plain), to_plain(out.reorder) {}
  void write(void* data) const override {
    dnnl::engine& eng = dnnl_engine();
    dnnl::memory from(chosen, eng, blocked.raw_data()), to(plain, eng, data);
    to_plain.execute(dnnl_stream(), from, to);
    dnnl_stream().wait();
  }
  const Tensor blocked;
  const dnnl::memory::desc chosen, plain;
  const dnnl::reorder to_plain;
};

}  // namespace

Tensor pending_blocked(const Tensor& t, const dnnl::memory::desc& plain,
                       const dnnl::memory::desc& chosen) {
  if (t.storage_offset() != 0) return {};
  const std::shared_ptr<const DeferredContents> d = t.storage()->deferred();
  const auto* b = dynamic_cast<const BlockedActivation*>(d.get());
  if (b == nullptr || b->chosen != chosen || b->plain != plain) return {};
  return b->blocked;
}

void defer_blocked_output(const Tensor& out, Tensor blocked, const Operand& out_op) {
  out.storage()->defer(std::make_shared<BlockedActivation>(std::move(blocked), out_op));
}

}  // namespace detail
}  // namespace kiln
