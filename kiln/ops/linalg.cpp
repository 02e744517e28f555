#include "kiln/ops/linalg.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>
#include <vector>

#include "kiln/core/parallel.h"
#include "kiln/ops/dispatcher.h"
#include "kiln/backend/onednn/dnnl_utils.h"
#include "kiln/ops/loops.h"
#include "kiln/ops/op_factory.h"
#include "kiln/ops/registry.h"
#include "kiln/ops/shape_ops.h"

namespace kiln {

// "float32[2, 3]": matmul errors put two of these around an '@', so the device is left out.
std::string detail::matmul_desc(const Tensor& t) {
  return dtype_name(t.dtype()) + shape_str(t.shape());
}

// Checks shared by matmul, bmm and linear: rank (min_rank..max_rank), one floating dtype, inner
// sizes.
void detail::check_matmul_operands(const char* op, const Tensor& a, const Tensor& b,
                                   int64_t min_rank, int64_t max_rank, const Loc& loc) {
  for (const Tensor* t : {&a, &b}) {
    if (t->dim() < min_rank || t->dim() > max_rank) {
      if (min_rank == max_rank)
        fail(op, loc, "expected {}-D tensors, but got {} and {}", min_rank, a.describe(),
             b.describe());
      fail(op, loc, "expected tensors of at least {} dimension, but got {} and {}", min_rank,
           a.describe(), b.describe());
    }
  }
  if (a.dtype() != b.dtype())
    fail(op, loc, "expected both operands to have the same dtype, but got {} and {}", a.describe(),
         b.describe());
  if (!is_floating(a.dtype()))
    fail(op, loc, "expected floating-point operands (unsupported dtype {}), but got {} and {}",
         dtype_name(a.dtype()), a.describe(), b.describe());
  const int64_t ka = a.size(-1);
  const int64_t kb = b.dim() == 1 ? b.size(0) : b.size(-2);
  if (ka != kb)
    fail(op, loc, "expected the inner dimensions to match, but got {} @ {} ({} != {})",
         detail::matmul_desc(a), detail::matmul_desc(b), ka, kb);
}

namespace {

void check_operands(const char* op, const Tensor& a, const Tensor& b, int64_t min_rank,
                    int64_t max_rank, const Loc& loc) {
  detail::check_matmul_operands(op, a, b, min_rank, max_rank, loc);
}

// A contiguous copy of t (t itself when already contiguous), converted to dtype.
Tensor dense(const Tensor& t, DType dtype) {
  if (t.is_contiguous() && t.dtype() == dtype) return t;
  Tensor out = empty(t.shape(), {dtype});
  copy_into(out, t);
  return out;
}

// --- oneDNN path (float32) -----------------------------------------------------------------------

// An operand [B, R, C] as oneDNN sees it.
struct MatDesc {
  dnnl::memory::dims dims;
  dnnl::memory::dims strides;
};

// Note [matmul strides]: oneDNN's matmul reads any plain layout where one of the two matrix dims
// has stride 1, so transposed views (the vjp's a^T and b^T) run without a copy. A batch stride of
// 0 (an expanded operand) becomes a batch of 1, which oneDNN broadcasts itself. Strides of size-1
// dims are meaningless in kiln, so they are replaced by ones oneDNN accepts. Any other layout
// (a zero stride inside a matrix, overlapping rows) is copied to a contiguous one first.
std::optional<MatDesc> describe_operand(const Tensor& t) {
  int64_t b = t.size(0), r = t.size(1), c = t.size(2);
  int64_t sb = t.stride(0), sr = t.stride(1), sc = t.stride(2);
  if (c == 1) sc = 1;
  if (r == 1) sr = sc == 1 ? c : 1;
  const bool row_major = sc == 1 && sr >= c;
  const bool col_major = sr == 1 && sc >= r;
  if (!row_major && !col_major) return std::nullopt;
  if (b == 1 || sb == 0) {
    b = 1;
    sb = r * c;
  }
  // oneDNN also wants each matrix to end before the next begins by its outer stride (a batch
  // stride of 26 for 7 rows of stride 4 is refused though no element overlaps: a row slice).
  if (sb < (row_major ? r * sr : c * sc)) return std::nullopt;
  return MatDesc{{b, r, c}, {sb, sr, sc}};
}

MatDesc contiguous_desc(const Tensor& t) {
  return {{t.size(0), t.size(1), t.size(2)}, {t.size(1) * t.size(2), t.size(2), 1}};
}

struct MatmulEntry {
  dnnl::matmul primitive;
  dnnl::memory::desc a_md, b_md, c_md, scratch_md;
  bool copy_inputs = false;  // the given layout only had oneDNN's slow reference kernel
};

LruCache<MatmulEntry>& matmul_cache() {
  static auto* cache = new LruCache<MatmulEntry>(256);
  return *cache;
}

std::string dims_key(const dnnl::memory::dims& d) {
  return shape_str(std::vector<int64_t>(d));
}

MatmulEntry build_matmul(const MatDesc& a, const MatDesc& b, const dnnl::memory::dims& c_dims) {
  using dt = dnnl::memory::data_type;
  MatmulEntry e;
  e.a_md = dnnl::memory::desc(a.dims, dt::f32, a.strides);
  e.b_md = dnnl::memory::desc(b.dims, dt::f32, b.strides);
  e.c_md = dnnl::memory::desc(c_dims, dt::f32, dnnl::memory::format_tag::abc);
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(e.a_md, e.b_md, e.c_md),
                                  user_scratchpad_attr(), dnnl_engine());
  e.primitive = dnnl::matmul(pd);
  e.scratch_md = pd.scratchpad_desc();
  e.copy_inputs = std::string(pd.impl_info_str()).rfind("ref", 0) == 0;
  return e;
}

// Lowers this thread's OpenMP team size for one scope (the setting is per thread).
class ScopedThreads {
 public:
  explicit ScopedThreads(bool single) : prev_(omp_get_max_threads()), active_(single) {
    if (active_) omp_set_num_threads(1);
  }
  ~ScopedThreads() {
    if (active_) omp_set_num_threads(prev_);
  }
  ScopedThreads(const ScopedThreads&) = delete;
  ScopedThreads& operator=(const ScopedThreads&) = delete;

 private:
  int prev_;
  bool active_;
};

// Products below this many multiply-adds run on one thread: waking a team costs more than the
// work (oneDNN has no grain size of its own). Whether a shape is small is part of its cache key
// (the dims), so each primitive is built and run with the same team size.
constexpr int64_t kSmallGemm = int64_t{1} << 16;

void onednn_bmm(const Tensor& a, const Tensor& b, const Tensor& out) {
  ScopedThreads threads(out.numel() * a.size(2) < kSmallGemm);
  std::optional<MatDesc> da = describe_operand(a), db = describe_operand(b);
  Tensor aa = da ? a : dense(a, DType::Float32);
  Tensor bb = db ? b : dense(b, DType::Float32);
  if (!da) da = contiguous_desc(aa);
  if (!db) db = contiguous_desc(bb);
  const dnnl::memory::dims c_dims{out.size(0), out.size(1), out.size(2)};
  // The team size shapes the primitive's scratchpad (Note [scratchpads]), so it is in the key.
  const std::string key = dims_key(da->dims) + dims_key(da->strides) + dims_key(db->dims) +
                          dims_key(db->strides) + dims_key(c_dims) + "|" +
                          std::to_string(omp_get_max_threads());
  MatmulEntry e = matmul_cache().get_or_create(key, [&] {
    MatmulEntry built;
    try {
      built = build_matmul(*da, *db, c_dims);
    } catch (const dnnl::error&) {
      built.copy_inputs = true;  // a layout oneDNN refuses: copy it to a contiguous one
    }
    if (!built.copy_inputs) return built;
    MatmulEntry plain = build_matmul(contiguous_desc(a), contiguous_desc(b), c_dims);
    plain.copy_inputs = true;
    return plain;
  });
  if (e.copy_inputs) {
    aa = dense(a, DType::Float32);
    bb = dense(b, DType::Float32);
  }
  dnnl::engine& eng = dnnl_engine();
  dnnl::memory am(e.a_md, eng, aa.raw_data());
  dnnl::memory bm(e.b_md, eng, bb.raw_data());
  dnnl::memory cm(e.c_md, eng, out.raw_data());
  dnnl::stream& s = dnnl_stream();
  std::unordered_map<int, dnnl::memory> args{
      {DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}};
  const Tensor scratch = scratchpad_for(e.scratch_md);
  if (scratch.defined())
    args[DNNL_ARG_SCRATCHPAD] = dnnl::memory(e.scratch_md, eng, scratch.raw_data());
  e.primitive.execute(s, args);
  s.wait();
}

// --- loop path (float64) -------------------------------------------------------------------------

// Note [bmm loop]: oneDNN has no float64 matmul, so float64 runs this loop. Each 4 x 8 tile of
// the output is accumulated in registers (GCC/Clang vector extensions: 8 AVX2 registers) over k
// in ascending order, so every element is summed in the same order whatever the thread count
// (threads only split panels of rows). A panel of 64 rows walks the columns in steps of 8, so the
// K x 8 slice of b it reads stays in cache while the panel's 16 row tiles use it.
constexpr int64_t kTileRows = 4, kTileCols = 8, kPanelRows = 64;
using Vec4d = double __attribute__((vector_size(32)));

struct GemmF64 {
  const double* a;
  int64_t sam, sak;  // a's row and k strides
  const double* b;
  int64_t sbk;  // b's k stride (its column stride is 1)
  int64_t k;
  double* out;
  int64_t som;

  // out[i0 + r][j] for r < rows, j < cols.
  void tile(int64_t i0, int64_t rows, int64_t cols) const {
    const double* ap = a + i0 * sam;
    const double* bp = b;
    if (rows == kTileRows && cols == kTileCols) {
      // Named accumulators: GCC at -O2 keeps them in registers, an indexed array it would not.
      Vec4d c00{}, c01{}, c10{}, c11{}, c20{}, c21{}, c30{}, c31{};
      const double *a0 = ap, *a1 = ap + sam, *a2 = ap + 2 * sam, *a3 = ap + 3 * sam;
      for (int64_t kk = 0; kk < k; ++kk) {
        Vec4d b0, b1;
        std::memcpy(&b0, bp + kk * sbk, sizeof b0);
        std::memcpy(&b1, bp + kk * sbk + 4, sizeof b1);
        const int64_t o = kk * sak;
        c00 += a0[o] * b0, c01 += a0[o] * b1;
        c10 += a1[o] * b0, c11 += a1[o] * b1;
        c20 += a2[o] * b0, c21 += a2[o] * b1;
        c30 += a3[o] * b0, c31 += a3[o] * b1;
      }
      const Vec4d acc[kTileRows][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}};
      for (int64_t r = 0; r < kTileRows; ++r)
        std::memcpy(out + (i0 + r) * som, acc[r], sizeof acc[r]);
      return;
    }
    double acc[kTileRows][kTileCols] = {};
    for (int64_t kk = 0; kk < k; ++kk)
      for (int64_t r = 0; r < rows; ++r) {
        const double av = ap[r * sam + kk * sak];
        for (int64_t j = 0; j < cols; ++j) acc[r][j] += av * bp[kk * sbk + j];
      }
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < cols; ++j) out[(i0 + r) * som + j] = acc[r][j];
  }
};

void loop_bmm_f64(const Tensor& a, const Tensor& b_in, const Tensor& out) {
  const Tensor b = b_in.size(2) == 1 || b_in.stride(2) == 1 ? b_in : dense(b_in, b_in.dtype());
  const int64_t batch = out.size(0), m = out.size(1), n = out.size(2), k = a.size(2);
  const double* pa = a.data<double>();
  const double* pb = b.data<double>();
  double* po = out.data<double>();
  const int64_t panels = (m + kPanelRows - 1) / kPanelRows;
  const int64_t work = std::min(m, kPanelRows) * k * n;
  const int64_t grain = std::max<int64_t>(1, (1 << 16) / std::max<int64_t>(work, 1));
  parallel_for(0, batch * panels, grain, [&](int64_t t0, int64_t t1) {
    std::vector<double> packed(static_cast<size_t>(k * kTileCols));
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t bi = t / panels, p0 = (t % panels) * kPanelRows;
      const int64_t p1 = std::min(m, p0 + kPanelRows);
      const double* bb = pb + bi * b.stride(0);
      for (int64_t j0 = 0; j0 < n; j0 += kTileCols) {
        // Rows of b are usually a power-of-two apart, which would map the slice's lines onto a
        // few cache sets; a packed copy is contiguous.
        const int64_t cols = std::min(kTileCols, n - j0);
        double* dst = packed.data();
        const double* src = bb + j0;
        const int64_t sbk = b.stride(1);
        if (cols == kTileCols) {
          for (int64_t kk = 0; kk < k; ++kk)
            std::memcpy(dst + kk * kTileCols, src + kk * sbk, kTileCols * sizeof(double));
        } else {
          for (int64_t kk = 0; kk < k; ++kk)
            for (int64_t j = 0; j < cols; ++j) dst[kk * kTileCols + j] = src[kk * sbk + j];
        }
        const GemmF64 g{pa + bi * a.stride(0),
                        a.stride(1),
                        a.stride(2),
                        packed.data(),
                        kTileCols,
                        k,
                        po + bi * m * n + j0,
                        n};
        for (int64_t i0 = p0; i0 < p1; i0 += kTileRows)
          g.tile(i0, std::min(kTileRows, p1 - i0), cols);
      }
    }
  });
}

class BmmOp final : public Op {
 public:
  const char* name() const override { return "bmm"; }

  std::vector<TensorMeta> infer(const std::vector<Tensor>& in, const Loc& loc) const override {
    const Tensor &a = in[0], &b = in[1];
    check_operands(name(), a, b, 3, 3, loc);
    if (a.size(0) != b.size(0))
      fail(name(), loc, "expected equal batch sizes, but got {} and {} ({} != {})", a.describe(),
           b.describe(), a.size(0), b.size(0));
    return {{{a.size(0), a.size(1), b.size(2)}, a.dtype(), a.device()}};
  }

  double flops(const std::vector<Tensor>& in, const std::vector<Tensor>& out) const override {
    return 2.0 * static_cast<double>(out[0].numel()) * static_cast<double>(in[0].size(2));
  }

  void kernel(const std::vector<Tensor>& in, const std::vector<Tensor>& out) const override {
    const Tensor &a = in[0], &b = in[1], &o = out[0];
    if (o.numel() == 0) return;
    if (a.size(2) == 0) {
      std::memset(o.raw_data(), 0, o.nbytes());
      return;
    }
    if (a.dtype() == DType::Float32) {
      onednn_bmm(a, b, o);
    } else if (a.dtype() == DType::Float64) {
      loop_bmm_f64(a, b, o);
    } else {
      // 16-bit floats: oneDNN's f16/bf16 kernels depend on the CPU, so compute in float32.
      Tensor o32 = empty(o.shape(), {DType::Float32});
      onednn_bmm(dense(a, DType::Float32), dense(b, DType::Float32), o32);
      copy_into(o, o32);
    }
  }

  // Each operand's gradient reads only the other one, as for mul.
  Saves saves_for(const std::vector<bool>& needs_grad) const override {
    return {
        true, false, ~uint64_t{0},
        (needs_grad[1] ? uint64_t{1} : uint64_t{0}) | (needs_grad[0] ? uint64_t{2} : uint64_t{0})};
  }

  std::vector<Tensor> vjp(const VjpContext& ctx) const override {
    const Tensor &a = ctx.inputs[0], &b = ctx.inputs[1], &g = ctx.grads[0];
    Tensor ga, gb;
    if (ctx.needs_grad[0]) ga = bmm(g, transpose(b, -1, -2));
    if (ctx.needs_grad[1]) gb = bmm(transpose(a, -1, -2), g);
    return {ga, gb};
  }
};

KILN_REGISTER_OP("bmm", (OpSchema{{"a", "b"}, {"y"}}), no_attrs<BmmOp>());

}  // namespace

Tensor bmm(const Tensor& a, const Tensor& b, const Loc& loc) {
  return call_op<BmmOp>({a, b}, loc);
}

namespace {

std::vector<OpSample> bmm_samples() {
  return {
      {"bmm/basic",
       {sample_tensor({2, 3, 4}, 21), sample_tensor({2, 4, 5}, 22)},
       [](const std::vector<Tensor>& x) { return std::vector<Tensor>{bmm(x[0], x[1])}; },
       "torch.bmm(a0, a1)"},
      {"bmm/transposed",
       {sample_tensor({3, 4, 2}, 23), sample_tensor({3, 5, 4}, 24)},
       [](const std::vector<Tensor>& x) {
         return std::vector<Tensor>{bmm(transpose(x[0], 1, 2), transpose(x[1], -1, -2))};
       },
       "torch.bmm(a0.transpose(1, 2), a1.transpose(-1, -2))"},
  };
}

KILN_REGISTER_OP_SAMPLES("bmm", bmm_samples);

}  // namespace

}  // namespace kiln
