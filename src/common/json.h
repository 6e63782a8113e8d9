// A tiny JSON writer that produces the same bytes as Go's encoding/json (with
// SetEscapeHTML(false)) for the shapes Concert emits (flat objects of strings,
// integers, floats and booleans, keys in the order written), and a strict
// parser for the one JSON body Concert accepts: POST /_room/cap's {"cap": N}.
//
// Header-only so that src/common needs no extra translation unit. No state
// beyond the object being built; nothing here is shared between processes.
#pragma once

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

namespace concert::common {

// Go's encodeState.string without HTML escaping: the spec quotes bodies such as
// "must be >= 1" literally, and no Concert body is ever embedded in HTML.
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
  std::string str() const { return out_ + "}"; }

 private:
  void appendKey(std::string_view key) {
    out_ += out_.size() == 1 ? "" : ",";
    appendJsonString(out_, key);
    out_ += ':';
  }
  std::string out_ = "{";
};

// Result of parsing the /_room/cap body the way Go's json.Unmarshal into
// struct { Cap int32 `json:"cap"` } does: error text modelled on Go's, a
// missing or null "cap" is 0, unknown keys are ignored, the last duplicate
// wins, and the key matches case-insensitively.
struct CapBody {
  int32_t cap = 0;
  std::string error;  // non-empty: 400 {"error": error}
};

namespace json_detail {

class CapParser {
 public:
  explicit CapParser(std::string_view text) : s_(text) {}

  CapBody run() {
    skipSpace();
    if (pos_ >= s_.size()) return fail("unexpected end of JSON input");
    // Validate the whole document first, as Go does before decoding.
    size_t start = pos_;
    if (!skipValue()) return result_;
    skipSpace();
    if (pos_ < s_.size()) return fail(invalidChar(s_[pos_], "after top-level value"));
    pos_ = start;
    decodeTop();
    return result_;
  }

 private:
  CapBody fail(std::string message) {
    if (result_.error.empty()) result_.error = std::move(message);
    return result_;
  }
  static std::string quoteChar(char c) {
    if (c == '\'') return "'\\''";
    if (c == '"') return "'\"'";
    unsigned char u = static_cast<unsigned char>(c);
    if (u < 0x20 || u >= 0x7f) {
      char buf[16];
      std::snprintf(buf, sizeof buf, "'\\x%02x'", u);
      return buf;
    }
    return std::string("'") + c + "'";
  }
  static std::string invalidChar(char c, const char* context) {
    return "invalid character " + quoteChar(c) + " " + context;
  }
  void skipSpace() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) ++pos_;
  }
  bool eof() {
    fail("unexpected end of JSON input");
    return false;
  }

  bool skipValue() {
    skipSpace();
    if (pos_ >= s_.size()) return eof();
    char c = s_[pos_];
    if (c == '{') return skipObject();
    if (c == '[') return skipArray();
    if (c == '"') return skipString();
    if (c == '-' || (c >= '0' && c <= '9')) return skipNumber();
    if (c == 't') return skipLiteral("true");
    if (c == 'f') return skipLiteral("false");
    if (c == 'n') return skipLiteral("null");
    fail(invalidChar(c, "looking for beginning of value"));
    return false;
  }
  bool skipLiteral(std::string_view word) {
    for (size_t i = 0; i < word.size(); ++i, ++pos_) {
      if (pos_ >= s_.size()) return eof();
      if (s_[pos_] != word[i]) {
        fail(invalidChar(s_[pos_], "in literal ") + std::string(word) + " (expecting " + quoteChar(word[i]) + ")");
        return false;
      }
    }
    return true;
  }
  bool skipString() {
    ++pos_;  // opening quote
    while (pos_ < s_.size()) {
      unsigned char c = static_cast<unsigned char>(s_[pos_]);
      if (c == '"') {
        ++pos_;
        return true;
      }
      if (c < 0x20) {
        fail(invalidChar(static_cast<char>(c), "in string literal"));
        return false;
      }
      if (c == '\\') {
        ++pos_;
        if (pos_ >= s_.size()) return eof();
        char e = s_[pos_];
        if (e == 'u') {
          for (int i = 0; i < 4; ++i) {
            ++pos_;
            if (pos_ >= s_.size()) return eof();
            if (!std::isxdigit(static_cast<unsigned char>(s_[pos_]))) {
              fail(invalidChar(s_[pos_], "in \\u hexadecimal character escape"));
              return false;
            }
          }
        } else if (std::string_view("\"\\/bfnrt").find(e) == std::string_view::npos) {
          fail(invalidChar(e, "in string escape code"));
          return false;
        }
      }
      ++pos_;
    }
    return eof();
  }
  bool skipDigits() {
    size_t start = pos_;
    while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
    return pos_ > start;
  }
  bool skipNumber() {
    if (s_[pos_] == '-') {
      ++pos_;
      if (pos_ >= s_.size()) return eof();
      if (!(s_[pos_] >= '0' && s_[pos_] <= '9')) {
        fail(invalidChar(s_[pos_], "in numeric literal"));
        return false;
      }
    }
    if (s_[pos_] == '0') {
      ++pos_;
    } else {
      skipDigits();
    }
    if (pos_ < s_.size() && s_[pos_] == '.') {
      ++pos_;
      if (pos_ >= s_.size()) return eof();
      if (!skipDigits()) {
        fail(invalidChar(s_[pos_], "after decimal point in numeric literal"));
        return false;
      }
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
      if (pos_ >= s_.size()) return eof();
      if (!skipDigits()) {
        fail(invalidChar(s_[pos_], "in exponent of numeric literal"));
        return false;
      }
    }
    return true;
  }
  bool skipArray() {
    ++pos_;
    skipSpace();
    if (pos_ >= s_.size()) return eof();
    if (s_[pos_] == ']') {
      ++pos_;
      return true;
    }
    for (;;) {
      if (!skipValue()) return false;
      skipSpace();
      if (pos_ >= s_.size()) return eof();
      if (s_[pos_] == ']') {
        ++pos_;
        return true;
      }
      if (s_[pos_] != ',') {
        fail(invalidChar(s_[pos_], "after array element"));
        return false;
      }
      ++pos_;
    }
  }
  bool skipObject() {
    ++pos_;
    skipSpace();
    if (pos_ >= s_.size()) return eof();
    if (s_[pos_] == '}') {
      ++pos_;
      return true;
    }
    for (;;) {
      skipSpace();
      if (pos_ >= s_.size()) return eof();
      if (s_[pos_] != '"') {
        fail(invalidChar(s_[pos_], "looking for beginning of object key string"));
        return false;
      }
      if (!skipString()) return false;
      skipSpace();
      if (pos_ >= s_.size()) return eof();
      if (s_[pos_] != ':') {
        fail(invalidChar(s_[pos_], "after object key"));
        return false;
      }
      ++pos_;
      if (!skipValue()) return false;
      skipSpace();
      if (pos_ >= s_.size()) return eof();
      if (s_[pos_] == '}') {
        ++pos_;
        return true;
      }
      if (s_[pos_] != ',') {
        fail(invalidChar(s_[pos_], "after object key:value pair"));
        return false;
      }
      ++pos_;
    }
  }

  static const char* kindOf(char c) {
    switch (c) {
      case '{': return "object";
      case '[': return "array";
      case '"': return "string";
      case 't':
      case 'f': return "bool";
      default: return "number";
    }
  }

  // The document is known to be well-formed here.
  void decodeTop() {
    skipSpace();
    char c = s_[pos_];
    if (c == 'n') return;  // null leaves the struct untouched
    if (c != '{') {
      fail(std::string("json: cannot unmarshal ") + kindOf(c) + " into Go value of type main.capRequest");
      return;
    }
    ++pos_;
    for (;;) {
      skipSpace();
      if (s_[pos_] == '}') return;
      if (s_[pos_] == ',') {
        ++pos_;
        continue;
      }
      size_t key_start = pos_ + 1;
      skipString();
      std::string_view key = s_.substr(key_start, pos_ - 1 - key_start);
      skipSpace();
      ++pos_;  // ':'
      skipSpace();
      size_t value_start = pos_;
      skipValue();
      std::string_view value = s_.substr(value_start, pos_ - value_start);
      if (key.size() == 3 && (key[0] | 0x20) == 'c' && (key[1] | 0x20) == 'a' && (key[2] | 0x20) == 'p')
        decodeCap(value);
    }
  }

  void decodeCap(std::string_view value) {
    char c = value[0];
    if (c == 'n') return;
    if (!(c == '-' || (c >= '0' && c <= '9'))) {
      fail(std::string("json: cannot unmarshal ") + kindOf(c) + " into Go struct field capRequest.cap of type int32");
      return;
    }
    int64_t parsed = 0;
    auto res = std::from_chars(value.data(), value.data() + value.size(), parsed);
    if (res.ec != std::errc() || res.ptr != value.data() + value.size() ||
        parsed < std::numeric_limits<int32_t>::min() || parsed > std::numeric_limits<int32_t>::max()) {
      fail("json: cannot unmarshal number " + std::string(value) +
           " into Go struct field capRequest.cap of type int32");
      return;
    }
    result_.cap = static_cast<int32_t>(parsed);
  }

  std::string_view s_;
  size_t pos_ = 0;
  CapBody result_;
};

}  // namespace json_detail

inline CapBody parseCapBody(std::string_view body) {
  return json_detail::CapParser(body).run();
}

}  // namespace concert::common
