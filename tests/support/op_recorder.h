#pragma once
// A dispatch mode for tests: records every op call made on this thread while it is pushed
// (Note [dispatch modes]).
#include <functional>
#include <memory>
#include <vector>

#include "kiln/core/grad_mode.h"
#include "kiln/graph/tracer.h"
#include "kiln/ops/dispatch_mode.h"

namespace kiln::test {

struct RecordedCall {
  OpPtr op;
  std::vector<Tensor> inputs;   // as passed (or copies, with copy_values)
  std::vector<Tensor> outputs;  // as returned (or copies, with copy_values)
  Loc loc;
  bool grad_mode = true;  // GradMode when the call was made
};

class OpRecorder final : public DispatchMode {
 public:
  // copy_values: keep copies of the inputs (taken before the op runs) and of the outputs, so that
  // a later in-place update does not change what was recorded.
  // skip_traces: ignore the calls a tracer makes on its meta stand-ins (a sample that traces
  // subgraphs, Note [control flow]): they are not eager calls of the sample.
  explicit OpRecorder(bool copy_values = false, bool skip_traces = false)
      : copy_values_(copy_values), skip_traces_(skip_traces) {}
  const char* name() const override { return "test_recorder"; }
  bool intercepts(const OpCall&) const override {
    return !(skip_traces_ && graph::Tracer::active());
  }
  std::vector<Tensor> handle(const OpCall& call, DispatchNext& next) override {
    RecordedCall rec{call.op, call.inputs, {}, call.loc, GradMode::is_enabled()};
    if (copy_values_) rec.inputs = copies(rec.inputs);
    std::vector<Tensor> outputs = next(call);
    rec.outputs = copy_values_ ? copies(outputs) : outputs;
    calls.push_back(rec);
    return outputs;
  }
  std::vector<RecordedCall> calls;

 private:
  static std::vector<Tensor> copies(std::vector<Tensor> ts) {
    NoGradGuard no_grad;
    for (Tensor& t : ts)
      if (t.defined() && !t.is_meta()) t = t.clone();
    return ts;
  }
  bool copy_values_;
  bool skip_traces_;
};

// The op calls a sample function makes with grad mode off, values copied (eager calls only, not a
// tracer's); false when the sample throws a kiln::Error (a sample of an error path).
template <class Fn>
bool record_calls(Fn&& sample, std::vector<RecordedCall>& calls) {
  OpRecorder recorder(/*copy_values=*/true, /*skip_traces=*/true);
  {
    DispatchModeGuard guard(std::shared_ptr<DispatchMode>(&recorder, [](DispatchMode*) {}));
    NoGradGuard no_grad;
    try {
      sample();
    } catch (const Error&) {
      return false;
    }
  }
  calls = std::move(recorder.calls);
  return true;
}

// Sets grad mode for its lifetime (a recorded call replays under the mode it ran in).
class GradModeScope {
 public:
  explicit GradModeScope(bool on) : saved_(GradMode::is_enabled()) { GradMode::set_enabled(on); }
  ~GradModeScope() { GradMode::set_enabled(saved_); }
  GradModeScope(const GradModeScope&) = delete;
  GradModeScope& operator=(const GradModeScope&) = delete;

 private:
  bool saved_;
};

// Pushes an OpRecorder for its lifetime.
struct RecordOps {
  explicit RecordOps(bool copy_values = false, bool skip_traces = false)
      : recorder(std::make_shared<OpRecorder>(copy_values, skip_traces)), guard(recorder) {}
  std::vector<RecordedCall>& calls() { return recorder->calls; }
  std::shared_ptr<OpRecorder> recorder;
  DispatchModeGuard guard;
};

}  // namespace kiln::test
