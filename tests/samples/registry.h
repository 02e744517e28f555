#pragma once
// Note [op registry]
// ~~~~~~~~~~~~~~~~~~
// Every op family registers samples of its ops (OpSample: inputs, a call of the public API, the
// same call in PyTorch) with KILN_REGISTER_OP_SAMPLES, in a test-only file that mirrors the op
// file: the samples of kiln/ops/binary.cpp are in tests/samples/ops/binary_samples.cpp. The tests
// walk registered_ops() (gradcheck, meta inference, rebuild from attrs, PyTorch parity, the
// differential fuzzer), so an op added later is covered without editing any test. The samples
// and their PyTorch expressions are not part of the shipped library: they are the object library
// kiln_op_samples, linked whole into every test program (registration is by static
// initializers, which a static archive would drop; Note [shared library]).
//
// registered_ops() lists the op families in the order of their op files' names (ops/assign.cpp,
// ops/binary.cpp, ..., optim/sgd.cpp) and a family's ops in declaration order, whichever library
// or object registers first: the fuzzer draws programs from this order (tests/fuzz/fuzz_gen.py),
// so a seed keeps meaning the same program when files move.
//
// Transition: the registry itself (OpSample, OpInfo, register_op_info, the macros) is still
// compiled into the library, in kiln/ops/registry.{h,cpp}, because the norm family (norm.cpp,
// norm_backward.cpp, channel_affine.cpp, batch_norm_eval.cpp) still registers its samples beside
// its ops. When those move here, registry.{h,cpp} move too. Test code includes this header only.
#include "kiln/ops/registry.h"
#include "kiln/ops/sample_data.h"
