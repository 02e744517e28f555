#include "kiln/data/image.h"

// clang-format off
#include <csetjmp>
#include <cstdio>  // jpeglib.h needs FILE
#include <jpeglib.h>
#include <jerror.h>
#include <png.h>
// clang-format on

#include <fmt/ranges.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <memory>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/io/regular_file.h"

namespace kiln::data {
namespace {

// Note [setjmp]
// ~~~~~~~~~~~~~
// libpng and libjpeg report errors by calling a handler that must not return; the portable way
// out is longjmp. Throwing a C++ exception through their C frames instead is undefined, and
// longjmp over a C++ frame that owns an object with a destructor is undefined too. So each
// decoder is split in two plain functions that own nothing: run_*() sets the jump target and
// frees on failure, *_body() does the work. Everything they touch (library structs, the output
// buffer from malloc, the message) lives in a trivially destructible job struct owned by the C++
// caller, so nothing automatic in the setjmp function changes between setjmp and longjmp, and the
// C++ side only turns the job's outcome into a tensor or a kiln::Error after run_*() returned.

constexpr uint64_t kMaxPixels = uint64_t{1} << 28;

struct DecodeJob {
  const unsigned char* data;
  size_t size;
  size_t pos;             // PNG: bytes handed to libpng so far
  size_t error_offset;    // where decoding had got to when it failed
  unsigned char* pixels;  // [H, W, C] from malloc, owned by the job until taken
  uint32_t width;
  uint32_t height;
  uint32_t channels;
  char message[256];
};

void set_message(DecodeJob* job, const char* text) {
  std::snprintf(job->message, sizeof job->message, "%s", text);
}

// --- PNG -------------------------------------------------------------------------------------

struct PngJob {
  DecodeJob base;
  png_structp png;
  png_infop info;
  png_bytep* rows;
};

void png_on_error(png_structp png, png_const_charp message) {
  auto* job = static_cast<PngJob*>(png_get_error_ptr(png));
  set_message(&job->base, message);
  job->base.error_offset = job->base.pos;
  png_longjmp(png, 1);
}

// Ancillary-chunk problems (a bad CRC in tEXt, an unknown sRGB profile) do not affect pixels.
void png_on_warning(png_structp, png_const_charp) {}

void png_on_read(png_structp png, png_bytep out, size_t n) {
  auto* job = static_cast<PngJob*>(png_get_io_ptr(png));
  if (n > job->base.size - job->base.pos) {
    job->base.pos = job->base.size;
    png_error(png, "unexpected end of file (truncated)");
  }
  std::memcpy(out, job->base.data + job->base.pos, n);
  job->base.pos += n;
}

void png_body(PngJob* job) {
  png_structp png = job->png;
  png_infop info = job->info;
  png_set_read_fn(png, job, png_on_read);
  png_read_info(png, info);
  png_uint_32 width = png_get_image_width(png, info);
  png_uint_32 height = png_get_image_height(png, info);
  int color = png_get_color_type(png, info);
  int depth = png_get_bit_depth(png, info);
  if (uint64_t{width} * height > kMaxPixels) png_error(png, "image too large (over 2^28 pixels)");
  if (depth == 16) png_set_scale_16(png);
  if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (color == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  // A palette with transparency expands to RGBA; the alpha goes as for real alpha channels.
  if ((color & PNG_COLOR_MASK_ALPHA) || png_get_valid(png, info, PNG_INFO_tRNS))
    png_set_strip_alpha(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  png_byte channels = png_get_channels(png, info);
  size_t row_bytes = png_get_rowbytes(png, info);
  if ((channels != 1 && channels != 3) || row_bytes != size_t{width} * channels)
    png_error(png, "unexpected pixel layout after conversion (a kiln bug)");
  job->base.pixels = static_cast<unsigned char*>(std::malloc(row_bytes * height));
  job->rows = static_cast<png_bytep*>(std::malloc(sizeof(png_bytep) * height));
  if (!job->base.pixels || !job->rows) png_error(png, "out of memory");
  for (png_uint_32 y = 0; y < height; ++y) job->rows[y] = job->base.pixels + y * row_bytes;
  png_read_image(png, job->rows);
  // Reading to IEND checks the CRCs of the chunks after the image and catches truncation there.
  png_read_end(png, nullptr);
  job->base.width = width;
  job->base.height = height;
  job->base.channels = channels;
}

bool run_png(PngJob* job) {
  job->png = png_create_read_struct(PNG_LIBPNG_VER_STRING, job, png_on_error, png_on_warning);
  if (job->png) job->info = png_create_info_struct(job->png);
  if (!job->png || !job->info) {
    png_destroy_read_struct(&job->png, nullptr, nullptr);
    set_message(&job->base, "out of memory");
    return false;
  }
  if (setjmp(png_jmpbuf(job->png))) {
    png_destroy_read_struct(&job->png, &job->info, nullptr);
    std::free(job->rows);
    job->rows = nullptr;
    std::free(job->base.pixels);
    job->base.pixels = nullptr;
    return false;
  }
  png_body(job);
  png_destroy_read_struct(&job->png, &job->info, nullptr);
  std::free(job->rows);
  job->rows = nullptr;
  return true;
}

// --- JPEG ------------------------------------------------------------------------------------

struct JpegErrorManager {
  jpeg_error_mgr pub;  // first, so libjpeg's pointer to it is a pointer to the whole
  std::jmp_buf jump;
  DecodeJob* job;
};

struct JpegJob {
  DecodeJob base;
  jpeg_decompress_struct cinfo;
  JpegErrorManager err;
};

[[noreturn]] void jpeg_fail(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<JpegErrorManager*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->job->message);
  if (cinfo->is_decompressor) {
    auto* src = reinterpret_cast<j_decompress_ptr>(cinfo)->src;
    if (src) err->job->error_offset = err->job->size - src->bytes_in_buffer;
  }
  std::longjmp(err->jump, 1);
}

void jpeg_on_message(j_common_ptr cinfo, int level) {
  // level < 0 is a warning about corrupt data that libjpeg would paper over.
  if (level < 0 && cinfo->err->msg_code != JWRN_EXTRANEOUS_DATA) jpeg_fail(cinfo);
}

void jpeg_on_output(j_common_ptr) {}

[[noreturn]] void jpeg_fail_with(JpegJob* job, const char* message) {
  set_message(&job->base, message);
  job->base.error_offset = job->base.size - job->cinfo.src->bytes_in_buffer;
  std::longjmp(job->err.jump, 1);
}

void jpeg_body(JpegJob* job) {
  j_decompress_ptr cinfo = &job->cinfo;
  jpeg_create_decompress(cinfo);
  jpeg_mem_src(cinfo, job->base.data, static_cast<unsigned long>(job->base.size));
  jpeg_read_header(cinfo, TRUE);
  if (cinfo->jpeg_color_space == JCS_GRAYSCALE)
    cinfo->out_color_space = JCS_GRAYSCALE;
  else if (cinfo->jpeg_color_space == JCS_YCbCr || cinfo->jpeg_color_space == JCS_RGB)
    cinfo->out_color_space = JCS_RGB;
  else
    jpeg_fail_with(job, "unsupported JPEG color space (CMYK or YCCK)");
  if (uint64_t{cinfo->image_width} * cinfo->image_height > kMaxPixels)
    jpeg_fail_with(job, "image too large (over 2^28 pixels)");
  jpeg_start_decompress(cinfo);
  size_t stride = size_t{cinfo->output_width} * cinfo->output_components;
  job->base.pixels = static_cast<unsigned char*>(std::malloc(stride * cinfo->output_height));
  if (!job->base.pixels) jpeg_fail_with(job, "out of memory");
  while (cinfo->output_scanline < cinfo->output_height) {
    JSAMPROW row = job->base.pixels + size_t{cinfo->output_scanline} * stride;
    jpeg_read_scanlines(cinfo, &row, 1);
  }
  jpeg_finish_decompress(cinfo);
  job->base.width = cinfo->output_width;
  job->base.height = cinfo->output_height;
  job->base.channels = static_cast<uint32_t>(cinfo->output_components);
}

bool run_jpeg(JpegJob* job) {
  job->cinfo.err = jpeg_std_error(&job->err.pub);
  job->err.pub.error_exit = jpeg_fail;
  job->err.pub.emit_message = jpeg_on_message;
  job->err.pub.output_message = jpeg_on_output;
  job->err.job = &job->base;
  if (setjmp(job->err.jump)) {
    jpeg_destroy_decompress(&job->cinfo);
    std::free(job->base.pixels);
    job->base.pixels = nullptr;
    return false;
  }
  jpeg_body(job);
  jpeg_destroy_decompress(&job->cinfo);
  return true;
}

// --- C++ side --------------------------------------------------------------------------------

struct Free {
  void operator()(unsigned char* p) const { std::free(p); }
};

// Interleaved [H, W, C] pixels to a [C', H, W] tensor with the channels `mode` asks for.
Tensor to_tensor(const DecodeJob& job, ImageMode mode) {
  int64_t h = job.height, w = job.width, c = job.channels;
  int64_t out_c = mode == ImageMode::Gray ? 1 : mode == ImageMode::RGB ? 3 : c;
  Tensor out = empty(Shape{out_c, h, w}, {DType::UInt8});
  uint8_t* dst = out.data<uint8_t>();
  const unsigned char* src = job.pixels;
  int64_t plane = h * w;
  for (int64_t i = 0; i < plane; ++i) {
    const unsigned char* px = src + i * c;
    if (out_c == c) {
      for (int64_t k = 0; k < c; ++k) dst[k * plane + i] = px[k];
    } else if (out_c == 3) {  // gray -> RGB
      dst[i] = dst[plane + i] = dst[2 * plane + i] = px[0];
    } else {  // RGB -> luma, as PIL
      dst[i] =
          static_cast<uint8_t>((px[0] * 19595u + px[1] * 38470u + px[2] * 7471u + 0x8000u) >> 16);
    }
  }
  return out;
}

bool starts_with(std::span<const uint8_t> bytes, std::initializer_list<uint8_t> prefix) {
  if (bytes.size() < prefix.size()) return false;
  return std::equal(prefix.begin(), prefix.end(), bytes.begin());
}

}  // namespace

Tensor decode_image_bytes(std::span<const uint8_t> bytes, const std::string& name, ImageMode mode,
                          const Loc& loc) {
  if (bytes.empty()) fail("decode_image", loc, "'{}' is empty, expected a PNG or JPEG image", name);
  bool png = starts_with(bytes, {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'});
  bool jpeg = starts_with(bytes, {0xFF, 0xD8, 0xFF});
  if (!png && !jpeg) {
    auto head = bytes.first(std::min<size_t>(bytes.size(), 8));
    fail("decode_image", loc,
         "'{}' is neither a PNG nor a JPEG file: it starts with bytes {:02x} at offset 0", name,
         fmt::join(head, " "));
  }
  // Value-initialized: null pointers and an all-zero libjpeg struct that jpeg_destroy accepts.
  auto png_job = png ? std::make_unique<PngJob>() : nullptr;
  auto jpeg_job = jpeg ? std::make_unique<JpegJob>() : nullptr;
  DecodeJob& job = png ? png_job->base : jpeg_job->base;
  job.data = bytes.data();
  job.size = bytes.size();
  bool ok = png ? run_png(png_job.get()) : run_jpeg(jpeg_job.get());
  std::unique_ptr<unsigned char, Free> pixels(job.pixels);
  if (!ok)
    fail("decode_image", loc, "corrupt or truncated {} file '{}' (near byte offset {} of {}): {}",
         png ? "PNG" : "JPEG", name, job.error_offset, job.size, job.message);
  return to_tensor(job, mode);
}

Tensor decode_image(const std::string& path, ImageMode mode, const Loc& loc) {
  std::vector<uint8_t> bytes = io::read_regular_file(path, "decode_image", loc);
  return decode_image_bytes(bytes, path, mode, loc);
}

}  // namespace kiln::data
