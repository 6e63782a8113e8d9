// Small helpers shared by the config tests: run the loader with argv and an
// environment, search its messages, and write files into a private
// temporary directory that is removed afterwards.
#pragma once

#include <doctest/doctest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "config/loader.h"

namespace concert::config::testing {

inline const char* const kSecret = "concert-test-secret-0123456789abcdef";

inline LoadResult run(std::vector<std::string> args, Environment env = {}) {
  args.insert(args.begin(), "concert");
  return load(args, env);
}

inline bool contains(const std::vector<std::string>& lines, std::string_view needle) {
  for (const std::string& line : lines)
    if (line.find(needle) != std::string::npos) return true;
  return false;
}

inline std::string joined(const std::vector<std::string>& lines) {
  std::string out;
  for (const std::string& line : lines) out += line + "\n";
  return out;
}

inline const Config& okConfig(const LoadResult& r) {
  INFO(joined(r.errors));
  REQUIRE(r.ok());
  REQUIRE(r.config != nullptr);
  return *r.config;
}

class TempDir {
 public:
  TempDir() {
    char pattern[] = "/tmp/concert-config-test-XXXXXX";
    const char* made = mkdtemp(pattern);
    REQUIRE(made != nullptr);
    path_ = made;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  std::string write(const std::string& name, const std::string& content) const {
    std::string file = path_ + "/" + name;
    std::ofstream(file, std::ios::binary) << content;
    return file;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace concert::config::testing
