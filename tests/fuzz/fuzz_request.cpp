// Fuzz target: client request heads and body framing (MessageParser, Request).
//
// The input is a byte stream as a client would send it on one connection:
// possibly several pipelined requests. It is parsed twice, once in a single
// feed and once in pseudo-random splits derived from the input, the way the
// data path does it (feedHead until HeadDone, then feedChunked for a chunked
// body or a byte count for Content-Length, reset() before the next request).
// Properties:
//   * both runs agree on every accepted head, every body and every rejection
//     (split-invariance: what the origin would be sent cannot depend on TCP
//     segmentation);
//   * an accepted head obeys the framing rules: never both Content-Length and
//     Transfer-Encoding, Transfer-Encoding only as exactly "chunked", a plain
//     decimal Content-Length, one Host on HTTP/1.1, no CR/LF/NUL in values,
//     token header names, URI <= 8 KiB, header section <= 32 KiB, origin-form
//     path, HTTP/1.0 or 1.1, never CONNECT;
//   * the path handed on is normalised: raw_path starts with '/', has no
//     dot-segment (literal or %2e) and normalises to itself; the decoded path
//     has no dot-segment either; the target's own path, normalised, is
//     raw_path (the origin is sent what the router matched);
//   * a rejection carries one of the statuses the data path answers with.
#include <string>

#include "fuzz_target.h"
#include "http/parser.h"
#include "http/path.h"

namespace concert::fuzz {
namespace {

using http::Header;
using http::MessageParser;
using http::ParseStatus;
using http::Request;

constexpr int kMaxMessages = 8;

void appendBody(void* arg, const char* data, size_t len) {
  static_cast<std::string*>(arg)->append(data, len);
}

bool isTokenChar(unsigned char c) {
  if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return true;
  return std::string_view("!#$%&'*+-.^_`|~").find(static_cast<char>(c)) != std::string_view::npos;
}

std::string_view trimmed(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

void checkNormalisedPath(const Request& r) {
  FUZZ_ASSERT(!http::hasDotSegment(r.raw_path));
  FUZZ_ASSERT(!http::hasDotSegment(r.path, false));
  std::string scratch;
  FUZZ_ASSERT(http::normalisePath(r.raw_path, scratch) == http::PathNormalisation::Unchanged);
  std::string decoded;
  FUZZ_ASSERT(http::percentDecodePath(r.raw_path, decoded) && decoded == r.path);
  // The path as sent (origin-form or the path part of absolute-form).
  std::string_view sent = r.target;
  if (!sent.empty() && sent.front() != '/') {
    size_t scheme = sent.find("://");
    FUZZ_ASSERT(scheme != std::string_view::npos);
    sent.remove_prefix(scheme + 3);
    size_t slash = sent.find('/');
    FUZZ_ASSERT(slash != std::string_view::npos);
    sent.remove_prefix(slash);
  }
  sent = sent.substr(0, sent.find('?'));
  http::PathNormalisation n = http::normalisePath(sent, scratch);
  FUZZ_ASSERT(n == http::PathNormalisation::Unchanged || n == http::PathNormalisation::Normalised);
  FUZZ_ASSERT((n == http::PathNormalisation::Unchanged ? std::string(sent) : scratch) == r.raw_path);
}

void checkAcceptedHead(const Request& r) {
  FUZZ_ASSERT(r.http_major == 1 && (r.http_minor == 0 || r.http_minor == 1));
  FUZZ_ASSERT(r.method != "CONNECT");
  FUZZ_ASSERT(!r.method.empty());
  FUZZ_ASSERT(r.target.size() <= http::kMaxUriBytes);
  FUZZ_ASSERT(!r.raw_path.empty() && r.raw_path.front() == '/');
  FUZZ_ASSERT(!r.path.empty() && r.path.front() == '/');
  for (unsigned char c : r.raw_path) FUZZ_ASSERT(c > 0x20 && c != 0x7f && c != '#' && c != '?');
  for (unsigned char c : r.query) FUZZ_ASSERT(c > 0x20 && c != 0x7f && c != '#');
  checkNormalisedPath(r);

  size_t header_bytes = 0;
  int hosts = 0, content_lengths = 0;
  bool transfer_encoding = false;
  for (const Header& h : r.headers) {
    header_bytes += h.name.size() + h.value.size() + 4;
    FUZZ_ASSERT(!h.name.empty());
    for (unsigned char c : h.name) FUZZ_ASSERT(isTokenChar(c));
    for (unsigned char c : h.value) FUZZ_ASSERT(c != '\r' && c != '\n' && c != 0);
    if (http::equalsIgnoreCase(h.name, "Host")) ++hosts;
    if (http::equalsIgnoreCase(h.name, "Transfer-Encoding")) transfer_encoding = true;
    if (http::equalsIgnoreCase(h.name, "Content-Length")) {
      ++content_lengths;
      std::string_view v = trimmed(h.value);
      FUZZ_ASSERT(!v.empty());
      uint64_t n = 0;
      for (char c : v) {
        FUZZ_ASSERT(c >= '0' && c <= '9');
        FUZZ_ASSERT(n <= (UINT64_MAX - 9) / 10);
        n = n * 10 + static_cast<uint64_t>(c - '0');
      }
      FUZZ_ASSERT(r.content_length >= 0 && static_cast<uint64_t>(r.content_length) == n);
    }
  }
  FUZZ_ASSERT(header_bytes <= http::kMaxRequestHeaderBytes);
  FUZZ_ASSERT(hosts <= 1);
  if (r.http_minor == 1) FUZZ_ASSERT(hosts == 1);
  FUZZ_ASSERT(content_lengths <= 1);
  FUZZ_ASSERT(!(transfer_encoding && content_lengths));
  FUZZ_ASSERT(transfer_encoding == r.chunked);
  if (r.chunked) {
    FUZZ_ASSERT(r.http_minor == 1);
    FUZZ_ASSERT(http::equalsIgnoreCase(trimmed(http::joinHeader(r.headers, "Transfer-Encoding")), "chunked"));
    FUZZ_ASSERT(r.content_length == -1);
  }
  if (content_lengths == 0) FUZZ_ASSERT(r.content_length == -1);
}

std::string describe(const Request& r) {
  std::string out = r.method + " " + r.target + " " + r.path + " " + std::to_string(r.http_minor) +
                    " cl=" + std::to_string(r.content_length) + (r.chunked ? " chunked" : "") +
                    (r.keep_alive ? " keep-alive" : "") + (r.upgrade ? " upgrade" : "");
  for (const Header& h : r.headers) out += "|" + h.name + ":" + h.value;
  return out + "\n";
}

// Parses `input` as the data path would; returns a trace of what it decided.
std::string run(std::string_view input, Splitter* splitter) {
  MessageParser parser(MessageParser::Kind::Request);
  std::string trace;
  size_t pos = 0;
  auto piece = [&](size_t remaining) { return splitter ? splitter->next(remaining) : remaining; };
  for (int message = 0; message < kMaxMessages && pos < input.size(); ++message) {
    parser.reset();
    FUZZ_ASSERT(parser.idle());
    ParseStatus status = ParseStatus::NeedMore;
    while (pos < input.size()) {
      size_t len = piece(input.size() - pos), used = 0;
      status = parser.feedHead(input.data() + pos, len, &used);
      FUZZ_ASSERT(used <= len);
      pos += used;
      if (status != ParseStatus::NeedMore) break;
      FUZZ_ASSERT(used == len);
    }
    if (status == ParseStatus::NeedMore) return trace + "incomplete head\n";
    if (status == ParseStatus::Error) {
      int e = parser.errorStatus();
      FUZZ_ASSERT(e == 400 || e == 405 || e == 414 || e == 431 || e == 505);
      return trace + "rejected\n";
    }
    FUZZ_ASSERT(status == ParseStatus::HeadDone);
    const Request& r = parser.request();
    checkAcceptedHead(r);
    trace += describe(r);
    if (r.upgrade) return trace + "tunnel\n";
    if (r.chunked) {
      std::string body;
      status = ParseStatus::NeedMore;
      while (pos < input.size()) {
        size_t len = piece(input.size() - pos), used = 0;
        status = parser.feedChunked(input.data() + pos, len, &used, &appendBody, &body);
        FUZZ_ASSERT(used <= len);
        pos += used;
        if (status != ParseStatus::NeedMore) break;
        FUZZ_ASSERT(used == len);
      }
      if (status == ParseStatus::NeedMore) return trace + "incomplete chunked body\n";
      if (status == ParseStatus::Error) return trace + "bad chunked body\n";
      FUZZ_ASSERT(status == ParseStatus::BodyDone);
      trace += "chunked body " + std::to_string(body.size()) + ":" + body + "\n";
    } else if (r.content_length > 0) {
      uint64_t want = static_cast<uint64_t>(r.content_length);
      if (input.size() - pos < want) return trace + "incomplete body\n";
      pos += static_cast<size_t>(want);
      trace += "body " + std::to_string(want) + "\n";
    }
    if (!r.keep_alive) return trace + "close\n";
  }
  return trace;
}

}  // namespace

int fuzzRequest(const uint8_t* data, size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  std::string whole = run(input, nullptr);
  Splitter splitter(seedFrom(data, size));
  std::string split = run(input, &splitter);
  if (whole != split) {
    std::fprintf(stderr, "whole feed:\n%s\nsplit feed:\n%s\n", whole.c_str(), split.c_str());
    FUZZ_ASSERT(whole == split);
  }
  return 0;
}

}  // namespace concert::fuzz

CONCERT_FUZZ_ENTRY(fuzzRequest)
