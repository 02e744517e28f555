// The oneDNN matmul path of bmm: operand descriptors that keep strided views copy-free (Note
// [matmul strides]), the primitive cache (Note [primitive cache]), and the team size of small
// products.
#include "kiln/backend/onednn/bmm_kernel.h"

#include <omp.h>

#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "kiln/backend/cpu/dense.h"
#include "kiln/backend/onednn/dnnl_utils.h"

namespace kiln::detail {

namespace {

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
  int64_t b = t.dim_size(0), r = t.dim_size(1), c = t.dim_size(2);
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
  return {{t.dim_size(0), t.dim_size(1), t.dim_size(2)},
          {t.dim_size(1) * t.dim_size(2), t.dim_size(2), 1}};
}

struct MatmulEntry {
  dnnl::matmul primitive;
  dnnl::memory::desc a_md, b_md, c_md, scratch_md;
  bool copy_inputs = false;  // the given layout only had oneDNN's slow reference kernel
  // A 16-bit product for which oneDNN has only its reference kernel even on contiguous operands
  // (a CPU without AVX512-BF16; float16 on any CPU with oneDNN 2.6).
  bool reference_only = false;
};

LruCache<MatmulEntry>& matmul_cache() {
  static auto* cache = new LruCache<MatmulEntry>(256);
  return *cache;
}

std::string dims_key(const dnnl::memory::dims& d) {
  return shape_str(std::vector<int64_t>(d));
}

MatmulEntry build_matmul(const MatDesc& a, const MatDesc& b, const dnnl::memory::dims& c_dims,
                         dnnl::memory::data_type dt) {
  MatmulEntry e;
  e.a_md = dnnl::memory::desc(a.dims, dt, a.strides);
  e.b_md = dnnl::memory::desc(b.dims, dt, b.strides);
  e.c_md = dnnl::memory::desc(c_dims, dt, dnnl::memory::format_tag::abc);
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

}  // namespace

bool onednn_bmm(const Tensor& a, const Tensor& b, const Tensor& out) {
  ScopedThreads threads(out.numel() * a.dim_size(2) < kSmallGemm);
  const DType dtype = out.dtype();
  const dnnl::memory::data_type dt = *dnnl_dtype(dtype);
  std::optional<MatDesc> da = describe_operand(a), db = describe_operand(b);
  Tensor aa = da ? a : dense(a, dtype);
  Tensor bb = db ? b : dense(b, dtype);
  if (!da) da = contiguous_desc(aa);
  if (!db) db = contiguous_desc(bb);
  const dnnl::memory::dims c_dims{out.dim_size(0), out.dim_size(1), out.dim_size(2)};
  // The team size shapes the primitive's scratchpad (Note [scratchpads]), so it is in the key.
  const std::string key = dims_key(da->dims) + dims_key(da->strides) + dims_key(db->dims) +
                          dims_key(db->strides) + dims_key(c_dims) + "|" +
                          std::to_string(omp_get_max_threads()) + "|" + dtype_name(dtype);
  MatmulEntry e = matmul_cache().get_or_create(key, [&] {
    MatmulEntry built;
    try {
      built = build_matmul(*da, *db, c_dims, dt);
    } catch (const dnnl::error&) {
      built.copy_inputs = true;  // a layout oneDNN refuses: copy it to a contiguous one
    }
    if (!built.copy_inputs) return built;
    MatmulEntry plain;
    try {
      plain = build_matmul(contiguous_desc(a), contiguous_desc(b), c_dims, dt);
    } catch (const dnnl::error&) {
      if (dtype == DType::Float32) throw;
      plain.reference_only = true;  // no implementation at all (float16 in oneDNN 2.6)
      return plain;
    }
    // Built for contiguous operands, a reference kernel means the CPU lacks the dtype.
    plain.reference_only = dtype != DType::Float32 && plain.copy_inputs;
    plain.copy_inputs = true;
    return plain;
  });
  if (e.reference_only) return false;
  if (e.copy_inputs) {
    aa = dense(a, dtype);
    bb = dense(b, dtype);
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
  return true;
}

}  // namespace kiln::detail
