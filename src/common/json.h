// A tiny JSON writer that produces the same bytes as Go's encoding/json (with
// SetEscapeHTML(false)) for the shapes Concert emits (flat objects of strings,
// integers, floats, booleans and null, keys in the order written). Reading the one
// JSON body Concert accepts (POST /_room/cap) is admission/cap_body.h's job.
//
// Header-only so that src/common needs no extra translation unit. No state
// beyond the object being built; nothing here is shared between processes.
#pragma once

#include <charconv>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace concert::common {

// Go's encodeState.string without HTML escaping: the original writes bodies
// such as "must be >= 1" literally, and no Concert body is ever embedded in HTML.
inline void appendJsonString(std::string& out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  out += '"';
  for (size_t i = 0; i < s.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    switch (c) {
      case '"': out += "\\\""; continue;
      case '\\': out += "\\\\"; continue;
      case '\n': out += "\\n"; continue;
      case '\r': out += "\\r"; continue;
      case '\t': out += "\\t"; continue;
      default: break;
    }
    if (c < 0x20) {
      out += "\\u00";
      out += kHex[c >> 4];
      out += kHex[c & 15];
      continue;
    }
    // U+2028 / U+2029 (E2 80 A8 / E2 80 A9) break JavaScript string literals.
    if (c == 0xE2 && i + 2 < s.size() && static_cast<unsigned char>(s[i + 1]) == 0x80 &&
        (static_cast<unsigned char>(s[i + 2]) == 0xA8 || static_cast<unsigned char>(s[i + 2]) == 0xA9)) {
      out += static_cast<unsigned char>(s[i + 2]) == 0xA8 ? "\\u2028" : "\\u2029";
      i += 2;
      continue;
    }
    out += static_cast<char>(c);
  }
  out += '"';
}

// Go's float64 encoding: shortest round-trip digits, plain notation unless
// the magnitude is below 1e-6 or at least 1e21, exponent without padding.
inline void appendJsonFloat(std::string& out, double v) {
  if (!std::isfinite(v)) v = 0;  // Go refuses NaN/Inf; a stats field must stay valid JSON
  char buf[64];
  double a = std::fabs(v);
  bool sci = a != 0 && (a < 1e-6 || a >= 1e21);
  auto res = std::to_chars(buf, buf + sizeof buf, v, sci ? std::chars_format::scientific : std::chars_format::fixed);
  std::string text(buf, res.ptr);
  // Go shortens a two-digit negative exponent: "1e-07" -> "1e-7".
  size_t n = text.size();
  if (sci && n >= 4 && text[n - 4] == 'e' && text[n - 3] == '-' && text[n - 2] == '0') text.erase(n - 2, 1);
  out += text;
}

class JsonObject {
 public:
  JsonObject& add(std::string_view key, std::string_view value) {
    appendKey(key);
    appendJsonString(out_, value);
    return *this;
  }
  JsonObject& add(std::string_view key, const char* value) { return add(key, std::string_view(value)); }
  JsonObject& add(std::string_view key, bool value) {
    appendKey(key);
    out_ += value ? "true" : "false";
    return *this;
  }
  JsonObject& add(std::string_view key, int64_t value) {
    appendKey(key);
    out_ += std::to_string(value);
    return *this;
  }
  JsonObject& add(std::string_view key, int value) { return add(key, static_cast<int64_t>(value)); }
  JsonObject& add(std::string_view key, uint64_t value) {
    appendKey(key);
    out_ += std::to_string(value);
    return *this;
  }
  JsonObject& add(std::string_view key, uint32_t value) { return add(key, static_cast<uint64_t>(value)); }
  JsonObject& add(std::string_view key, double value) {
    appendKey(key);
    appendJsonFloat(out_, value);
    return *this;
  }
  JsonObject& addNull(std::string_view key) {
    appendKey(key);
    out_ += "null";
    return *this;
  }
  // The integer, or null (as Go marshals a nil *int64).
  JsonObject& add(std::string_view key, std::optional<int64_t> value) {
    return value ? add(key, *value) : addNull(key);
  }
  std::string str() const { return out_ + "}"; }

 private:
  void appendKey(std::string_view key) {
    out_ += out_.size() == 1 ? "" : ",";
    appendJsonString(out_, key);
    out_ += ':';
  }
  std::string out_ = "{";
};

}  // namespace concert::common
