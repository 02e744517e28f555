// Fixtures for the image tests, made at run time: PNG files written byte by byte with zlib (so
// the expected pixels are known independently of libpng), and files from Debian's PIL.
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "tests/support/temp_dir.h"

namespace kiln::data::testing {

using test::TempDir;

inline void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
}

inline std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

struct PngSpec {
  uint32_t width = 0;
  uint32_t height = 0;
  int color_type = 0;  // 0 gray, 2 RGB, 3 palette, 4 gray+alpha, 6 RGBA
  int bit_depth = 8;
  std::vector<int> samples;           // row-major, channels interleaved, each < 2^bit_depth
  std::vector<uint8_t> palette;       // PLTE: r, g, b per entry
  std::vector<uint8_t> transparency;  // tRNS
};

inline int png_channels(int color_type) {
  switch (color_type) {
    case 2:
      return 3;
    case 4:
      return 2;
    case 6:
      return 4;
    default:
      return 1;
  }
}

inline void put_be32(std::vector<uint8_t>& out, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<uint8_t>(v >> s));
}

inline void put_chunk(std::vector<uint8_t>& out, const char* type,
                      const std::vector<uint8_t>& data) {
  put_be32(out, static_cast<uint32_t>(data.size()));
  std::vector<uint8_t> body(type, type + 4);
  body.insert(body.end(), data.begin(), data.end());
  out.insert(out.end(), body.begin(), body.end());
  put_be32(out, static_cast<uint32_t>(crc32(0, body.data(), static_cast<uInt>(body.size()))));
}

// Appends the filtered (filter type 0) scanlines of the pixels at columns x0, x0 + dx, ... of rows
// y0, y0 + dy, ... (the whole image, or one Adam7 pass).
inline void append_scanlines(const PngSpec& s, uint32_t x0, uint32_t y0, uint32_t dx, uint32_t dy,
                             std::vector<uint8_t>& raw) {
  int channels = png_channels(s.color_type);
  for (uint32_t y = y0; y < s.height; y += dy) {
    if (x0 >= s.width) return;  // an empty pass has no rows at all
    raw.push_back(0);
    int acc = 0, bits = 0;
    for (uint32_t x = x0; x < s.width; x += dx) {
      for (int c = 0; c < channels; ++c) {
        int v = s.samples[(y * s.width + x) * channels + c];
        if (s.bit_depth == 16) {
          raw.push_back(static_cast<uint8_t>(v >> 8));
          raw.push_back(static_cast<uint8_t>(v));
          continue;
        }
        acc = (acc << s.bit_depth) | v;
        bits += s.bit_depth;
        if (bits == 8) {
          raw.push_back(static_cast<uint8_t>(acc));
          acc = bits = 0;
        }
      }
    }
    if (bits > 0) raw.push_back(static_cast<uint8_t>(acc << (8 - bits)));
  }
}

// A valid PNG, Adam7-interlaced when `interlaced`.
inline std::vector<uint8_t> make_png(const PngSpec& s, bool interlaced = false) {
  std::vector<uint8_t> raw;
  if (interlaced) {
    const uint32_t passes[7][4] = {{0, 0, 8, 8}, {4, 0, 8, 8}, {0, 4, 4, 8}, {2, 0, 4, 4},
                                   {0, 2, 2, 4}, {1, 0, 2, 2}, {0, 1, 1, 2}};
    for (const auto& p : passes) append_scanlines(s, p[0], p[1], p[2], p[3], raw);
  } else {
    append_scanlines(s, 0, 0, 1, 1, raw);
  }
  uLongf packed_size = compressBound(static_cast<uLong>(raw.size()));
  std::vector<uint8_t> packed(packed_size);
  compress(packed.data(), &packed_size, raw.data(), static_cast<uLong>(raw.size()));
  packed.resize(packed_size);

  std::vector<uint8_t> out = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  std::vector<uint8_t> ihdr;
  put_be32(ihdr, s.width);
  put_be32(ihdr, s.height);
  ihdr.insert(ihdr.end(), {static_cast<uint8_t>(s.bit_depth), static_cast<uint8_t>(s.color_type), 0,
                           0, static_cast<uint8_t>(interlaced ? 1 : 0)});
  put_chunk(out, "IHDR", ihdr);
  if (!s.palette.empty()) put_chunk(out, "PLTE", s.palette);
  if (!s.transparency.empty()) put_chunk(out, "tRNS", s.transparency);
  put_chunk(out, "IDAT", packed);
  put_chunk(out, "IEND", {});
  return out;
}

inline std::vector<uint8_t> make_png(uint32_t width, uint32_t height, int color_type, int bit_depth,
                                     std::vector<int> samples, std::vector<uint8_t> palette = {},
                                     std::vector<uint8_t> transparency = {}) {
  PngSpec spec;
  spec.width = width;
  spec.height = height;
  spec.color_type = color_type;
  spec.bit_depth = bit_depth;
  spec.samples = std::move(samples);
  spec.palette = std::move(palette);
  spec.transparency = std::move(transparency);
  return make_png(spec);
}

inline bool have_pil() {
  return std::system("/usr/bin/python3 -c 'import PIL.Image' >/dev/null 2>&1") == 0;
}

// Runs `script` with Debian's python (which has PIL), argv[1] = dir; true on success.
inline bool run_python(const TempDir& dir, const std::string& script) {
  std::string path = dir / "fixture.py";
  std::ofstream(path) << script;
  std::string command = "/usr/bin/python3 '" + path + "' '" + dir.path().string() + "'";
  return std::system(command.c_str()) == 0;
}

}  // namespace kiln::data::testing
