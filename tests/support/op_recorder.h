#pragma once
// A dispatch mode for tests: records every op call made on this thread while it is pushed
// (Note [dispatch modes]).
#include <functional>
#include <memory>
#include <vector>

#include "kiln/ops/dispatch_mode.h"

namespace kiln::test {

struct RecordedCall {
  OpPtr op;
  std::vector<Tensor> inputs;   // as passed (or copies, with copy_inputs)
  std::vector<Tensor> outputs;  // as returned
  Loc loc;
};

class OpRecorder final : public DispatchMode {
 public:
  // copy_inputs: keep copies of the inputs taken before the op runs, so that a later in-place
  // update of an input does not change what was recorded.
  explicit OpRecorder(bool copy_inputs = false) : copy_inputs_(copy_inputs) {}
  const char* name() const override { return "test_recorder"; }
  std::vector<Tensor> handle(const OpCall& call, DispatchNext& next) override {
    RecordedCall rec{call.op, call.inputs, {}, call.loc};
    if (copy_inputs_) {
      NoGradGuard no_grad;
      for (Tensor& t : rec.inputs)
        if (!t.is_meta()) t = t.clone();
    }
    rec.outputs = next(call);
    calls.push_back(rec);
    return rec.outputs;
  }
  std::vector<RecordedCall> calls;

 private:
  bool copy_inputs_;
};

// Pushes an OpRecorder for its lifetime.
struct RecordOps {
  explicit RecordOps(bool copy_inputs = false)
      : recorder(std::make_shared<OpRecorder>(copy_inputs)), guard(recorder) {}
  std::vector<RecordedCall>& calls() { return recorder->calls; }
  std::shared_ptr<OpRecorder> recorder;
  DispatchModeGuard guard;
};

}  // namespace kiln::test
