// NumPy .npz archives (Note [npz] in kiln/io/npz.h): parity with numpy.savez, savez_compressed
// and numpy.load in both directions, deterministic bytes, and corrupt archives, each of which
// must be a kiln::Error naming the archive (and the entry, where there is one).
#include "kiln/io/npz.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "kiln/core/grad_mode.h"
#include "kiln/io/crc32.h"
#include "kiln/io/npy.h"
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

std::string as_string(const std::vector<uint8_t>& bytes) {
  return std::string(bytes.begin(), bytes.end());
}

// `file` in an allocation of exactly its size, so that ASan sees any read past its end.
NamedArrays read_exact(const std::string& file, const std::string& name = "bad.npz") {
  auto copy = std::make_unique<uint8_t[]>(file.size() + 1);
  if (!file.empty()) std::memcpy(copy.get(), file.data(), file.size());
  return read_npz_bytes({copy.get(), file.size()}, name);
}

std::string read_error(const std::string& file) {
  return error_of([&] { read_exact(file); });
}

uint16_t u16_at(const std::string& s, size_t at) {
  return static_cast<uint16_t>(static_cast<uint8_t>(s[at]) | static_cast<uint8_t>(s[at + 1]) << 8);
}

void set_u16(std::string& s, size_t at, uint16_t v) {
  s[at] = static_cast<char>(v & 0xff);
  s[at + 1] = static_cast<char>(v >> 8);
}

// Offsets of every local file header ("PK\3\4") and central directory header ("PK\1\2").
std::vector<size_t> find_all(const std::string& s, const std::string& what) {
  std::vector<size_t> out;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1))
    out.push_back(at);
  return out;
}
const std::string kLocal("PK\x03\x04", 4);
const std::string kCentral("PK\x01\x02", 4);

// Replaces every occurrence of `from` by `to` (same length): a name lives in its local header and
// in the central directory, and both must change for libzip's consistency check to pass.
std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  EXPECT_EQ(from.size(), to.size());
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
  return s;
}

NamedArrays sample_arrays() {
  return {{"w", tensor<float>({1.5f, -2.0f, 0.25f, 8.0f}, Shape{2, 2})},
          {"b", tensor<int64_t>({-3, 4, 5})},
          {"flag", tensor<bool>({true, false})}};
}

// --- live parity with NumPy -----------------------------------------------------------------

constexpr const char* kNumpyScript = R"PY(
import json, os, sys
import numpy as np

mode, d = sys.argv[1], sys.argv[2]

def little(a):
    return np.ascontiguousarray(a).astype(a.dtype.newbyteorder('<')).tobytes()

if mode == 'write':
    rng = np.random.default_rng(3)
    arrays = {
        'f32': np.array([[np.inf, np.nan, -0.0], [1e-45, 1.5, -2.25]], np.float32),
        'f64': np.array([np.pi, -1e300, 5e-324], np.float64),
        'f16': np.array([1.5, -65504.0], np.float16),
        'u8': np.arange(256, dtype=np.uint8).reshape(16, 16)[::5, 1:4],
        'i8': np.array([-128, 127], np.int8),
        'i32': np.arange(12, dtype=np.int32).reshape(2, 2, 3) - 6,
        'i64': np.array([-2**63, 2**63 - 1], np.int64),
        'bool': np.array([[True, False, True], [False, False, True]]),
        'scalar': np.array(-9, np.int64),
        'empty': np.zeros((2, 0, 3), np.float64),
        'fortran': np.asfortranarray(np.arange(6, dtype=np.float64).reshape(2, 3)),
        'big_endian': np.arange(6, dtype='>i4') - 3,
        'layer/weight': rng.standard_normal((64, 33)).astype(np.float32),
    }
    cases = {}
    def archive(name, entries):
        cases[name] = []
        for key, a in entries.items():
            with open(os.path.join(d, name + '.' + key.replace('/', '_') + '.bin'), 'wb') as f:
                f.write(little(a))
            cases[name].append({'key': key, 'dtype': a.dtype.name, 'shape': list(a.shape)})
    np.savez(os.path.join(d, 'stored.npz'), **arrays)
    archive('stored', arrays)
    np.savez_compressed(os.path.join(d, 'deflated.npz'), **arrays)
    archive('deflated', arrays)
    positional = [np.arange(3, dtype=np.float32), np.ones((2, 2), np.int32)]
    np.savez(os.path.join(d, 'positional.npz'), *positional)
    archive('positional', {'arr_0': positional[0], 'arr_1': positional[1]})
    np.savez(os.path.join(d, 'none.npz'))
    archive('none', {})
    with open(os.path.join(d, 'cases.json'), 'w') as f:
        json.dump(cases, f)
    print('WROTE', len(cases))
else:
    errors = []
    cases = json.load(open(os.path.join(d, 'kiln.json')))
    for archive, entries in cases.items():
        with np.load(os.path.join(d, archive), allow_pickle=False) as z:
            if list(z.files) != [e['key'] for e in entries]:
                errors.append('%s: files %s' % (archive, z.files))
                continue
            for e in entries:
                a = z[e['key']]
                want = open(os.path.join(d, e['bin']), 'rb').read()
                if (a.dtype.str != e['descr'] or list(a.shape) != e['shape'] or
                        a.tobytes() != want):
                    errors.append('%s:%s: got %s %s' % (archive, e['key'], a.dtype.str, a.shape))
    for e in errors:
        print(e)
    print('ERRORS' if errors else 'OK', len(cases))
    sys.exit(1 if errors else 0)
)PY";

std::string run_script(const TempRoot& dir, const std::string& mode, int& rc) {
  write_text(dir / "npz_parity.py", kNumpyScript);
  std::string out;
  rc = test::run_command(std::string(kPython) + " '" + (dir / "npz_parity.py") + "' " + mode +
                             " '" + dir.path().string() + "'",
                         out);
  return out;
}

TEST(NpzTest, ReadsWhatNumpyWrites) {
  std::string why;
  if (!numpy_available(why)) GTEST_SKIP() << why;
  TempRoot dir("npz");
  int rc = 0;
  const std::string out = run_script(dir, "write", rc);
  ASSERT_EQ(rc, 0) << out;
  const nlohmann::json cases = nlohmann::json::parse(read_text(dir / "cases.json"));
  ASSERT_EQ(cases.size(), 4u) << out;
  // NumPy chose the layout: savez stores, savez_compressed deflates (method at offset 8).
  EXPECT_EQ(u16_at(read_text(dir / "stored.npz"), 8), 0);
  EXPECT_EQ(u16_at(read_text(dir / "deflated.npz"), 8), 8);
  for (const auto& [archive, entries] : cases.items()) {
    SCOPED_TRACE(archive);
    const std::string path = dir / (archive + ".npz");
    const NamedArrays arrays = read_npz(path);
    ASSERT_EQ(arrays.size(), entries.size());
    for (size_t i = 0; i < arrays.size(); ++i) {
      const auto& e = entries[i];
      const std::string key = e["key"];
      SCOPED_TRACE(key);
      EXPECT_EQ(arrays[i].first, key);  // archive order, folders kept
      const Tensor& t = arrays[i].second;
      EXPECT_EQ(std::string(dtype_name(t.dtype())), e["dtype"].get<std::string>());
      EXPECT_EQ(t.shape(), e["shape"].get<Shape>());
      std::string bin = archive + "." + key + ".bin";
      std::replace(bin.begin(), bin.end(), '/', '_');
      EXPECT_EQ(raw_bytes(t), read_text(dir / bin));  // bit-exact, NaN and -0 too
    }
    // From memory, the same arrays.
    const NamedArrays again = read_npz_bytes(bytes_of(read_text(path)), archive);
    ASSERT_EQ(again.size(), arrays.size());
    for (size_t i = 0; i < arrays.size(); ++i)
      EXPECT_EQ(raw_bytes(again[i].second), raw_bytes(arrays[i].second));
  }
}

TEST(NpzTest, NumpyReadsWhatKilnWrites) {
  std::string why;
  if (!numpy_available(why)) GTEST_SKIP() << why;
  TempRoot dir("npz");
  Generator gen(17);
  Tensor f32 = randn({3, 4}, {}, &gen);
  f32.data<float>()[1] = std::numeric_limits<float>::quiet_NaN();
  const NamedArrays arrays = {{"f32", f32},
                              {"f64", randn({5}, TensorOptions{DType::Float64}, &gen)},
                              {"f16", randn({2, 3}, TensorOptions{DType::Float16}, &gen)},
                              {"u8", tensor<uint8_t>({0, 200, 255}, Shape{3, 1})},
                              {"i32", tensor<int32_t>({INT32_MIN, 0, INT32_MAX})},
                              {"i64", tensor<int64_t>({INT64_MIN, -1, INT64_MAX, 5}, Shape{2, 2})},
                              {"bool", tensor<bool>({true, false, true}, Shape{3})},
                              {"scalar", scalar_tensor(-1.25, TensorOptions{DType::Float64})},
                              {"empty", zeros({2, 0})},
                              {"transposed", randn({3, 4}, {}, &gen).t()},
                              {"encoder/layer.0/weight", randn({40, 25}, {}, &gen)}};
  nlohmann::json manifest = nlohmann::json::object();
  for (const auto& [file, compression] : {std::pair{"stored.npz", NpzCompression::kStored},
                                          std::pair{"deflated.npz", NpzCompression::kDeflated}}) {
    write_npz(dir / file, arrays, compression);
    nlohmann::json entries = nlohmann::json::array();
    for (size_t i = 0; i < arrays.size(); ++i) {
      const std::string bin = std::string(file) + "." + std::to_string(i) + ".bin";
      write_text(dir / bin, raw_bytes(arrays[i].second));
      entries.push_back({{"key", arrays[i].first},
                         {"descr", npy_descr(arrays[i].second.dtype())},
                         {"shape", arrays[i].second.shape()},
                         {"bin", bin}});
    }
    manifest[file] = entries;
  }
  write_npz(dir / "none.npz", {});
  manifest["none.npz"] = nlohmann::json::array();
  write_text(dir / "kiln.json", manifest.dump());
  int rc = 0;
  const std::string out = run_script(dir, "check", rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("OK 3"), std::string::npos) << out;
}

// --- kiln alone -----------------------------------------------------------------------------

TEST(NpzTest, RoundTripsEveryDTypeBothCompressions) {
  TempRoot dir("npz");
  Generator gen(5);
  NamedArrays arrays;
  for (DType dt : kAllDTypes) {
    if (dt == DType::BFloat16) continue;  // NumPy has none (see WriteRejects...)
    int case_index = 0;
    for (const Shape& shape : {Shape{}, Shape{0}, Shape{7}, Shape{2, 3, 4}}) {
      const Tensor t = dt == DType::Bool ? bernoulli_mask(shape, 0.5, kCPU, &gen)
                       : is_floating(dt) ? randn(shape, TensorOptions{dt}, &gen)
                                         : randint(0, 100, shape, TensorOptions{dt}, &gen);
      arrays.emplace_back(std::string(dtype_name(dt)) + "/" + std::to_string(case_index++), t);
    }
  }
  for (NpzCompression c : {NpzCompression::kStored, NpzCompression::kDeflated}) {
    SCOPED_TRACE(static_cast<int>(c));
    write_npz(dir / "t.npz", arrays, c);
    const std::string file = read_text(dir / "t.npz");
    EXPECT_EQ(file, as_string(serialize_npz(arrays, c)));
    for (const NamedArrays& back : {read_npz(dir / "t.npz"), read_exact(file)}) {
      ASSERT_EQ(back.size(), arrays.size());
      for (size_t i = 0; i < arrays.size(); ++i) {
        SCOPED_TRACE(arrays[i].first);
        EXPECT_EQ(back[i].first, arrays[i].first);
        EXPECT_EQ(back[i].second.dtype(), arrays[i].second.dtype());
        EXPECT_EQ(back[i].second.shape(), arrays[i].second.shape());
        EXPECT_EQ(raw_bytes(back[i].second), raw_bytes(arrays[i].second));
      }
    }
  }
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"t.npz"});  // no temp file left behind
  // Deflate pays on redundant data.
  const NamedArrays zeros_only = {{"z", zeros({256, 256})}};
  EXPECT_LT(serialize_npz(zeros_only, NpzCompression::kDeflated).size(),
            serialize_npz(zeros_only).size() / 50);
}

TEST(NpzTest, WritesTheSameBytesEveryTime) {
  const NamedArrays arrays = sample_arrays();
  for (NpzCompression c : {NpzCompression::kStored, NpzCompression::kDeflated}) {
    const std::string a = as_string(serialize_npz(arrays, c));
    EXPECT_EQ(a, as_string(serialize_npz(arrays, c)));
    // One local header per array, in the given order, each dated 1980-01-01 00:00.
    const std::vector<size_t> locals = find_all(a, kLocal);
    ASSERT_EQ(locals.size(), arrays.size());
    for (size_t i = 0; i < locals.size(); ++i) {
      EXPECT_EQ(u16_at(a, locals[i] + 8), c == NpzCompression::kStored ? 0 : 8);
      EXPECT_EQ(u16_at(a, locals[i] + 10), 0);                        // time
      EXPECT_EQ(u16_at(a, locals[i] + 12), (0 << 9) | (1 << 5) | 1);  // date
      const uint16_t name_len = u16_at(a, locals[i] + 26);
      EXPECT_EQ(a.substr(locals[i] + 30, name_len), arrays[i].first + ".npy");
    }
  }
  // No arrays: the end record alone, as numpy.savez() writes it.
  EXPECT_EQ(as_string(serialize_npz({})), std::string("PK\x05\x06", 4) + std::string(18, '\0'));
  EXPECT_TRUE(read_exact(as_string(serialize_npz({}))).empty());
}

TEST(NpzTest, WriteRejectsBadNamesAndArrays) {
  TempRoot dir("npz");
  const Tensor t = zeros({2});
  auto write_error = [&](const NamedArrays& arrays, const std::vector<std::string>& parts) {
    expect_error([&] { write_npz(dir / "x.npz", arrays); }, parts);
  };
  write_error({{"", t}}, {"[write_npz]", "an array name is empty", "test_npz.cpp"});
  write_error({{"a", t}, {"a", t}}, {"the array name 'a' is given twice"});
  write_error({{"/etc/x", t}}, {"'/etc/x' is absolute"});
  write_error({{"a/../../x", t}}, {"'a/../../x' has a '..' component"});
  write_error({{"..", t}}, {"'..' component"});
  write_error({{std::string("a\0b", 3), t}}, {"NUL byte"});
  write_error({{"b", zeros({2}, TensorOptions{DType::BFloat16})}}, {"NumPy has no bfloat16"});
  write_error({{"u", Tensor()}}, {"undefined"});
  EXPECT_TRUE(dir.entries().empty());  // nothing written
  // Names that only look odd are fine.
  write_npz(dir / "ok.npz", {{"..a", t}, {"a..", t}, {"x/y/z", t}, {"with space", t}});
  EXPECT_EQ(read_npz(dir / "ok.npz")[2].first, "x/y/z");
  expect_error(
      [&] {
        write_npz((dir / "missing") + "/x.npz", {{"a", t}});
      },
      {"[write_npz]", "missing/x.npz"});
}

// --- corrupt archives -----------------------------------------------------------------------

TEST(NpzTest, RejectsWhatIsNotAZipArchive) {
  for (const std::string& file :
       {std::string(), std::string("PK"),
        std::string("\x93NUMPY\x01\x00", 8) + std::string(120, ' '), std::string(1000, '\0')}) {
    SCOPED_TRACE(file.size());
    expect_contains(read_error(file),
                    {"[read_npz] 'bad.npz': ", "not a zip archive", "test_npz.cpp"});
  }
  TempRoot dir("npz");
  expect_error([&] { read_npz(dir / "absent.npz"); }, {"[read_npz]", "absent.npz"});
  expect_error([&] { read_npz(dir.path().string()); }, {"[read_npz]"});
  write_text(dir / "text.npz", "hello");
  expect_error([&] { read_npz(dir / "text.npz"); },
               {"[read_npz] '" + (dir / "text.npz") + "': ", "not a zip archive"});
}

TEST(NpzTest, TruncatedAtEveryByteIsAnError) {
  for (NpzCompression c : {NpzCompression::kStored, NpzCompression::kDeflated}) {
    const std::string whole = as_string(serialize_npz(sample_arrays(), c));
    for (size_t n = 0; n < whole.size(); ++n) {
      SCOPED_TRACE(n);
      expect_contains(read_error(whole.substr(0, n)), {"[read_npz] 'bad.npz': "});
    }
    EXPECT_EQ(read_exact(whole).size(), 3u);
  }
}

TEST(NpzTest, RejectsEntriesThatAreNotArrays) {
  const std::string good = as_string(serialize_npz(sample_arrays()));
  expect_contains(read_error(replace_all(good, "flag.npy", "flag.txt")),
                  {"entry 'flag.txt' is not an array", "'NAME.npy'"});
  expect_contains(read_error(replace_all(good, "b.npy", "w.npy")),
                  {"two entries of the same name"});
}

TEST(NpzTest, ReportsTheNpyErrorInsideAnEntry) {
  // A well-formed zip member (its CRC fixed up) whose bytes are not a well-formed .npy file: the
  // error is read_npy's, naming the archive and the entry.
  std::string file = as_string(serialize_npz({{"v", tensor<float>({1, 2, 3})}}));
  const size_t local = 0, central = find_all(file, kCentral).at(0);
  const size_t data = 30 + u16_at(file, 26) + u16_at(file, 28);
  const uint32_t size = static_cast<uint32_t>(u16_at(file, 22) | u16_at(file, 24) << 16);
  const size_t magic = file.find("\x93NUMPY");
  ASSERT_EQ(magic, data);
  file[magic + 5] = 'X';
  const uint32_t crc = crc32(std::string_view(file).substr(data, size));
  for (size_t at : {local + 14, central + 16}) {
    set_u16(file, at, static_cast<uint16_t>(crc & 0xffff));
    set_u16(file, at + 2, static_cast<uint16_t>(crc >> 16));
  }
  expect_contains(read_error(file), {"[read_npy] 'bad.npz:v.npy': ", "not a NumPy .npy file"});
}

TEST(NpzTest, RejectsCorruptDataByCrc) {
  for (NpzCompression c : {NpzCompression::kStored, NpzCompression::kDeflated}) {
    SCOPED_TRACE(static_cast<int>(c));
    const std::string good = as_string(serialize_npz(sample_arrays(), c));
    // The first entry's data starts after its 30-byte header and its name.
    const size_t data = 30 + u16_at(good, 26) + u16_at(good, 28);
    std::string bad = good;
    bad[data + 40] = static_cast<char>(bad[data + 40] ^ 0x10);
    expect_contains(read_error(bad), {"[read_npz] 'bad.npz': entry 'w.npy'"});
  }
}

TEST(NpzTest, RejectsUnsupportedMethodsAndEncryption) {
  const std::string good = as_string(serialize_npz(sample_arrays()));
  std::string bzip2 = good;
  for (size_t at : find_all(good, kLocal)) set_u16(bzip2, at + 8, 12);
  for (size_t at : find_all(good, kCentral)) set_u16(bzip2, at + 10, 12);
  expect_contains(read_error(bzip2), {"entry 'w.npy' uses zip compression method 12",
                                      "stored (numpy.savez) and deflated"});
  std::string encrypted = good;
  for (size_t at : find_all(good, kLocal)) set_u16(encrypted, at + 6, u16_at(good, at + 6) | 1);
  for (size_t at : find_all(good, kCentral)) set_u16(encrypted, at + 8, u16_at(good, at + 8) | 1);
  expect_contains(read_error(encrypted), {"entry 'w.npy' is encrypted"});
}

TEST(NpzTest, RandomCorruptionIsAnErrorOrAValidRead) {
  // Fuzz: flip, overwrite, insert or delete bytes of valid archives. Every read must either
  // succeed or throw kiln::Error; ASan (CI's sanitized pass) checks no byte past the buffer is
  // read.
  std::mt19937 rng(1234);
  const std::vector<std::string> seeds = {
      as_string(serialize_npz(sample_arrays())),
      as_string(serialize_npz(sample_arrays(), NpzCompression::kDeflated)),
      as_string(serialize_npz({{"big", arange(0, 3000, 1, TensorOptions{DType::Int32})}},
                              NpzCompression::kDeflated))};
  int errors = 0, reads = 0;
  for (int iter = 0; iter < 2000; ++iter) {
    std::string file = seeds[static_cast<size_t>(iter) % seeds.size()];
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits && !file.empty(); ++e) {
      const size_t at = rng() % file.size();
      switch (rng() % 4) {
        case 0:
          file[at] = static_cast<char>(file[at] ^ (1 << (rng() % 8)));
          break;
        case 1:
          file[at] = static_cast<char>(rng());
          break;
        case 2:
          file.insert(at, 1, static_cast<char>(rng()));
          break;
        default:
          file.erase(at, 1 + rng() % 8);
          break;
      }
    }
    try {
      const NamedArrays got = read_exact(file);
      for (const auto& [name, t] : got) EXPECT_GE(t.numel(), 0) << name;
      ++reads;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("'bad.npz"), std::string::npos) << e.what();
      ++errors;
    }
  }
  // Most mutations must be caught (CRC, sizes, structure); the rest land in bytes no reader checks.
  EXPECT_GT(errors, 1500);
  EXPECT_EQ(errors + reads, 2000);
}

}  // namespace
}  // namespace kiln::io
