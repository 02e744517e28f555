// NumPy .npy files (Note [npy] in kiln/io/npy.h): parity with NumPy itself in both directions,
// the header grammar, and corrupt files, each of which must be a kiln::Error naming the file.
#include "kiln/io/npy.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "kiln/core/grad_mode.h"
#include "kiln/ops/factories.h"
#include "kiln/ops/shape_ops.h"
#include "tests/io/numpy_support.h"
#include "tests/io/temp_files.h"
#include "tests/support/run_command.h"
#include "tests/support/test_util.h"

namespace kiln::io {
namespace {

namespace fs = std::filesystem;
using test::error_of;
using test::expect_contains;
using test::expect_error;
using testing::bytes_of;
using testing::kPython;
using testing::numpy_available;
using testing::raw_bytes;
using testing::read_text;
using testing::TempRoot;
using testing::write_text;

// A .npy file (version `major`.0) with `dict` as its header, padded like NumPy's, then `data`.
std::string npy_file(const std::string& dict, const std::string& data = "", int major = 1) {
  const size_t preamble = major == 1 ? 10 : 12;
  std::string header = dict;
  header.append((64 - (preamble + header.size() + 1) % 64) % 64, ' ');
  header += '\n';
  std::string out = std::string("\x93NUMPY", 6) + static_cast<char>(major) + '\0';
  for (size_t i = 0; i < preamble - 8; ++i) out += static_cast<char>(header.size() >> (8 * i));
  return out + header + data;
}

// The header of a float32 vector of n elements.
std::string f32_dict(const std::string& shape = "(3,)") {
  return "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + ", }";
}

// `file` in an allocation of exactly its size, so that ASan sees any read past its end.
std::unique_ptr<uint8_t[]> exact_copy(const std::string& file) {
  auto out = std::make_unique<uint8_t[]>(file.size());
  if (!file.empty()) std::memcpy(out.get(), file.data(), file.size());
  return out;
}

// The error read_npy_bytes gives for `file`, named "bad.npy".
std::string read_error(const std::string& file) {
  const auto bytes = exact_copy(file);
  return error_of([&] { read_npy_bytes({bytes.get(), file.size()}, "bad.npy"); });
}

void expect_read_error(const std::string& file, const std::vector<std::string>& parts) {
  const std::string msg = read_error(file);
  expect_contains(msg, {"[read_npy] 'bad.npy': ", "test_npy.cpp"});
  expect_contains(msg, parts);
}

// --- live parity with NumPy -----------------------------------------------------------------

int run(const std::string& cmd, std::string& out) {
  return test::run_command(cmd, out);
}

// "write DIR": saves NumPy arrays as DIR/<name>.npy, their C-order little-endian bytes as
// DIR/<name>.bin, and a list of the cases as DIR/cases.json. "check DIR": loads the files kiln
// wrote (listed in DIR/kiln.json) with numpy.load and compares them with kiln's bytes.
constexpr const char* kNumpyScript = R"PY(
import json, os, sys
import numpy as np

mode, d = sys.argv[1], sys.argv[2]

def little(a):
    return np.ascontiguousarray(a).astype(a.dtype.newbyteorder('<')).tobytes()

if mode == 'write':
    f32 = np.array([[np.inf, np.nan, -0.0], [1e-45, 1.5, -2.25]], np.float32)
    arrays = {
        'f32': f32,
        'f64': np.array([np.pi, -1e300, 5e-324, 0.0, -np.inf], np.float64),
        'f16': np.array([[1.5, -65504.0], [np.nan, 6e-8]], np.float16),
        'u8': np.arange(256, dtype=np.uint8).reshape(16, 16)[::5, 1:4],
        'i8': np.array([-128, -1, 0, 1, 127], np.int8),
        'i32': np.array([-2**31, 2**31 - 1, 0, 7, -7, 12, 1, 2, 3, 4, 5, 6],
                        np.int32).reshape(2, 2, 3),
        'i64': np.array([-2**63, 2**63 - 1, 2**40], np.int64),
        'bool': np.array([[True, False, True], [False, False, True]]),
        'scalar_f32': np.array(3.5, np.float32),
        'scalar_i64': np.array(-9, np.int64),
        'scalar_bool': np.array(True),
        'empty': np.zeros((2, 0, 3), np.float64),
        'cube': np.arange(24, dtype=np.float32).reshape(2, 3, 4) / 7,
        'fortran_f64': np.asfortranarray(np.arange(6, dtype=np.float64).reshape(2, 3) * 1.25),
        'fortran_i32': np.asfortranarray(np.arange(24, dtype=np.int32).reshape(2, 3, 4) - 5),
        'fortran_bool': np.asfortranarray(np.arange(15).reshape(3, 5) % 3 == 0),
        'big_f32': np.arange(6, dtype='>f4').reshape(2, 3) - 2.5,
        'big_f64': np.array([np.pi, -0.0, np.nan], '>f8'),
        'big_f16': np.array([1.5, -2.0, 65504.0], '>f2'),
        'big_i32': np.array([-2**31, 1, 2**31 - 1], '>i4'),
        'big_i64': np.array([-2**62, 1, -1], '>i8'),
        'big_fortran_i64': np.asfortranarray(np.arange(12, dtype='>i8').reshape(3, 4) * -3),
    }
    cases = []
    def add(name, a, version, fortran):
        with open(os.path.join(d, name + '.bin'), 'wb') as f:
            f.write(little(a))
        cases.append({'name': name, 'dtype': a.dtype.name, 'shape': list(a.shape),
                      'version': version, 'fortran': fortran,
                      'big': a.dtype.byteorder == '>'})
    for name, a in arrays.items():
        np.save(os.path.join(d, name + '.npy'), a)
        add(name, a, 1, name.startswith('fortran') or name.startswith('big_fortran'))
    for major, a in [(2, np.arange(10, dtype=np.int64).reshape(5, 2) - 4),
                     (3, np.asfortranarray(np.arange(6, dtype='>f4').reshape(3, 2)))]:
        name = 'v%d' % major
        with open(os.path.join(d, name + '.npy'), 'wb') as f:
            np.lib.format.write_array(f, a, version=(major, 0))
        add(name, a, major, major == 3)
    with open(os.path.join(d, 'cases.json'), 'w') as f:
        json.dump(cases, f)
    print('WROTE', len(cases))
else:
    errors = []
    cases = json.load(open(os.path.join(d, 'kiln.json')))
    for c in cases:
        path = os.path.join(d, c['name'] + '.npy')
        with open(path, 'rb') as f:
            version = np.lib.format.read_magic(f)
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
            if version != (1, 0) or fortran or f.tell() % 64 != 0:
                errors.append('%s: version %s, fortran %s, data at %d' %
                              (c['name'], version, fortran, f.tell()))
        a = np.load(path, allow_pickle=False)
        want = open(os.path.join(d, c['name'] + '.bin'), 'rb').read()
        if (a.dtype.str != c['descr'] or list(a.shape) != c['shape'] or
                not a.flags.c_contiguous or a.tobytes() != want):
            errors.append('%s: got %s %s, expected %s %s' %
                          (c['name'], a.dtype.str, a.shape, c['descr'], c['shape']))
    for e in errors:
        print(e)
    print('ERRORS' if errors else 'OK', len(cases))
    sys.exit(1 if errors else 0)
)PY";

std::string run_script(const TempRoot& dir, const std::string& mode, int& rc) {
  write_text(dir / "npy_parity.py", kNumpyScript);
  std::string out;
  rc = run(std::string(kPython) + " '" + (dir / "npy_parity.py") + "' " + mode + " '" +
               dir.path().string() + "'",
           out);
  return out;
}

TEST(NpyTest, ReadsWhatNumpyWrites) {
  std::string why;
  if (!numpy_available(why)) GTEST_SKIP() << why;
  TempRoot dir("npy");
  int rc = 0;
  const std::string out = run_script(dir, "write", rc);
  ASSERT_EQ(rc, 0) << out;
  const nlohmann::json cases = nlohmann::json::parse(read_text(dir / "cases.json"));
  ASSERT_EQ(cases.size(), 24u) << out;
  for (const auto& c : cases) {
    const std::string name = c["name"];
    SCOPED_TRACE(name);
    const std::string path = dir / (name + ".npy");
    const std::string file = read_text(path);
    // The cases exercise what they say (NumPy chose the layout, not kiln).
    ASSERT_EQ(file[6], static_cast<char>(c["version"].get<int>()));
    EXPECT_EQ(file.find("'fortran_order': True") != std::string::npos, c["fortran"].get<bool>());
    EXPECT_EQ(file.find("'descr': '>") != std::string::npos, c["big"].get<bool>());

    const Tensor t = read_npy(path);
    EXPECT_EQ(std::string(dtype_name(t.dtype())), c["dtype"].get<std::string>());
    EXPECT_EQ(t.shape(), c["shape"].get<Shape>());
    // (Not is_contiguous(): kiln's answers false for (2, 0, 3), whose strides saturate.)
    EXPECT_EQ(t.strides(), contiguous_strides(t.shape()));
    EXPECT_EQ(raw_bytes(t), read_text(dir / (name + ".bin")));  // bit-exact, NaN and -0 too
    EXPECT_EQ(raw_bytes(read_npy_bytes(bytes_of(file), name)), raw_bytes(t));
  }
  // Spot checks against values written here rather than by NumPy.
  EXPECT_EQ(read_npy(dir / "scalar_i64.npy").dim(), 0);
  EXPECT_EQ(read_npy(dir / "scalar_i64.npy").item<int64_t>(), -9);
  EXPECT_EQ(read_npy(dir / "fortran_f64.npy").to_vector<double>(),
            (std::vector<double>{0, 1.25, 2.5, 3.75, 5, 6.25}));
  EXPECT_EQ(read_npy(dir / "big_i64.npy").to_vector<int64_t>(),
            (std::vector<int64_t>{-(int64_t{1} << 62), 1, -1}));
  EXPECT_EQ(read_npy(dir / "v3.npy").to_vector<float>(), (std::vector<float>{0, 1, 2, 3, 4, 5}));
}

TEST(NpyTest, NumpyReadsWhatKilnWrites) {
  std::string why;
  if (!numpy_available(why)) GTEST_SKIP() << why;
  TempRoot dir("npy");
  Generator gen(11);
  Tensor f32 = randn({3, 4}, {}, &gen);
  f32.data<float>()[0] = std::numeric_limits<float>::infinity();
  f32.data<float>()[1] = std::numeric_limits<float>::quiet_NaN();
  f32.data<float>()[2] = -0.0f;
  f32.data<float>()[3] = std::numeric_limits<float>::denorm_min();
  const std::vector<std::pair<std::string, Tensor>> tensors = {
      {"f32", f32},
      {"f64", randn({5}, TensorOptions{DType::Float64}, &gen)},
      {"f16", randn({2, 3}, TensorOptions{DType::Float16}, &gen)},
      {"u8", tensor<uint8_t>({0, 200, 255}, Shape{3, 1})},
      {"i8", tensor<int8_t>({-128, -1, 0, 127})},
      {"i32", tensor<int32_t>({INT32_MIN, 0, INT32_MAX})},
      {"i64", tensor<int64_t>({INT64_MIN, -1, INT64_MAX, 5}, Shape{2, 2})},
      {"bool", tensor<bool>({true, false, false, true, true, false}, Shape{3, 2})},
      {"scalar", scalar_tensor(-1.25, TensorOptions{DType::Float64})},
      {"empty", zeros({2, 0})},
      {"cube", randn({2, 3, 4}, {}, &gen)},
      {"transposed", randn({3, 4}, {}, &gen).t()}};
  nlohmann::json manifest = nlohmann::json::array();
  for (const auto& [name, t] : tensors) {
    write_npy(dir / (name + ".npy"), t);
    write_text(dir / (name + ".bin"), raw_bytes(t));
    manifest.push_back({{"name", name}, {"descr", npy_descr(t.dtype())}, {"shape", t.shape()}});
  }
  write_text(dir / "kiln.json", manifest.dump());
  int rc = 0;
  const std::string out = run_script(dir, "check", rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("OK 12"), std::string::npos) << out;
}

// --- kiln alone -----------------------------------------------------------------------------

TEST(NpyTest, RoundTripsEveryDTypeBitExact) {
  TempRoot dir("npy");
  Generator gen(5);
  for (DType dt : kAllDTypes) {
    if (dt == DType::BFloat16) continue;  // NumPy has none (see WriteRejects...)
    SCOPED_TRACE(dtype_name(dt));
    for (const Shape& shape : {Shape{}, Shape{0}, Shape{7}, Shape{2, 3, 4}, Shape{3, 0, 2}}) {
      const Tensor t = dt == DType::Bool ? bernoulli_mask(shape, 0.5, kCPU, &gen)
                       : is_floating(dt) ? randn(shape, TensorOptions{dt}, &gen)
                                         : randint(0, 100, shape, TensorOptions{dt}, &gen);
      write_npy(dir / "t.npy", t);
      const Tensor back = read_npy(dir / "t.npy");
      EXPECT_EQ(back.dtype(), dt);
      EXPECT_EQ(back.shape(), shape);
      EXPECT_EQ(raw_bytes(back), raw_bytes(t));
      const std::vector<uint8_t> bytes = serialize_npy(t);
      EXPECT_EQ(std::string(bytes.begin(), bytes.end()), read_text(dir / "t.npy"));
    }
  }
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"t.npy"});  // no temp file left behind
}

TEST(NpyTest, WritesVersion1HeaderLikeNumpy) {
  const std::vector<uint8_t> bytes = serialize_npy(tensor<float>({1, 2, 3, 4, 5, 6}, Shape{2, 3}));
  const std::string file(bytes.begin(), bytes.end());
  const std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  ASSERT_EQ(file.size(), 128u + 24u);
  EXPECT_EQ(file.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  EXPECT_EQ(static_cast<uint8_t>(file[8]) + 256 * static_cast<uint8_t>(file[9]), 118);
  EXPECT_EQ(file.substr(10, dict.size()), dict);
  EXPECT_EQ(file.substr(10 + dict.size(), 118 - dict.size() - 1), std::string(58, ' '));
  EXPECT_EQ(file[127], '\n');
  float second;
  std::memcpy(&second, file.data() + 128 + 4, 4);
  EXPECT_EQ(second, 2.0f);
  // Shapes print as Python tuples; one-byte dtypes have no byte order.
  const std::vector<uint8_t> u8 = serialize_npy(tensor<uint8_t>({1}));
  EXPECT_NE(std::string(u8.begin(), u8.end())
                .find("{'descr': '|u1', 'fortran_order': False, "
                      "'shape': (1,), }"),
            std::string::npos);
  const std::vector<uint8_t> b = serialize_npy(scalar_tensor(1, TensorOptions{DType::Bool}));
  EXPECT_NE(std::string(b.begin(), b.end()).find("'descr': '|b1'"), std::string::npos);
  EXPECT_NE(std::string(b.begin(), b.end()).find("'shape': (), }"), std::string::npos);
}

TEST(NpyTest, ReadsHeaderSpellingsNumpyAccepts) {
  const std::string data("\x00\x00\x80\x3f\x00\x00\x00\x40\x00\x00\x40\x40", 12);  // 1, 2, 3
  for (const std::string dict :
       {"{'descr': '<f4', 'fortran_order': False, 'shape': (3,)}",
        "{\"shape\": (3,), \"fortran_order\": False, \"descr\": \"<f4\"}",
        "  {'descr':'<f4','fortran_order':True,'shape':(3L,),}  ",
        "{'descr': '=f4', 'fortran_order': False, 'shape': (3, ), }",
        "{'descr': '<f4',\n 'fortran_order': False,\n 'shape': (1, 3, 1)}"}) {
    SCOPED_TRACE(dict);
    const Tensor t = read_npy_bytes(bytes_of(npy_file(dict, data)), "ok.npy");
    EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{1, 2, 3}));
  }
  // Version 2.0 and 3.0 headers take a u32 length; the data need not be aligned.
  std::string v3 = npy_file(f32_dict(), data, 3);
  EXPECT_EQ(read_npy_bytes(bytes_of(v3), "v3.npy").to_vector<float>(),
            (std::vector<float>{1, 2, 3}));
  const std::string text = f32_dict() + "\n";
  const std::string unaligned = std::string("\x93NUMPY\x01\x00", 8) +
                                static_cast<char>(text.size()) + '\0' + text +
                                std::string(12, '\0');
  EXPECT_EQ(read_npy_bytes(bytes_of(unaligned), "u.npy").to_vector<float>(),
            (std::vector<float>{0, 0, 0}));
  // One-byte dtypes read with any byte-order character.
  for (const char* descr : {"|u1", "<u1", ">u1", "=u1"})
    EXPECT_EQ(read_npy_bytes(bytes_of(npy_file(std::string("{'descr': '") + descr +
                                                   "', 'fortran_order': False, 'shape': (2,)}",
                                               "\x07\xff")),
                             "u8.npy")
                  .to_vector<int64_t>(),
              (std::vector<int64_t>{7, 255}));
}

TEST(NpyTest, WriteRejectsWhatNumpyCannotHold) {
  TempRoot dir("npy");
  expect_error(
      [&] { write_npy(dir / "b.npy", zeros({2}, TensorOptions{DType::BFloat16})); },
      {"[write_npy]", "b.npy", "NumPy has no bfloat16", "bfloat16[2]", "Float32", "test_npy.cpp"});
  expect_error([&] { write_npy(dir / "u.npy", Tensor()); }, {"[write_npy]", "undefined"});
  expect_error([&] { write_npy(dir / "m.npy", empty({2}, TensorOptions{}.with_device(kMeta))); },
               {"[write_npy]", "meta"});
  expect_error([&] { write_npy((dir / "missing") + "/x.npy", zeros({2})); },
               {"[write_npy]", "missing/x.npy"});
  EXPECT_TRUE(dir.entries().empty());
}

// --- corrupt files --------------------------------------------------------------------------

TEST(NpyTest, TruncatedAtEveryByteIsAnError) {
  TempRoot dir("npy");
  const std::vector<uint8_t> whole =
      serialize_npy(tensor<int32_t>({1, -2, 3, -4, 5, -6}, Shape{2, 3}));
  ASSERT_EQ(whole.size(), 128u + 24u);
  for (size_t n = 0; n < whole.size(); ++n) {
    SCOPED_TRACE(n);
    const std::string part(whole.begin(), whole.begin() + static_cast<std::ptrdiff_t>(n));
    const std::string msg = read_error(part);
    expect_contains(msg, {"[read_npy] 'bad.npy': ", "truncated"});
    if (n >= 128) expect_contains(msg, {"need 24 data bytes from byte offset 128"});
    write_text(dir / "cut.npy", part);
    expect_error([&] { read_npy(dir / "cut.npy"); }, {"[read_npy]", "cut.npy", "truncated"});
  }
  EXPECT_EQ(read_npy_bytes(whole, "whole.npy").to_vector<int64_t>(),
            (std::vector<int64_t>{1, -2, 3, -4, 5, -6}));
}

TEST(NpyTest, RejectsWrongMagicAndVersion) {
  const std::string good = npy_file(f32_dict(), std::string(12, '\0'));
  std::string bad = good;
  bad[5] = 'X';
  expect_read_error(
      bad, {"not a NumPy .npy file", "magic string", "byte offset 0", "but got '\\x93NUMPX'"});
  expect_read_error("PK\x03\x04", {"not a NumPy .npy file", "'PK\\x03\\x04'"});
  expect_read_error(std::string("\x89PNG\r\n\x1a\n", 8) + std::string(100, '\0'),
                    {"not a NumPy .npy file"});
  for (const auto& [major, minor] : std::vector<std::pair<int, int>>{{0, 0}, {4, 0}, {1, 1}}) {
    bad = good;
    bad[6] = static_cast<char>(major);
    bad[7] = static_cast<char>(minor);
    expect_read_error(
        bad, {"unsupported format version " + std::to_string(major) + "." + std::to_string(minor),
              "offsets 6 and 7", "1.0, 2.0 and 3.0"});
  }
}

TEST(NpyTest, RejectsBadHeaderDicts) {
  const std::string data(12, '\0');
  auto header_error = [&](const std::string& dict, const std::vector<std::string>& parts) {
    SCOPED_TRACE(dict);
    expect_read_error(npy_file(dict, data), parts);
  };
  header_error("{'descr': '<f4', 'fortran_order': False}",
               {"the header has no key 'shape'", "'descr', 'fortran_order' and 'shape'"});
  header_error("{'descr': '|O', 'fortran_order': False, 'shape': (3,)}",
               {"object arrays", "'|O'", "byte offset 20", "never executes code"});
  header_error("{'descr': 'O', 'fortran_order': False, 'shape': (3,)}", {"object arrays"});
  header_error("{'descr': '<f4', 'fortran_order': False, 'shape': (3, -1)}",
               {"negative dimension -1", "(3, -1)", "byte offset 64"});
  header_error("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), ",
               {"not a valid Python dict literal", "expected a key or '}'", "the text ends"});
  header_error("{'descr': '<f4', 'fortran_order': False, 'shape': (3,)",
               {"not a valid Python dict literal", "expected ',' or '}' after a dict entry"});
  header_error("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), 'x': 1}",
               {"unexpected key 'x'", "byte offset"});
  header_error("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (3,)}",
               {"the key 'descr' twice", "byte offsets 11 and 27"});
  header_error("{'descr': [('a', '<f4'), ('b', '<i4')], 'fortran_order': False, 'shape': (3,)}",
               {"structured dtypes are not supported", "[('a', '<f4'), ('b', '<i4')]"});
  header_error("{'descr': '<f4', 'fortran_order': 0, 'shape': (3,)}",
               {"'fortran_order' to be True or False", "got 0"});
  header_error("{'descr': '<f4', 'fortran_order': False, 'shape': [3]}",
               {"'shape' to be a tuple", "got [3]"});
  header_error("{'descr': '<f4', 'fortran_order': False, 'shape': (3)}",
               {"'shape' to be a tuple", "got 3"});
  header_error("{'descr': '<f4', 'fortran_order': False, 'shape': (3.0,)}",
               {"unsupported number", "byte offset 61"});
  header_error("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,)}",
               {"does not fit in 64 bits"});
  header_error("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296)}",
               {"more elements than fit in 64 bits"});
  header_error("{'descr': '<f8', 'fortran_order': False, 'shape': (3074457345618258602, 1)}",
               {"needs more bytes than fit in 64 bits"});
  header_error("{'descr': '<f4', 'fortran_order': __import__('os'), 'shape': (3,)}",
               {"unexpected name '__import__'"});
  header_error("{'descr': '<f4', 'fortran_order': False, 'shape': (3,)} extra",
               {"expected nothing more"});
  header_error("['descr', '<f4']", {"expected a dict literal"});
  header_error("", {"expected a value", "the text ends"});
  header_error("{'descr': '<f4\n', 'fortran_order': False, 'shape': (3,)}",
               {"string starting at byte offset 20 is not terminated"});
  header_error("{'descr': '\\x3cf4', 'fortran_order': False, 'shape': (3,)}",
               {"unsupported escape sequence '\\x'"});
  header_error("{\xff: 1}", {"expected a value", "got '\\xff'"});
  header_error(std::string(40, '[') + std::string(40, ']'), {"deeper than 16 levels"});
  header_error("{'descr': '<f4', 'fortran_order': False, 'shape': (" + std::string(65, '1') + ")}",
               {"does not fit in 64 bits"});
  std::string rank65 = "(";
  for (int i = 0; i < 65; ++i) rank65 += "1, ";
  header_error("{'descr': '<f4', 'fortran_order': False, 'shape': " + rank65 + ")}",
               {"65 dimensions", "more than the 64"});
}

TEST(NpyTest, RejectsUnsupportedDTypes) {
  for (const char* descr :
       {"<i2", "<u2", "<u4", "<u8", "<c8", "|S3", "<U2", "<M8[ns]", "|V4", "f4", "float32", ""}) {
    SCOPED_TRACE(descr);
    expect_read_error(
        npy_file(std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': (1,)}",
                 std::string(16, '\0')),
        {"unsupported dtype '" + std::string(descr) + "'", "astype()"});
  }
  expect_read_error(
      npy_file("{'descr': '|f4', 'fortran_order': False, 'shape': (1,)}", std::string(4, '\0')),
      {"no byte order ('|')", "expected '<f4' or '>f4'"});
}

TEST(NpyTest, RejectsDataLengthMismatches) {
  // Too short, and with trailing bytes: each names both sizes.
  expect_read_error(npy_file(f32_dict(), std::string(11, '\0')),
                    {"truncated", "'<f4' and shape (3,) need 12 data bytes from byte offset 128",
                     "ends at byte offset 139 (11 bytes of data)"});
  expect_read_error(npy_file(f32_dict(), std::string(13, '\0')),
                    {"1 trailing byte:", "need 12 data bytes from byte offset 128",
                     "ending at byte offset 140, but the file is 141 bytes"});
  expect_read_error(npy_file(f32_dict("(0,)"), "x"), {"1 trailing byte:", "need 0 data bytes"});
  // An absurd shape over a tiny file fails on the size check, before anything is allocated.
  expect_read_error(npy_file(f32_dict("(1000000000000000,)"), "abcd"),
                    {"need 4000000000000000 data bytes", "4 bytes of data"});
  // A header length past the end of the file, or over the limit.
  std::string file = npy_file(f32_dict(), std::string(12, '\0'));
  file[9] = '\x10';
  expect_read_error(file, {"truncated", "header length 4214", "u16 at byte offset 8",
                           "only 130 bytes follow byte offset 10"});
  const std::string huge = std::string("\x93NUMPY\x02\x00\xff\xff\xff\x7f", 12) + "{}";
  expect_read_error(huge, {"header length 2147483647", "u32 at byte offset 8", "limit"});
}

TEST(NpyTest, RejectsInvalidBoolBytes) {
  expect_read_error(
      npy_file("{'descr': '|b1', 'fortran_order': False, 'shape': (3,)}", std::string("\1\0\2", 3)),
      {"bool array has the byte 2 at byte offset 130, expected 0 or 1"});
}

TEST(NpyTest, FileErrorsNameTheFile) {
  TempRoot dir("npy");
  expect_error([&] { read_npy(dir / "none.npy"); },
               {"[read_npy]", "none.npy", "No such file", "test_npy.cpp"});
  expect_error([&] { read_npy(dir.path().string()); }, {"[read_npy]", "a directory"});
  write_text(dir / "tail.npy", npy_file(f32_dict(), std::string(20, '\0')));
  expect_error([&] { read_npy(dir / "tail.npy"); },
               {"[read_npy] '" + (dir / "tail.npy") + "': 8 trailing bytes", "test_npy.cpp"});
}

// Random corruptions of valid files (fixed seed): each must load or be a kiln::Error naming the
// file, never another exception or a crash (or, under ASan, a read out of bounds).
TEST(NpyTest, RandomCorruptionsLoadOrFail) {
  std::vector<std::string> seeds;
  for (const Tensor& t :
       {tensor<float>({1, 2, 3, 4, 5, 6}, Shape{2, 3}), tensor<bool>({true, false, true}),
        scalar_tensor(7, {DType::Int64}), zeros({0, 4}, {DType::Int8})}) {
    const std::vector<uint8_t> b = serialize_npy(t);
    seeds.emplace_back(b.begin(), b.end());
  }
  // A Fortran-order, big-endian one, as NumPy would write it.
  seeds.push_back(npy_file("{'descr': '>i4', 'fortran_order': True, 'shape': (2, 2), }",
                           std::string("\0\0\0\1\0\0\0\2\0\0\0\3\0\0\0\4", 16)));
  std::mt19937 rng(1234);
  constexpr char kAlphabet[] = "{}()[],:' \"-0123456789<>|=TrueFalsNoLfibu\n\\\x00\xff";
  const std::string alphabet(kAlphabet, sizeof kAlphabet - 1);  // with the NUL inside
  int loaded = 0, failed = 0;
  for (int i = 0; i < 4000; ++i) {
    std::string file = seeds[rng() % seeds.size()];
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits && !file.empty(); ++e) {
      // Mostly inside the preamble and header, where the parsing happens.
      const size_t at = rng() % std::min<size_t>(file.size(), rng() % 2 ? 128 : file.size());
      const char c = alphabet[rng() % alphabet.size()];
      switch (rng() % 4) {
        case 0:
          file[at] = c;
          break;
        case 1:
          file.insert(file.begin() + static_cast<std::ptrdiff_t>(at), c);
          break;
        case 2:
          file.erase(at, 1 + rng() % 4);
          break;
        default:
          file[at] = static_cast<char>(file[at] ^ (1 << (rng() % 8)));
          break;
      }
    }
    const auto bytes = exact_copy(file);
    try {
      const Tensor t = read_npy_bytes({bytes.get(), file.size()}, "fuzz.npy");
      // What loads is consistent: it writes and reads back the same.
      const std::vector<uint8_t> again = serialize_npy(t);
      EXPECT_EQ(raw_bytes(read_npy_bytes(again, "again.npy")), raw_bytes(t));
      ++loaded;
    } catch (const Error& e) {
      ASSERT_NE(std::string(e.what()).find("[read_npy] 'fuzz.npy': "), std::string::npos)
          << e.what();
      ++failed;
    } catch (const std::exception& e) {
      FAIL() << "case " << i << ": not a kiln::Error: " << e.what();
    }
  }
  EXPECT_GT(loaded, 10);
  EXPECT_GT(failed, 3000);
}

}  // namespace
}  // namespace kiln::io
