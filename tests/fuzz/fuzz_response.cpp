// Fuzz target: origin response heads and body framing (MessageParser,
// ResponseHead), including chunked bodies with extensions and trailers.
//
// The origin is less trusted than it looks: a compromised or buggy origin
// must not be able to crash a worker or make two runs of the same bytes
// disagree. The input is what an origin sends on one kept-alive connection;
// it is parsed in one feed and in pseudo-random splits, framed the way the
// proxy does it (1xx and 204/304 without a body, chunked through
// feedChunked, Content-Length by count, anything else until close), and
// both traces must be identical. Accepted heads must be self-consistent:
// chunked implies Transfer-Encoding, a Content-Length is only reported
// without Transfer-Encoding, values carry no CR/LF/NUL, HTTP/1.x only.
#include <string>

#include "fuzz_target.h"
#include "http/parser.h"

namespace concert::fuzz {
namespace {

using http::Header;
using http::MessageParser;
using http::ParseStatus;
using http::ResponseHead;

constexpr int kMaxMessages = 8;

void appendBody(void* arg, const char* data, size_t len) {
  static_cast<std::string*>(arg)->append(data, len);
}

void checkAcceptedHead(const ResponseHead& r) {
  FUZZ_ASSERT(r.http_major == 1);
  FUZZ_ASSERT(r.status >= 100 && r.status <= 999);
  if (r.chunked) FUZZ_ASSERT(r.transfer_encoding);
  if (r.transfer_encoding) FUZZ_ASSERT(r.content_length == -1);
  FUZZ_ASSERT(r.content_length >= -1);
  size_t header_bytes = 0;
  for (const Header& h : r.headers) {
    header_bytes += h.name.size() + h.value.size() + 4;
    for (unsigned char c : h.value) FUZZ_ASSERT(c != '\r' && c != '\n' && c != 0);
  }
  FUZZ_ASSERT(header_bytes <= http::kMaxResponseHeaderBytes);
}

std::string run(std::string_view input, Splitter* splitter) {
  MessageParser parser(MessageParser::Kind::Response);
  std::string trace;
  size_t pos = 0;
  auto piece = [&](size_t remaining) { return splitter ? splitter->next(remaining) : remaining; };
  for (int message = 0; message < kMaxMessages && pos < input.size(); ++message) {
    parser.reset();
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
    if (status == ParseStatus::Error) return trace + "rejected\n";
    FUZZ_ASSERT(status == ParseStatus::HeadDone);
    const ResponseHead& r = parser.response();
    checkAcceptedHead(r);
    trace += std::to_string(r.status) + " cl=" + std::to_string(r.content_length) + (r.chunked ? " chunked" : "") +
             (r.transfer_encoding ? " te" : "") + (r.keep_alive ? " keep-alive" : "");
    for (const Header& h : r.headers) trace += "|" + h.name + ":" + h.value;
    trace += "\n";
    if (r.status < 200 || r.status == 204 || r.status == 304) continue;  // no body
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
      if (status == ParseStatus::NeedMore)
        return trace + "incomplete chunked body " + std::to_string(body.size()) + "\n";
      if (status == ParseStatus::Error) return trace + "bad chunked body\n";
      FUZZ_ASSERT(status == ParseStatus::BodyDone);
      trace += "chunked body " + std::to_string(body.size()) + ":" + body + "\n";
    } else if (r.content_length >= 0) {
      uint64_t want = static_cast<uint64_t>(r.content_length);
      if (input.size() - pos < want) return trace + "incomplete body\n";
      pos += static_cast<size_t>(want);
      trace += "body " + std::to_string(want) + "\n";
    } else {
      return trace + "until close " + std::to_string(input.size() - pos) + "\n";
    }
    if (!r.keep_alive) return trace + "close\n";
  }
  return trace;
}

}  // namespace

int fuzzResponse(const uint8_t* data, size_t size) {
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

CONCERT_FUZZ_ENTRY(fuzzResponse)
