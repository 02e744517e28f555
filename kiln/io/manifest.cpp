#include "kiln/io/manifest.h"

#include <algorithm>
#include <filesystem>

#include "kiln/io/crc32.h"
#include "kiln/io/regular_file.h"
#include "kiln/io/sha256.h"

namespace kiln::io {

using Json = nlohmann::json;

size_t json_nesting_depth(std::span<const uint8_t> text) {
  size_t depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (uint8_t c : text) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

Manifest Manifest::read(const std::string& path, const ManifestFormat& format, std::string_view op,
                        const std::source_location& loc) {
  Manifest m(path, format.kind, op, loc);
  const std::vector<uint8_t> bytes = read_regular_file(path, op, loc, format.max_bytes);
  if (size_t depth = json_nesting_depth(bytes); depth > format.max_depth)
    m.error("nested {} levels deep, more than the {} levels allowed", depth, format.max_depth);
  Json j;
  try {
    j = Json::parse(bytes.begin(), bytes.end());
  } catch (const Json::parse_error& e) {
    m.error("not valid JSON at byte offset {} ({})", e.byte, e.what());
  }
  if (!j.is_object()) m.error("expected a JSON object, but got {}", j.type_name());
  if (!j.contains("format") || j["format"] != format.format)
    m.error("expected \"format\": \"{}\", but got {} (not a kiln {})", format.format,
            j.contains("format") ? j["format"].dump() : "none", format.kind);
  const std::string where = "the " + format.kind;
  const Json& version = m.field(j, "version", where.c_str());
  if (!version.is_number_integer() || version.get<int64_t>() != format.version)
    m.error("expected format version {}, but got {} (written by another version of kiln)",
            format.version, version.dump());

  // The checksum covers the compact dump of everything else, so any edit or bit flip of a value
  // is caught even where the JSON still parses.
  const auto recorded =
      static_cast<uint32_t>(m.unsigned_field(j, "crc32", where.c_str(), UINT32_MAX));
  j.erase("crc32");
  const uint32_t actual = crc32(j.dump());
  if (actual != recorded)
    m.error("the content's CRC-32 is 0x{:08x}, but the file records 0x{:08x} (corrupt or edited)",
            actual, recorded);
  m.json_ = std::move(j);
  return m;
}

const Json& Manifest::field(const Json& object, const char* key, const char* where) const {
  if (!object.is_object() || !object.contains(key))
    error("expected {} to have the field \"{}\", but it has none", where, key);
  return object[key];
}

uint64_t Manifest::unsigned_field(const Json& object, const char* key, const char* where,
                                  uint64_t max) const {
  const Json& v = field(object, key, where);
  if (!v.is_number_unsigned() || v.get<uint64_t>() > max)
    error("expected \"{}\" of {} to be an integer in [0, {}], but got {}", key, where, max,
          v.dump());
  return v.get<uint64_t>();
}

FileRecord Manifest::file_record(const std::string& name) const {
  const std::string where = "the " + kind_;
  const Json& files = field(json_, "files", where.c_str());
  const Json& r = field(files, name.c_str(), "\"files\"");
  FileRecord rec{name, unsigned_field(r, "bytes", name.c_str()),
                 static_cast<uint32_t>(unsigned_field(r, "crc32", name.c_str(), UINT32_MAX)), ""};
  if (r.contains("sha256")) {
    const Json& h = r["sha256"];
    if (!h.is_string() || !is_sha256_hex(h.get<std::string>()))
      error("expected \"sha256\" of {} to be 64 lowercase hex digits, but got {}", name, h.dump());
    rec.sha256 = h.get<std::string>();
  }
  return rec;
}

std::vector<uint8_t> Manifest::read_file(const std::string& dir, const FileRecord& record) const {
  const std::string path = dir + "/" + record.name;
  const std::string manifest = std::filesystem::path(path_).filename().string();
  std::vector<uint8_t> bytes = read_regular_file(path, op_, loc_);
  if (bytes.size() != record.bytes)
    fail(op_, loc_, "'{}' is {} bytes, but {} records {} (truncated, or from another {})", path,
         bytes.size(), manifest, record.bytes, kind_);
  if (!record.sha256.empty()) {
    const std::string hash = sha256_hex(bytes);
    if (hash != record.sha256)
      fail(op_, loc_,
           "'{}' has SHA-256 {}, but {} records {} (corrupt, edited, or from another {})", path,
           hash, manifest, record.sha256, kind_);
    return bytes;
  }
  const uint32_t crc = crc32(bytes);
  if (crc != record.crc32)
    fail(op_, loc_,
         "'{}' has CRC-32 0x{:08x}, but {} records 0x{:08x} (corrupt, or from another {})", path,
         crc, manifest, record.crc32, kind_);
  return bytes;
}

Json file_record_json(std::span<const uint8_t> bytes) {
  return {{"bytes", bytes.size()}, {"crc32", crc32(bytes)}, {"sha256", sha256_hex(bytes)}};
}

std::string seal_manifest(Json content, const ManifestFormat& format, const std::string& target,
                          std::string_view op, const std::source_location& loc) {
  content["format"] = format.format;
  content["version"] = format.version;
  content.erase("crc32");
  try {
    content["crc32"] = crc32(content.dump());
    return content.dump(2) + "\n";
  } catch (const Json::exception& e) {
    fail(op, loc, "cannot encode the {}'s JSON for '{}' (is the metadata valid UTF-8?): {}",
         format.kind, target, e.what());
  }
}

}  // namespace kiln::io
