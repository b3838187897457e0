// A read-only memory-mapped file (RAII). Model weights are used in place from
// the mapping, so loading a model costs no copy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace kvlm {

class MappedFile {
 public:
  // Throws Error(kNotFound) if the file cannot be opened, kInvalidArgument if
  // it is not a regular file.
  static std::unique_ptr<MappedFile> open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile(std::string path, const uint8_t* data, size_t size)
      : path_(std::move(path)), data_(data), size_(size) {}
  std::string path_;
  const uint8_t* data_;  // nullptr for an empty file
  size_t size_;
};

// Reads a whole file into a string (bytes exactly). Throws Error(kNotFound).
std::string read_file_bytes(const std::string& path);

}  // namespace kvlm
