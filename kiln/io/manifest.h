#pragma once
#include <fmt/format.h>

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <source_location>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kiln/core/error.h"

namespace kiln::io {

// Note [verified manifest]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// A directory of tensor files (a checkpoint, a saved model) is described by one JSON manifest:
//   {"format": "kiln.<kind>", "version": N, ...the kind's own fields...,
//    "files": {name: {"bytes": size, "crc32": CRC-32, "sha256": SHA-256 of the file}, ...},
//    "crc32": CRC-32 of the compact dump of everything else}
// The compact dump is nlohmann's dump() of the object without "crc32"; its keys are sorted, so
// the checksum does not depend on the order a writer built the object in. A reader verifies
// the manifest whole before it uses any field: size cap, nesting depth (nlohmann's dump and
// comparisons recurse, so a corrupt file of a million '[' is refused up front), JSON syntax
// (errors give the byte offset), format, version, checksum; and each listed file's size and
// SHA-256 (Note [content hash] in kiln/io/sha256.h) before it parses that file. A record written
// before kiln recorded hashes has size and CRC-32 only; it is still read, and checked by its
// CRC-32. So nothing is used that is not the very data the writer
// wrote, loading runs no code, and a corrupt, truncated, hand-edited or mismatched file is a
// kiln::Error naming the file and the field or offset. Hand-editing a manifest breaks its
// checksum on purpose.

// Which manifests a reader accepts, and the limits it reads them under.
struct ManifestFormat {
  std::string format;   // "kiln.checkpoint"
  int64_t version = 1;  // the one version this build writes and reads
  std::string kind;     // "checkpoint": errors read "not a kiln checkpoint"
  // A manifest holds hyperparameters and user metadata, never tensors: a bigger file is corrupt
  // or not ours, and is refused before it is read into memory.
  uint64_t max_bytes = uint64_t{256} << 20;
  size_t max_depth = 512;
};

// One entry of "files".
struct FileRecord {
  std::string name;
  uint64_t bytes = 0;
  uint32_t crc32 = 0;
  std::string sha256;  // 64 hex digits; empty in a record written before kiln recorded hashes
};

// A manifest that has been read and verified; its accessors check each field as it is read.
class Manifest {
 public:
  // Reads `path` and verifies it (Note [verified manifest]).
  static Manifest read(const std::string& path, const ManifestFormat& format, std::string_view op,
                       const std::source_location& loc = std::source_location::current());

  const std::string& path() const { return path_; }
  // The manifest without its "crc32".
  const nlohmann::json& json() const { return json_; }

  // Throws "[op] '<path>': <message>".
  template <class... Args>
  [[noreturn]] void error(fmt::format_string<Args...> f, Args&&... args) const {
    fail(op_, loc_, "'{}': {}", path_, fmt::format(f, std::forward<Args>(args)...));
  }
  // object[key]; `where` names the object in the error ("the checkpoint", "\"rng\"").
  const nlohmann::json& field(const nlohmann::json& object, const char* key,
                              const char* where) const;
  // An integer field in [0, max].
  uint64_t unsigned_field(const nlohmann::json& object, const char* key, const char* where,
                          uint64_t max = UINT64_MAX) const;
  // The record of `name` under "files".
  FileRecord file_record(const std::string& name) const;
  // Reads dir/<record.name> whole and checks that it is the very file the record describes
  // (size, then SHA-256, or CRC-32 where the record has no hash); parsing it is the caller's part.
  std::vector<uint8_t> read_file(const std::string& dir, const FileRecord& record) const;

 private:
  Manifest(std::string path, std::string kind, std::string_view op, const std::source_location& loc)
      : path_(std::move(path)), kind_(std::move(kind)), op_(op), loc_(loc) {}

  std::string path_;
  std::string kind_;
  std::string op_;
  std::source_location loc_;
  nlohmann::json json_;
};

// The deepest nesting of arrays and objects in JSON text, counted without parsing it: nlohmann's
// parser and dump recurse, so a reader checks this first (a file of a million '[' is refused
// instead of overflowing the stack).
size_t json_nesting_depth(std::span<const uint8_t> text);

// The "files" entry of a file holding `bytes`: {"bytes": size, "crc32": .., "sha256": ..}.
nlohmann::json file_record_json(std::span<const uint8_t> bytes);

// The text of a manifest: `content` with the format's "format" and "version" and the "crc32"
// of it all added, pretty-printed. A string that is not valid UTF-8 is an error naming
// `target` (the directory the manifest describes).
std::string seal_manifest(nlohmann::json content, const ManifestFormat& format,
                          const std::string& target, std::string_view op,
                          const std::source_location& loc = std::source_location::current());

}  // namespace kiln::io
