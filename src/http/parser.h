// Incremental HTTP/1.x message parsing on top of llhttp, for client requests
// and origin responses.
//
// One MessageParser lives as long as its connection and parses messages one
// after the other. Phases: Head (feedHead until HeadDone) → the data path
// decides the body framing; only a chunked body goes back through llhttp
// (feedChunked until BodyDone, trailers are discarded); Content-Length and
// close-delimited bodies are moved by the caller without parsing → reset()
// before the next message. Pipelined bytes after a message are never
// consumed by the parser: it pauses at the end of every head and body.
//
// Request heads are validated beyond llhttp: bare LF line
// ends, obs-fold, CL+TE, any Transfer-Encoding other than exactly "chunked",
// missing or repeated Host on HTTP/1.1, bad target, a path whose ".." climbs
// above "/" or whose "." / ".." hides behind "%2F" → 400; URI > 8 KiB → 414;
// header section > 32 KiB → 431; version other than 1.0/1.1 → 505; CONNECT →
// 405 (Concert is not a forward proxy). An accepted head's path has no
// dot-segments left (http/path.h): raw_path is what the origin is sent and
// path, its decoded form, is what the router matches.
#pragma once

#include <llhttp.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "http/request.h"

namespace concert::http {

constexpr size_t kMaxUriBytes = 8 * 1024;
constexpr size_t kMaxRequestHeaderBytes = 32 * 1024;
constexpr size_t kMaxResponseHeaderBytes = 64 * 1024;

// An origin response head.
struct ResponseHead {
  int status = 0;
  int http_major = 1;
  int http_minor = 1;
  Headers headers;
  int64_t content_length = -1;     // -1: none
  bool chunked = false;            // Transfer-Encoding with chunked last
  bool transfer_encoding = false;  // any Transfer-Encoding (chunked or not)
  bool keep_alive = true;          // the origin lets us reuse the connection
};

enum class ParseStatus { NeedMore, HeadDone, BodyDone, Error };

// Receives decoded chunked-body bytes.
using BodySink = void (*)(void* arg, const char* data, size_t len);

class MessageParser {
 public:
  enum class Kind { Request, Response };
  explicit MessageParser(Kind kind);
  MessageParser(const MessageParser&) = delete;
  MessageParser& operator=(const MessageParser&) = delete;

  // Ready for the next message (clears the head being built).
  void reset();

  // Parses head bytes. *consumed is set to the bytes that belong to the head
  // (all of `len` for NeedMore). After HeadDone, request() / response() hold
  // the validated head. After Error, errorStatus() says what to answer.
  ParseStatus feedHead(const char* data, size_t len, size_t* consumed);

  // Decodes a chunked body; decoded bytes go to `sink`. BodyDone when the
  // last chunk and the trailers were read; *consumed excludes what follows.
  ParseStatus feedChunked(const char* data, size_t len, size_t* consumed, BodySink sink, void* arg);

  // True while no byte of the current message has been fed.
  bool idle() const { return head_bytes_ == 0; }

  Request& request() { return request_; }
  ResponseHead& response() { return response_; }
  int errorStatus() const { return error_status_; }
  const char* errorReason() const { return error_reason_; }

 private:
  static int onUrl(llhttp_t* p, const char* at, size_t len);
  static int onHeaderField(llhttp_t* p, const char* at, size_t len);
  static int onHeaderValue(llhttp_t* p, const char* at, size_t len);
  static int onHeadersComplete(llhttp_t* p);
  static int onBody(llhttp_t* p, const char* at, size_t len);
  static int onMessageComplete(llhttp_t* p);

  ParseStatus fail(int status, const char* reason);
  void recycleHeaders(Headers& headers);
  void newHeader();
  ParseStatus finishRequestHead();
  ParseStatus finishResponseHead();
  bool checkLineEnds(const char* data, size_t len);

  static const llhttp_settings_t* settings();

  llhttp_t parser_;
  Kind kind_;
  Request request_;
  ResponseHead response_;
  Headers* headers_;
  Headers spare_;             // cleared headers whose strings keep their capacity
  std::string path_scratch_;  // normalised path, swapped with raw_path (both keep their capacity)
  static constexpr size_t kMaxSpareHeaders = 64;
  bool in_body_ = false;
  bool last_was_value_ = false;
  bool head_done_ = false;
  bool message_done_ = false;
  char prev_char_ = 0;
  bool first_line_ = true;
  size_t head_bytes_ = 0;
  size_t header_bytes_ = 0;
  int error_status_ = 0;
  const char* error_reason_ = "";
  BodySink sink_ = nullptr;
  void* sink_arg_ = nullptr;
};

// Percent-decodes a path; false on a malformed escape.
bool percentDecodePath(std::string_view raw, std::string& out);

// True when the comma-separated header value contains `token` (case-insensitive).
bool headerHasToken(std::string_view value, std::string_view token);

}  // namespace concert::http
