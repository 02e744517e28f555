#include "tests/fuzz/program.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>

#include "tests/support/tensor_json.h"

namespace kiln::fuzz {

using nlohmann::json;

namespace {

json describe_tensor(const Tensor& t) {
  json j;
  j["shape"] = t.shape();
  j["dtype"] = dtype_name(t.dtype());
  j["strides"] = t.strides();
  j["contiguous"] = t.is_contiguous();
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (double v : t.to_vector<double>()) {
    if (!std::isfinite(v)) continue;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  j["min"] = lo <= hi ? lo : -1.0;
  j["max"] = lo <= hi ? hi : 1.0;
  return j;
}

// Every element of the tensor's storage, flat, so that torch.as_strided rebuilds the same view.
Tensor storage_of(const Tensor& t) {
  auto n = static_cast<int64_t>(t.storage()->nbytes() / itemsize(t.dtype()));
  return make_view(t, {n}, {1}, 0);
}

// Values for `shape` in the range of the sample's own input (integers stay integers).
Tensor draw_like(const Tensor& orig, const Shape& shape, uint64_t seed) {
  double lo = -1, hi = 1;
  bool any = false;
  for (double v : orig.to_vector<double>()) {
    if (!std::isfinite(v)) continue;
    lo = any ? std::min(lo, v) : v;
    hi = any ? std::max(hi, v) : v;
    any = true;
  }
  if (!any) lo = -1, hi = 1;
  if (orig.dtype() == DType::Bool) return gt(sample_tensor(shape, seed), 0.0);
  if (is_integral(orig.dtype())) {
    Tensor u = sample_tensor(shape, seed, 0.0, hi - lo + 1.0);
    std::vector<int64_t> ints;
    for (double v : u.to_vector<double>()) ints.push_back(static_cast<int64_t>(v) + (int64_t)lo);
    return to_dtype(tensor(ints, shape), orig.dtype());
  }
  if (lo == hi) lo -= 1, hi += 1;
  return sample_tensor(shape, seed, lo, hi);
}

Tensor make_input(const Catalog& catalog, const json& spec) {
  const OpSample& s = catalog.sample(spec.at("sample").get<std::string>());
  const Tensor& orig = s.inputs.at(spec.at("arg").get<size_t>());
  const Shape shape = spec.at("shape").get<Shape>();
  const DType dtype = test::dtype_from_name(spec.at("dtype").get<std::string>());
  const std::string layout = spec.value("layout", "contiguous");
  const auto seed = spec.value("seed", uint64_t{1});
  const bool same_shape = shape == orig.shape();
  NoGradGuard no_grad;
  Tensor v;
  if (layout == "sample" && same_shape) {
    // The sample's own geometry (transposed, expanded, offset views), over a private copy.
    Tensor all = to_dtype(storage_of(orig), dtype).clone();
    v = make_view(all, orig.shape(), orig.strides(), orig.storage_offset());
  } else if (layout == "expanded" && !shape.empty() && shape[0] != 1) {
    Shape one = shape;
    one[0] = 1;
    v = to_dtype(draw_like(orig, one, seed), dtype).clone().expand(shape);
  } else {
    v = (same_shape ? orig.contiguous() : draw_like(orig, shape, seed)).to(dtype).clone();
    const auto rank = static_cast<int64_t>(shape.size());
    if (layout == "transposed" && rank >= 2)
      v = v.transpose(-1, -2).contiguous().transpose(-1, -2);
    else if (layout == "strided" && rank >= 1)
      v = stack({v, zeros_like(v)}, -1).select(-1, 0);
    else if (layout == "channels_last" && rank == 4)
      v = contiguous(v, MemoryFormat::kChannelsLast);
  }
  v = v.detach();
  if (spec.value("requires_grad", false) && is_floating(dtype)) v.set_requires_grad(true);
  return v;
}

json describe_input(const Tensor& v) {
  json j;
  j["dtype"] = dtype_name(v.dtype());
  j["shape"] = v.shape();
  j["strides"] = v.strides();
  j["offset"] = v.storage_offset();
  j["storage"] = test::encode_tensor_values(storage_of(v));
  j["requires_grad"] = v.requires_grad();
  return j;
}

void run_inplace(const json& step, std::vector<Tensor>& values) {
  Tensor& t = values.at(step.at("target").get<size_t>());
  const std::string m = step.at("inplace").get<std::string>();
  const bool has_other = step.contains("other");
  const Tensor other = has_other ? values.at(step.at("other").get<size_t>()) : Tensor();
  const double c = step.value("scalar", 0.0);
  if (m == "add_")
    has_other ? t.add_(other) : t.add_(c);
  else if (m == "sub_")
    has_other ? t.sub_(other) : t.sub_(c);
  else if (m == "mul_")
    has_other ? t.mul_(other) : t.mul_(c);
  else if (m == "div_")
    has_other ? t.div_(other) : t.div_(c);
  else if (m == "clamp_")
    t.clamp_(step.value("min", -0.5), step.value("max", 0.5));
  else if (m == "zero_")
    t.zero_();
  else if (m == "fill_")
    t.fill_(c);
  else if (m == "copy_")
    t.copy_(other);
  else
    throw std::invalid_argument("fuzz program: unknown in-place method '" + m + "'");
}

bool has_nonfinite(const Tensor& t) {
  if (!is_floating(t.dtype())) return false;
  for (double v : t.to_vector<double>())
    if (!std::isfinite(v)) return true;
  return false;
}

json error_json(size_t step, const char* kind, const std::exception& e) {
  return json{{"step", step}, {"kind", kind}, {"message", e.what()}};
}

}  // namespace

Catalog::Catalog() {
  for (const OpInfo& info : registered_ops()) {
    for (OpSample& s : info.samples()) {
      if (s.torch.empty()) continue;
      const std::string id = info.name + "/" + s.label;
      json outs = json::array();
      try {
        NoGradGuard no_grad;
        for (const Tensor& o : s.fn(s.inputs))
          outs.push_back(json{{"shape", o.shape()}, {"dtype", dtype_name(o.dtype())}});
      } catch (const std::exception&) {
        continue;  // a sample that cannot run is the registry tests' failure, not the fuzzer's
      }
      order_.push_back(id);
      outputs_[id] = std::move(outs);
      samples_.emplace(id, std::move(s));
      thread_variance_[id] = info.thread_variance;
    }
  }
}

const OpSample& Catalog::sample(const std::string& id) const {
  auto it = samples_.find(id);
  if (it == samples_.end())
    throw std::invalid_argument("fuzz program: no registered sample '" + id + "'");
  return it->second;
}

json Catalog::describe() const {
  json all = json::array();
  for (const std::string& id : order_) {
    const OpSample& s = samples_.at(id);
    json inputs = json::array();
    for (const Tensor& t : s.inputs) inputs.push_back(describe_tensor(t));
    all.push_back(json{{"id", id},
                       {"op", id.substr(0, id.find('/'))},
                       {"torch", s.torch},
                       {"inputs", inputs},
                       {"outputs", outputs_.at(id)},
                       {"grad_inputs", s.grad_inputs},
                       {"check_grad", s.check_grad},
                       {"thread_variance", thread_variance_.at(id)}});
  }
  return all;
}

json run_program(const Catalog& catalog, const json& program) {
  json result;
  std::vector<Tensor> values;
  json inputs = json::array();
  for (const json& spec : program.at("inputs")) {
    values.push_back(make_input(catalog, spec));
    inputs.push_back(describe_input(values.back()));
  }
  result["inputs"] = std::move(inputs);
  const size_t n_inputs = values.size();
  const bool retain = program.value("retain_grads", true);
  const json& steps = program.at("steps");
  bool nonfinite = false;  // some step made an inf or nan (even one overwritten later)
  auto run = [&](size_t k, auto&& body) {
    try {
      body();
      return true;
    } catch (const Error& e) {
      result["error"] = error_json(k, "error", e);
    } catch (const InternalError& e) {
      result["error"] = error_json(k, "internal", e);
    } catch (const std::exception& e) {
      result["error"] = error_json(k, "untranslated", e);
    }
    return false;
  };
  for (size_t k = 0; k < steps.size(); ++k) {
    const json& step = steps[k];
    // A sample whose output count depends on its input's shape (chunk, split) can leave later
    // references dangling; PyTorch then fails at the same step (IndexError), so it is a rejection.
    std::vector<size_t> refs;
    for (const char* key : {"target", "other"})
      if (step.contains(key)) refs.push_back(step[key].get<size_t>());
    if (step.contains("args"))
      for (const json& a : step["args"]) refs.push_back(a.get<size_t>());
    if (std::any_of(refs.begin(), refs.end(), [&](size_t r) { return r >= values.size(); })) {
      result["error"] =
          json{{"step", k}, {"kind", "error"}, {"message", "dangling value reference"}};
      return result;
    }
    const size_t before = values.size();
    bool ok = run(k, [&] {
      if (step.contains("inplace")) {
        run_inplace(step, values);
        nonfinite |= has_nonfinite(values.at(step.at("target").get<size_t>()));
        return;
      }
      std::vector<Tensor> args;
      for (const json& a : step.at("args")) args.push_back(values.at(a.get<size_t>()));
      for (Tensor& o : catalog.sample(step.at("call").get<std::string>()).fn(args)) {
        if (retain && o.requires_grad() && !o.is_leaf()) o.retain_grad();
        values.push_back(std::move(o));
      }
      for (size_t j = before; j < values.size(); ++j) nonfinite |= has_nonfinite(values[j]);
    });
    result["nonfinite_seen"] = nonfinite;
    if (!ok) return result;
  }
  json loss_terms = json::array();
  bool ok = run(steps.size(), [&] {
    Tensor loss;
    const auto loss_seed = program.value("loss_seed", uint64_t{1});
    for (size_t j = n_inputs; j < values.size(); ++j) {
      const Tensor& v = values[j];
      if (!is_floating(v.dtype()) || !v.requires_grad()) continue;
      Tensor w;
      {
        NoGradGuard no_grad;
        w = to_dtype(sample_tensor(v.shape(), loss_seed * 1000 + j, 0.5, 1.5), v.dtype());
      }
      loss_terms.push_back(json{{"value", j}, {"weight", test::encode_tensor(w)}});
      Tensor term = sum(mul(v, w));
      loss = loss.defined() ? add(loss, term) : term;
    }
    if (loss.defined()) loss.backward();
  });
  result["loss_terms"] = std::move(loss_terms);
  if (!ok) return result;
  json out = json::array();
  json grads = json::object();
  for (size_t j = 0; j < values.size(); ++j) {
    const Tensor& v = values[j];
    json e = test::encode_tensor(v);
    e["requires_grad"] = v.requires_grad();
    // An op may return its input itself (contiguous of a contiguous tensor): retained gradients
    // of such handles are compared only where both frameworks alias alike.
    for (size_t k = 0; k < j; ++k)
      if (values[k].is_same(v)) {
        e["same_as"] = k;
        break;
      }
    out.push_back(std::move(e));
    bool wanted = j < n_inputs ? v.requires_grad() : (retain && v.retains_grad());
    if (wanted)
      grads[std::to_string(j)] = v.grad().defined() ? test::encode_tensor(v.grad()) : json();
  }
  result["values"] = std::move(out);
  result["grads"] = std::move(grads);
  return result;
}

}  // namespace kiln::fuzz
