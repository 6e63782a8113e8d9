// Parsing with nlohmann-json's SAX interface; this file only translates its
// events and errors into what Go's encoding/json would have answered.
#include "admission/cap_body.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>
#include <utility>

namespace concert::admission {
namespace {

using Json = nlohmann::json;

std::string quoteChar(char c) {
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

// The true, false or null that was being read when `body` went wrong at
// `at`, and how many of its letters stand before `at` ({"", 0}: none).
std::pair<std::string_view, size_t> literalCutShort(std::string_view body, size_t at) {
  for (std::string_view word : {"true", "false", "null"})
    for (size_t n = std::min(word.size() - 1, at); n > 0; --n)
      if (body.substr(at - n, n) == word.substr(0, n)) return {word, n};
  return {};
}

// Go stops at the first byte that cannot continue the document and says what
// it was looking for there. nlohmann reports the last byte it read (1-based
// `position`, one past the end when the input ran out), the token it was
// reading, and in `what` the rule it was in and what it expected.
std::string syntaxError(std::string_view body, size_t position, const std::string& token, std::string_view what) {
  const auto says = [&](std::string_view text) { return what.find(text) != std::string_view::npos; };
  // After a value or an object key only punctuation may follow; inside an
  // object only a key string may start.
  const bool punctuation =
      says("; expected end of input") || says("; expected '}'") || says("; expected ']'") || says("; expected ':'");
  const bool key = !punctuation && says("while parsing object key");
  // A token that may stand here went wrong inside: Go reads into it too.
  const bool inner = !punctuation && !says(" - unexpected ") && (!key || says("invalid string"));
  if (position > body.size() && (inner || says("unexpected end of input"))) return "unexpected end of JSON input";
  const size_t read = std::min(position, body.size());
  const size_t last = read - 1;

  const auto [word, letters] =
      says("invalid literal") ? literalCutShort(body, last) : std::pair<std::string_view, size_t>{};
  if (inner) {
    const std::string invalid = "invalid character " + quoteChar(body[last]) + " ";
    if (!word.empty())
      return invalid + "in literal " + std::string(word) + " (expecting " + quoteChar(word[letters]) + ")";
    static constexpr std::pair<std::string_view, std::string_view> kInside[] = {
        {"after backslash", "in string escape code"},
        {"4 hex digits", "in \\u hexadecimal character escape"},
        {"must be escaped", "in string literal"},
        {"digit after '-'", "in numeric literal"},
        {"digit after '.'", "after decimal point in numeric literal"},
        {"after exponent", "in exponent of numeric literal"},
    };
    for (const auto& [marker, context] : kInside)
      if (says(marker)) return invalid + std::string(context);
    return invalid + (key ? "looking for beginning of object key string" : "looking for beginning of value");
  }

  // A token that may not stand here: Go stops at its first byte.
  size_t start = last - letters;
  if (says("invalid number") || says("unexpected number literal") || says("invalid string") ||
      says("unexpected string literal")) {
    // the token as read, except that a control character (only ever its
    // last byte) shows as "<U+0001>"
    const size_t length = token.size() - (static_cast<unsigned char>(body[last]) < 0x20 ? 7 : 0);
    start = length <= read ? read - length : last;
  }
  for (std::string_view w : {"true", "false", "null"})
    if (says("unexpected " + std::string(w) + " literal")) start = position - w.size();
  const std::string invalid = "invalid character " + quoteChar(body[start]) + " ";
  if (says("; expected end of input")) return invalid + "after top-level value";
  if (says("; expected ':'")) return invalid + "after object key";
  if (says("; expected '}'")) return invalid + "after object key:value pair";
  if (says("; expected ']'")) return invalid + "after array element";
  return invalid + (key ? "looking for beginning of object key string" : "looking for beginning of value");
}

bool isCapKey(std::string_view name) {
  static constexpr std::string_view kCap = "cap";
  if (name.size() != kCap.size()) return false;
  for (size_t i = 0; i < kCap.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(name[i])) != kCap[i]) return false;
  return true;
}

// Follows the document as it is parsed: the top-level value must be an
// object (or null), and each value of a top-level "cap" key an int32 (or null).
class CapReader final : public nlohmann::json_sax<Json> {
 public:
  // nlohmann refuses a number beyond a double's range, which Go reads as a number.
  static constexpr int kNumberOverflow = 406;

  explicit CapReader(std::string_view body) : body_(body) {}

  CapBody result() && {
    if (!syntax_error_.empty()) return CapBody{0, std::move(syntax_error_)};  // Go checks syntax first
    if (!type_error_.empty()) return CapBody{0, std::move(type_error_)};
    return CapBody{cap_, {}};
  }

  bool null() override { return true; }  // leaves the value as it was
  bool boolean(bool) override { return mismatch("bool"); }
  bool number_integer(number_integer_t v) override { return number(v); }
  bool number_unsigned(number_unsigned_t v) override {
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return mismatch("number", std::to_string(v));
    return number(static_cast<int64_t>(v));
  }
  bool number_float(number_float_t, const string_t& text) override { return mismatch("number", text); }
  bool string(string_t&) override { return mismatch("string"); }
  bool binary(binary_t&) override { return true; }  // not produced by JSON text
  bool start_object(std::size_t) override {
    if (depth_ > 0) mismatch("object");
    ++depth_;
    return true;
  }
  bool start_array(std::size_t) override {
    mismatch("array");
    ++depth_;
    return true;
  }
  bool end_object() override {
    --depth_;
    return true;
  }
  bool end_array() override {
    --depth_;
    return true;
  }
  bool key(string_t& name) override {
    if (depth_ == 1) in_cap_ = isCapKey(name);
    return true;
  }
  bool parse_error(std::size_t position, const std::string& token, const nlohmann::detail::exception& e) override {
    if (e.id != kNumberOverflow) {
      syntax_error_ = syntaxError(body_, position, token, e.what());
    } else if (depth_ == 0 || capValue()) {
      mismatch("number", token);
    } else if (type_error_.empty()) {
      // Go would read past it; nlohmann stops here, so nothing later is known.
      type_error_ = "json: number " + token + " is out of range";
    }
    return false;
  }

 private:
  bool capValue() const { return depth_ == 1 && in_cap_; }
  bool number(int64_t v) {
    if (depth_ == 0) return mismatch("number");
    if (!capValue()) return true;
    if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max())
      return mismatch("number", std::to_string(v));
    cap_ = static_cast<int32_t>(v);
    return true;
  }
  // Go keeps decoding after a type error and reports the first one. Only a
  // number names its literal, and only for the field.
  bool mismatch(std::string_view kind, std::string_view literal = {}) {
    if (!type_error_.empty()) return true;
    std::string what = "json: cannot unmarshal " + std::string(kind);
    if (depth_ == 0) {
      type_error_ = what + " into Go value of type main.capRequest";
    } else if (capValue()) {
      if (!literal.empty()) what.append(" ").append(literal);
      type_error_ = what + " into Go struct field capRequest.cap of type int32";
    }
    return true;
  }

  std::string_view body_;
  int depth_ = 0;
  bool in_cap_ = false;
  int32_t cap_ = 0;
  std::string syntax_error_;
  std::string type_error_;
};

}  // namespace

CapBody parseCapBody(std::string_view body) {
  // nlohmann skips a UTF-8 byte order mark; Go's decoder does not.
  if (body.substr(0, 3) == "\xEF\xBB\xBF")
    return CapBody{0, "invalid character '\\xef' looking for beginning of value"};
  CapReader reader(body);
  Json::sax_parse(body.begin(), body.end(), &reader);
  return std::move(reader).result();
}

}  // namespace concert::admission
