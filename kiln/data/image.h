#pragma once
#include <cstdint>
#include <span>
#include <string>

#include "kiln/core/tensor.h"

namespace kiln::data {

// The channels decode_image returns.
enum class ImageMode {
  Unchanged,  // 1 for grayscale files, 3 for color ones (see Note [image channels])
  Gray,       // always 1
  RGB,        // always 3
};

// Note [image channels]
// ~~~~~~~~~~~~~~~~~~~~~
// decode_image returns uint8 [C, H, W] with C = 1 or 3, never an alpha channel:
//   PNG gray (1, 2, 4, 8, 16 bits), gray + alpha          -> 1 (alpha dropped)
//   PNG RGB, RGBA, palette (with or without transparency)  -> 3 (palette expanded, alpha dropped)
//   JPEG grayscale                                         -> 1
//   JPEG YCbCr or RGB                                      -> 3 (libjpeg's conversion to RGB)
// Alpha is dropped, not composited, like PIL's convert("RGB"); gamma and color profiles are
// ignored. 16-bit PNG samples v become round(v * 255 / 65535) (libpng's png_set_scale_16).
// ImageMode::Gray turns RGB into PIL's ITU-R 601-2 luma, (19595 R + 38470 G + 7471 B + 2^15) >> 16,
// so it matches Image.convert("L"); ImageMode::RGB repeats a gray channel three times.
//
// A corrupt or truncated file is a kiln::Error naming it and, where the decoder knows it, the
// byte offset it had reached; libjpeg's recoverable-corruption warnings count as errors too
// (except extraneous bytes before a marker, which libjpeg skips exactly), so a truncated JPEG is
// rejected instead of being returned with a gray bottom. CMYK JPEGs are rejected. Images over
// 2^28 pixels are rejected before any pixel memory is allocated. Decoding is thread-safe.

// Decodes the PNG or JPEG file at `path` (recognized by its signature bytes, not its extension).
Tensor decode_image(const std::string& path, ImageMode mode = ImageMode::Unchanged,
                    const Loc& loc = Loc::current());

// The same over bytes in memory; `name_for_errors` stands for the file name in messages.
Tensor decode_image_bytes(std::span<const uint8_t> bytes, const std::string& name_for_errors,
                          ImageMode mode = ImageMode::Unchanged, const Loc& loc = Loc::current());

}  // namespace kiln::data
