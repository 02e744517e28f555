// CPU kernel of fused_elementwise (Note [fused elementwise]): the program runs over tiles of
// kTile elements held in L1, each step with its op's own tile function (Note [elementwise tiles]),
// so each input is read once and each output written once. The definition is in
// kiln/ops/fused_elementwise.cpp.
#include <algorithm>
#include <cstring>
#include <string>

#include "kiln/backend/cpu/loops.h"
#include "kiln/ops/elementwise_tile.h"
#include "kiln/ops/fused_elementwise.h"
#include "kiln/ops/kernel_table.h"

namespace kiln {

namespace {

// Elements per tile: a tile of every value of a ten-step program in float32 is 20 KiB, within L1.
constexpr int64_t kTile = 512;
// Elements per piece of work handed to a thread.
constexpr int64_t kPiece = 16 * kTile;

template <class C>
const TileFn<C>& tile_of(const ElementwiseTile& t) {
  if constexpr (std::is_same_v<C, float>)
    return t.f32;
  else
    return t.f64;
}

template <class C>
void run(const detail::FusedElementwiseAttrs& f, const std::vector<Tensor>& in,
         const std::vector<Tensor>& out) {
  const size_t ni = in.size(), no = out.size(), steps = f.program.size();
  std::vector<ElementwiseTile> tiles;
  for (const detail::FusedInstruction& s : f.program) {
    const TileMaker make = find_elementwise_tile(s.op->name(), DeviceType::CPU);
    if (!make)
      throw Error(std::string("[fused_elementwise] op '") + s.op->name() +
                  "' has no elementwise tile on cpu, so it cannot run fused (ops with one: " +
                  [] {
                    std::string names;
                    for (const std::string& n : ops_with_elementwise_tiles(DeviceType::CPU))
                      names += (names.empty() ? "" : ", ") + n;
                    return names;
                  }() +
                  ")");
    tiles.push_back(make(*s.op));
    KILN_INTERNAL_ASSERT(tiles.back().arity == static_cast<int>(s.args.size()),
                         std::string("tile arity of ") + s.op->name());
  }
  const Shape& shape = out[0].shape();
  // Operands: the outputs, then the inputs (broadcast to the output's shape).
  std::vector<Strides> strides;
  for (const Tensor& o : out) strides.push_back(o.strides());
  for (const Tensor& t : in) strides.push_back(broadcast_strides(t, shape));
  // A one-element input (a scalar, possibly of another dtype) is read once, converted as the
  // unfused binary ops convert it, and its tile filled once per piece.
  std::vector<char> constant(ni, 0);
  std::vector<C> value(ni, C(0));
  std::vector<const C*> data(ni, nullptr);
  for (size_t i = 0; i < ni; ++i) {
    if (in[i].numel() == 1) {
      constant[i] = 1;
      value[i] = scalar_value<C>(in[i]);
    } else {
      KILN_INTERNAL_ASSERT(in[i].dtype() == f.dtype, "fused_elementwise input dtype");
      data[i] = static_cast<const C*>(in[i].raw_data());
    }
  }
  std::vector<C*> dst(no);
  for (size_t o = 0; o < no; ++o) dst[o] = static_cast<C*>(out[o].raw_data());

  for_each_piece(
      shape, std::move(strides), kPiece,
      [&](const std::vector<int64_t>& off, int64_t count, const std::vector<int64_t>& st) {
        std::vector<C> buf((ni + steps) * static_cast<size_t>(kTile));
        auto tile = [&](size_t ref) { return buf.data() + ref * kTile; };
        std::vector<const C*> ptr(ni + steps);
        for (size_t i = 0; i < ni; ++i)
          if (constant[i]) std::fill(tile(i), tile(i) + kTile, value[i]);
        for (int64_t t0 = 0; t0 < count; t0 += kTile) {
          const int64_t m = std::min(kTile, count - t0);
          for (size_t i = 0; i < ni; ++i) {
            if (constant[i]) {
              ptr[i] = tile(i);
              continue;
            }
            const int64_t s = st[no + i];
            const C* src = data[i] + off[no + i] + t0 * s;
            if (s == 1) {
              ptr[i] = src;
            } else {
              C* b = tile(i);
              if (s == 0)
                std::fill(b, b + m, *src);
              else
                for (int64_t e = 0; e < m; ++e) b[e] = src[e * s];
              ptr[i] = b;
            }
          }
          for (size_t k = 0; k < steps; ++k) {
            const std::vector<int>& args = f.program[k].args;
            const C* a[2] = {ptr[static_cast<size_t>(args[0])],
                             args.size() > 1 ? ptr[static_cast<size_t>(args[1])] : nullptr};
            C* d = tile(ni + k);
            tile_of<C>(tiles[k])(a, d, m);
            ptr[ni + k] = d;
          }
          for (size_t o = 0; o < no; ++o) {
            const C* src = ptr[static_cast<size_t>(f.outputs[o])];
            C* d = dst[o] + off[o] + t0 * st[o];
            if (st[o] == 1)
              std::memcpy(d, src, static_cast<size_t>(m) * sizeof(C));
            else
              for (int64_t e = 0; e < m; ++e) d[e * st[o]] = src[e];
          }
        }
      });
}

void fused_elementwise_kernel(const Op& op, const std::vector<Tensor>& in,
                              const std::vector<Tensor>& out) {
  const detail::FusedElementwiseAttrs& f = detail::fused_elementwise_attrs(op);
  if (out[0].numel() == 0) return;
  if (f.dtype == DType::Float32)
    run<float>(f, in, out);
  else
    run<double>(f, in, out);
}

KILN_REGISTER_KERNEL("fused_elementwise", DeviceType::CPU, fused_elementwise_kernel);

}  // namespace

}  // namespace kiln
