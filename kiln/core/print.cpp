// Tensor::to_string: a port of PyTorch's repr (torch/_tensor_str.py, default print options), so
// that kiln and PyTorch print the same tensor the same way. Only the dtype suffix differs:
// ", dtype=float64" instead of ", dtype=torch.float64".
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <type_traits>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln {
namespace {

// PyTorch's default print options.
constexpr int kPrecision = 4;
constexpr int64_t kThreshold = 1000;
constexpr int64_t kEdgeItems = 3;
constexpr int64_t kLineWidth = 80;

enum class Kind { Floating, Integer, Bool };

// The visible elements in print order: all of them, or with numel > threshold only the first and
// last kEdgeItems along every dim longer than 2 * kEdgeItems (PyTorch's get_summarized_data picks
// the same set the printer later walks, so one pass gathers both).
struct Values {
  Kind kind = Kind::Floating;
  std::vector<double> floats;  // Floating (16-bit floats widened, as PyTorch prints them)
  std::vector<int64_t> ints;   // Integer and Bool
};

void gather_offsets(const Tensor& t, bool summarize, size_t d, int64_t offset,
                    std::vector<int64_t>& out) {
  if (d == t.shape().size()) {
    out.push_back(offset);
    return;
  }
  const int64_t n = t.shape()[d];
  const int64_t st = t.strides()[d];
  if (summarize && n > 2 * kEdgeItems) {
    for (int64_t i = 0; i < kEdgeItems; ++i)
      gather_offsets(t, summarize, d + 1, offset + i * st, out);
    for (int64_t i = n - kEdgeItems; i < n; ++i)
      gather_offsets(t, summarize, d + 1, offset + i * st, out);
  } else {
    for (int64_t i = 0; i < n; ++i) gather_offsets(t, summarize, d + 1, offset + i * st, out);
  }
}

Values read_values(const Tensor& t, bool summarize) {
  std::vector<int64_t> offsets;
  gather_offsets(t, summarize, 0, 0, offsets);
  Values v;
  visit_dtype(t.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* base = static_cast<const T*>(t.raw_data());
    if constexpr (std::is_same_v<T, bool>) {
      v.kind = Kind::Bool;
      for (int64_t o : offsets) v.ints.push_back(base[o] ? 1 : 0);
    } else if constexpr (std::is_integral_v<T>) {
      v.kind = Kind::Integer;
      for (int64_t o : offsets) v.ints.push_back(static_cast<int64_t>(base[o]));
    } else {
      v.kind = Kind::Floating;
      for (int64_t o : offsets)
        v.floats.push_back(static_cast<double>(static_cast<compute_t<T>>(base[o])));
    }
  });
  return v;
}

// printf rather than fmt: glibc rounds exact decimal expansions half-to-even like Python's
// str.format, which PyTorch uses. NaN is spelled out because glibc prints a negative NaN as "-nan"
// and Python never does.
std::string fixed(double x, int precision) {
  if (std::isnan(x)) return "nan";
  char buf[512];
  int n = std::snprintf(buf, sizeof(buf), "%.*f", precision, x);
  return std::string(buf, static_cast<size_t>(std::clamp(n, 0, static_cast<int>(sizeof(buf)) - 1)));
}

std::string scientific(double x) {
  if (std::isnan(x)) return "nan";
  char buf[64];
  int n = std::snprintf(buf, sizeof(buf), "%.*e", kPrecision, x);
  return std::string(buf, static_cast<size_t>(std::clamp(n, 0, static_cast<int>(sizeof(buf)) - 1)));
}

// PyTorch's _Formatter: picks integer, fixed or scientific mode from the nonzero finite values and
// the common width that right-aligns every element.
class Formatter {
 public:
  explicit Formatter(const Values& v) : kind_(v.kind) {
    if (kind_ != Kind::Floating) {
      for (int64_t x : v.ints) width_ = std::max(width_, raw(x).size());
      return;
    }
    std::vector<double> finite;
    for (double x : v.floats)
      if (std::isfinite(x) && x != 0) finite.push_back(x);
    if (finite.empty()) return;
    double lo = std::abs(finite[0]);
    double hi = lo;
    for (double x : finite) {
      lo = std::min(lo, std::abs(x));
      hi = std::max(hi, std::abs(x));
      if (x != std::ceil(x)) int_mode_ = false;
    }
    const bool wide = hi / lo > 1000.0 || hi > 1.0e8;
    if (int_mode_) {
      sci_mode_ = wide;
      for (double x : finite)
        width_ = std::max(width_, sci_mode_ ? scientific(x).size() : fixed(x, 0).size() + 1);
    } else {
      sci_mode_ = wide || lo < 1.0e-4;
      for (double x : finite)
        width_ = std::max(width_, sci_mode_ ? scientific(x).size() : fixed(x, kPrecision).size());
    }
  }

  size_t width() const { return width_; }

  std::string format_int(int64_t x) const { return pad(raw(x)); }

  std::string format_float(double x) const {
    std::string s;
    if (sci_mode_) {
      s = scientific(x);
    } else if (int_mode_) {
      s = fixed(x, 0);
      if (std::isfinite(x)) s += ".";
    } else {
      s = fixed(x, kPrecision);
    }
    return pad(s);
  }

 private:
  std::string raw(int64_t x) const {
    if (kind_ == Kind::Bool) return x ? "True" : "False";
    return std::to_string(x);
  }
  std::string pad(const std::string& s) const {
    return s.size() >= width_ ? s : std::string(width_ - s.size(), ' ') + s;
  }

  Kind kind_;
  bool int_mode_ = true;
  bool sci_mode_ = false;
  size_t width_ = 1;
};

std::string join(const std::vector<std::string>& parts, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i) out += sep;
    out += parts[i];
  }
  return out;
}

// PyTorch's _tensor_str_with_formatter over the pre-formatted visible elements; `next` walks
// them in print order.
class Body {
 public:
  Body(const Shape& shape, bool summarize, std::vector<std::string> elems, size_t width)
      : shape_(shape), summarize_(summarize), elems_(std::move(elems)), width_(width) {}

  std::string str(int64_t indent) { return shape_.empty() ? elems_[next_++] : rec(0, indent); }

 private:
  std::string rec(size_t d, int64_t indent) {
    const int64_t n = shape_[d];
    const bool cut = summarize_ && n > 2 * kEdgeItems;
    const size_t rank = shape_.size();
    if (d + 1 == rank) {
      // A row wraps at the line width; " ..." takes an element's place.
      std::vector<std::string> data;
      for (int64_t i = 0; i < n; ++i) {
        if (cut && i == kEdgeItems) {
          data.push_back(" ...");
          i = n - kEdgeItems;
        }
        data.push_back(elems_[next_++]);
      }
      const auto element_length = static_cast<int64_t>(width_) + 2;
      const size_t per_line =
          static_cast<size_t>(std::max<int64_t>(1, (kLineWidth - indent) / element_length));
      std::vector<std::string> lines;
      for (size_t i = 0; i < data.size(); i += per_line) {
        std::vector<std::string> line(
            data.begin() + static_cast<std::ptrdiff_t>(i),
            data.begin() + static_cast<std::ptrdiff_t>(std::min(i + per_line, data.size())));
        lines.push_back(join(line, ", "));
      }
      return "[" + join(lines, ",\n" + std::string(static_cast<size_t>(indent) + 1, ' ')) + "]";
    }
    std::vector<std::string> slices;
    for (int64_t i = 0; i < n; ++i) {
      if (cut && i == kEdgeItems) {
        slices.push_back("...");
        i = n - kEdgeItems;
      }
      slices.push_back(rec(d + 1, indent + 1));
    }
    const std::string sep =
        "," + std::string(rank - d - 1, '\n') + std::string(static_cast<size_t>(indent) + 1, ' ');
    return "[" + join(slices, sep) + "]";
  }

  const Shape& shape_;
  bool summarize_;
  std::vector<std::string> elems_;
  size_t width_;
  size_t next_ = 0;
};

std::string tensor_body(const Tensor& t, int64_t indent) {
  const bool summarize = t.numel() > kThreshold;
  Values v = read_values(t, summarize);
  Formatter f(v);
  std::vector<std::string> elems;
  if (v.kind == Kind::Floating) {
    for (double x : v.floats) elems.push_back(f.format_float(x));
  } else {
    for (int64_t x : v.ints) elems.push_back(f.format_int(x));
  }
  return Body(t.shape(), summarize, std::move(elems), f.width()).str(indent);
}

// Python's str(tuple(shape)): "(2, 3)", "(5,)", "()".
std::string tuple_str(const Shape& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  if (shape.size() == 1) s += ",";
  return s + ")";
}

// PyTorch's _add_suffixes: a suffix that would pass the line width goes on a new line.
std::string add_suffixes(const std::string& body, const std::vector<std::string>& suffixes,
                         int64_t indent) {
  std::string out = body;
  const size_t nl = body.rfind('\n');
  // Python's len(s) - s.rfind("\n") + 1, where rfind gives -1 when there is no newline.
  auto last_line_len = static_cast<int64_t>(body.size()) -
                       (nl == std::string::npos ? -1 : static_cast<int64_t>(nl)) + 1;
  for (const std::string& suffix : suffixes) {
    const auto len = static_cast<int64_t>(suffix.size());
    if (last_line_len + len + 2 > kLineWidth) {
      out += ",\n" + std::string(static_cast<size_t>(indent), ' ') + suffix;
      last_line_len = indent + len;
    } else {
      out += ", " + suffix;
      last_line_len += len + 2;
    }
  }
  return out + ")";
}

}  // namespace

std::string Tensor::to_string() const {
  if (!defined()) return "tensor(undefined)";
  const std::string prefix = "tensor(";
  const auto indent = static_cast<int64_t>(prefix.size());
  const DType dt = dtype();
  const bool default_dtype = dt == DType::Float32 || dt == DType::Int64 || dt == DType::Bool;
  const std::string dtype_suffix = std::string("dtype=") + dtype_name(dt);
  std::vector<std::string> suffixes;
  std::string body;
  // A traced function printing a stand-in depends on its values (Note [value reads]).
  if (is_meta() && detail::has_value_read_hook())
    detail::meta_value_read(*this, "print", Loc::current());
  if (is_meta()) {
    suffixes.push_back("device='meta'");
    suffixes.push_back("size=" + tuple_str(shape()));
    if (dt != DType::Float32) suffixes.push_back(dtype_suffix);
    body = "...";
  } else if (numel() == 0) {
    // No elements tell int from float here, so any non-float32 dtype is shown (as PyTorch does).
    if (dim() != 1) suffixes.push_back("size=" + tuple_str(shape()));
    if (dt != DType::Float32) suffixes.push_back(dtype_suffix);
    body = "[]";
  } else {
    if (!default_dtype) suffixes.push_back(dtype_suffix);
    body = tensor_body(*this, indent);
  }
  // grad_fn=<Name> needs the autograd layer; core only knows whether a leaf requires grad.
  if (is_leaf() && requires_grad()) suffixes.push_back("requires_grad=True");
  return add_suffixes(prefix + body, suffixes, indent);
}

}  // namespace kiln
