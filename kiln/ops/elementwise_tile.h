#pragma once
// Tiles of elementwise ops: each op's scalar function applied to a block of elements, registered by
// a backend beside the op's kernel, for fused_elementwise (Note [elementwise tiles]).
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kiln/ops/op.h"

namespace kiln {

// Note [elementwise tiles]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// A fused_elementwise op (kiln/ops/fused_elementwise.h) runs a chain of unary and binary
// elementwise ops over a block of elements at a time: the block of each input is read once, every
// op of the chain runs on the block while it sits in L1, and the block of each output is written
// once. The per-op piece it needs is a tile: the op's own scalar function over n elements held in
// the compute type. A backend registers a tile next to the op's kernel, built from the same
// functor the kernel's loop runs (kiln/backend/cpu/unary_ops.cpp: `unary_kernel<Relu>` and
// `unary_tile<Relu>`), so a fused chain computes what the unfused chain computes, bit for bit, in
// float32 and float64 (the types whose compute type is themselves; no rounding between ops is
// skipped). The graph pass that forms fusions (kiln/graph/passes/fuse_elementwise.cpp) asks
// has_elementwise_tile() which ops it may take, so an op becomes fusible by registering a tile,
// without editing the pass.
template <class C>
using TileFn = std::function<void(const C* const* args, C* out, int64_t n)>;

struct ElementwiseTile {
  int arity = 1;  // 1: out[i] = f(args[0][i]); 2: out[i] = f(args[0][i], args[1][i])
  TileFn<float> f32 = nullptr;
  TileFn<double> f64 = nullptr;
};

// Builds the tile of one op (its attrs: clamp's bounds, gelu's approximation).
using TileMaker = ElementwiseTile (*)(const Op& op);

// At load time, from a backend file (KILN_REGISTER_ELEMENTWISE_TILE); two tiles for one (op,
// device) are an internal error.
bool register_elementwise_tile(const char* op_name, DeviceType device, TileMaker make);
// nullptr when the op has no tile on that device.
TileMaker find_elementwise_tile(const std::string& op_name, DeviceType device);
bool has_elementwise_tile(const std::string& op_name, DeviceType device = DeviceType::CPU);
// The op names with a tile on `device`, sorted.
std::vector<std::string> ops_with_elementwise_tiles(DeviceType device);

#define KILN_REGISTER_ELEMENTWISE_TILE(op_name, device, make)           \
  static const bool KILN_TILE_CONCAT(kiln_tile_registered_, __LINE__) = \
      ::kiln::register_elementwise_tile(op_name, device, make)
#define KILN_TILE_CONCAT_INNER(a, b) a##b
#define KILN_TILE_CONCAT(a, b) KILN_TILE_CONCAT_INNER(a, b)

}  // namespace kiln
