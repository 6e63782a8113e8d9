// Request and response head parsing through MessageParser: the strictness
// rules for request heads and the framing facts the data path relies on.
#include <doctest/doctest.h>

#include <string>

#include "http/parser.h"

using namespace concert::http;

namespace {

struct Parsed {
  ParseStatus status;
  int error = 0;
  size_t consumed = 0;
};

Parsed parseRequest(MessageParser& p, const std::string& text) {
  size_t consumed = 0;
  ParseStatus s = p.feedHead(text.data(), text.size(), &consumed);
  return {s, p.errorStatus(), consumed};
}

Parsed parseRequest(const std::string& text) {
  static MessageParser* p = nullptr;
  if (!p) p = new MessageParser(MessageParser::Kind::Request);
  p->reset();
  return parseRequest(*p, text);
}

int errorOf(const std::string& text) {
  Parsed r = parseRequest(text);
  return r.status == ParseStatus::Error ? r.error : (r.status == ParseStatus::HeadDone ? 0 : -1);
}

}  // namespace

TEST_CASE("a simple GET head parses and stops at the end of the head") {
  MessageParser p(MessageParser::Kind::Request);
  std::string text = "GET /a%20b/c?x=1&y=2 HTTP/1.1\r\nHost: example.com\r\nUser-Agent: t\r\n\r\nGET /next";
  Parsed r = parseRequest(p, text);
  REQUIRE(r.status == ParseStatus::HeadDone);
  CHECK(r.consumed == text.size() - 9);
  Request& q = p.request();
  CHECK(q.method == "GET");
  CHECK(q.target == "/a%20b/c?x=1&y=2");
  CHECK(q.raw_path == "/a%20b/c");
  CHECK(q.path == "/a b/c");
  CHECK(q.query == "x=1&y=2");
  CHECK(q.http_minor == 1);
  CHECK(q.keep_alive);
  CHECK_FALSE(q.hasBody());
  REQUIRE(q.headers.size() == 2);
  CHECK(q.headers[0].name == "Host");
  CHECK(q.headers[0].value == "example.com");
  CHECK(q.header("user-agent") == "t");
}

TEST_CASE("heads split across many feeds") {
  MessageParser p(MessageParser::Kind::Request);
  std::string text = "POST /up HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nX-Long: abcdefghij\r\n\r\nhello";
  size_t off = 0;
  ParseStatus s = ParseStatus::NeedMore;
  while (s == ParseStatus::NeedMore && off < text.size()) {
    size_t consumed = 0;
    s = p.feedHead(text.data() + off, 1, &consumed);
    off += consumed;
  }
  REQUIRE(s == ParseStatus::HeadDone);
  CHECK(text.substr(off) == "hello");
  CHECK(p.request().content_length == 5);
  CHECK(p.request().header("X-Long") == "abcdefghij");
}

TEST_CASE("keep-alive, expect and upgrade flags") {
  MessageParser p(MessageParser::Kind::Request);
  REQUIRE(parseRequest(p, "GET / HTTP/1.0\r\n\r\n").status == ParseStatus::HeadDone);
  CHECK_FALSE(p.request().keep_alive);
  p.reset();
  REQUIRE(parseRequest(p, "GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n").status == ParseStatus::HeadDone);
  CHECK(p.request().keep_alive);
  p.reset();
  REQUIRE(parseRequest(p, "GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n").status == ParseStatus::HeadDone);
  CHECK_FALSE(p.request().keep_alive);
  p.reset();
  REQUIRE(parseRequest(p, "PUT / HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n").status ==
          ParseStatus::HeadDone);
  CHECK(p.request().expect_continue);
  p.reset();
  REQUIRE(
      parseRequest(p, "GET /ws HTTP/1.1\r\nHost: h\r\nConnection: keep-alive, Upgrade\r\nUpgrade: websocket\r\n\r\n")
          .status == ParseStatus::HeadDone);
  CHECK(p.request().upgrade);
}

TEST_CASE("chunked request body decoding stops at the end of the message") {
  MessageParser p(MessageParser::Kind::Request);
  std::string head = "POST /c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n";
  REQUIRE(parseRequest(p, head).status == ParseStatus::HeadDone);
  CHECK(p.request().chunked);
  std::string body = "5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nTrailer-X: 1\r\n\r\nGET /next";
  std::string out;
  size_t consumed = 0;
  auto sink = [](void* arg, const char* d, size_t n) { static_cast<std::string*>(arg)->append(d, n); };
  ParseStatus s = p.feedChunked(body.data(), body.size(), &consumed, sink, &out);
  CHECK(s == ParseStatus::BodyDone);
  CHECK(out == "hello world");
  CHECK(body.substr(consumed) == "GET /next");
  CHECK(p.request().headers.size() == 2);  // trailers are not added to the head
  p.reset();
  std::string next = "GET /next HTTP/1.1\r\nHost: h\r\n\r\n";
  CHECK(parseRequest(p, next).status == ParseStatus::HeadDone);
  CHECK(p.request().path == "/next");
}

TEST_CASE("bad chunk sizes are errors") {
  MessageParser p(MessageParser::Kind::Request);
  REQUIRE(parseRequest(p, "POST /c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n").status ==
          ParseStatus::HeadDone);
  std::string body = "zz\r\nhello\r\n";
  size_t consumed = 0;
  auto sink = [](void*, const char*, size_t) {};
  CHECK(p.feedChunked(body.data(), body.size(), &consumed, sink, nullptr) == ParseStatus::Error);
}

TEST_CASE("hostile request heads are refused with the contract's status") {
  // framing
  CHECK(errorOf("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n") == 400);
  CHECK(errorOf("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n") == 400);
  CHECK(errorOf("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n") == 400);
  CHECK(errorOf("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5, 6\r\n\r\n") == 400);
  CHECK(errorOf("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: -1\r\n\r\n") == 400);
  CHECK(errorOf("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 1x\r\n\r\n") == 400);
  CHECK(errorOf("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip\r\n\r\n") == 400);
  CHECK(errorOf("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip, chunked\r\n\r\n") == 400);
  CHECK(errorOf("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked, gzip\r\n\r\n") == 400);
  CHECK(errorOf("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n") ==
        400);
  // header syntax
  CHECK(errorOf("GET / HTTP/1.1\r\nHost: h\r\nX-Folded: a\r\n b\r\n\r\n") == 400);
  CHECK(errorOf("GET / HTTP/1.1\r\nHost: h\r\nBad Name: v\r\n\r\n") == 400);
  CHECK(errorOf("GET / HTTP/1.1\r\nHost: h\r\nBad(Name): v\r\n\r\n") == 400);
  CHECK(errorOf("GET / HTTP/1.1\r\nHost: h\r\nName : v\r\n\r\n") == 400);
  CHECK(errorOf("GET / HTTP/1.1\r\nHost: h\r\n: v\r\n\r\n") == 400);
  CHECK(errorOf("GET / HTTP/1.1\r\nHost: h\r\nNoColon\r\n\r\n") == 400);
  CHECK(errorOf("GET / HTTP/1.1\r\nHost: h\r\nX: a\x01"
                "b\r\n\r\n") == 400);
  CHECK(errorOf("GET / HTTP/1.1\nHost: h\n\n") == 400);
  CHECK(errorOf("GET / HTTP/1.1\r\nHost: h\nX: y\r\n\r\n") == 400);
  // Host
  CHECK(errorOf("GET / HTTP/1.1\r\n\r\n") == 400);
  CHECK(errorOf("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n") == 400);
  CHECK(errorOf("GET / HTTP/1.1\r\nHost: a b\r\n\r\n") == 400);
  CHECK(errorOf("GET / HTTP/1.0\r\n\r\n") == 0);
  // request line
  CHECK(errorOf("GET\r\n\r\n") == 400);
  CHECK(errorOf("GET / HTTP/1.1 extra\r\nHost: h\r\n\r\n") == 400);
  CHECK(errorOf("GET  / HTTP/1.1\r\nHost: h\r\n\r\n") == 400);
  CHECK(errorOf("get / HTTP/1.1\r\nHost: h\r\n\r\n") == 400);
  CHECK(errorOf("GET nopath HTTP/1.1\r\nHost: h\r\n\r\n") == 400);
  CHECK(errorOf("GET /a%zz HTTP/1.1\r\nHost: h\r\n\r\n") == 400);
  CHECK(errorOf("GET /a% HTTP/1.1\r\nHost: h\r\n\r\n") == 400);
  CHECK(errorOf("GET /a#frag HTTP/1.1\r\nHost: h\r\n\r\n") == 400);
  CHECK(errorOf("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03") == 400);
  // versions
  CHECK(errorOf("GET / HTTP/2.0\r\nHost: h\r\n\r\n") == 505);
  CHECK(errorOf("GET / HTTP/1.2\r\nHost: h\r\n\r\n") == 505);
  CHECK(errorOf("GET / HTTP/3.0\r\nHost: h\r\n\r\n") == 505);
  // CONNECT
  CHECK(errorOf("CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n") == 405);
}

TEST_CASE("size limits: 414 for the URI, 431 for the header section") {
  CHECK(errorOf("GET /" + std::string(8200, 'a') + " HTTP/1.1\r\nHost: h\r\n\r\n") == 414);
  CHECK(errorOf("GET /" + std::string(8000, 'a') + " HTTP/1.1\r\nHost: h\r\n\r\n") == 0);
  CHECK(errorOf("GET / HTTP/1.1\r\nHost: h\r\nX-Big: " + std::string(33 * 1024, 'a') + "\r\n\r\n") == 431);
  std::string many = "GET / HTTP/1.1\r\nHost: h\r\n";
  for (int i = 0; i < 2000; ++i) many += "X-H" + std::to_string(i) + ": vvvvvvvv\r\n";
  CHECK(errorOf(many + "\r\n") == 431);
  CHECK(errorOf("GET / HTTP/1.1\r\nHost: h\r\nX-Big: " + std::string(30 * 1024, 'a') + "\r\n\r\n") == 0);
}

TEST_CASE("absolute-form targets are reduced to path and query") {
  MessageParser p(MessageParser::Kind::Request);
  REQUIRE(parseRequest(p, "GET http://example.com/x/y?z=1 HTTP/1.1\r\nHost: example.com\r\n\r\n").status ==
          ParseStatus::HeadDone);
  CHECK(p.request().raw_path == "/x/y");
  CHECK(p.request().query == "z=1");
}

TEST_CASE("response heads: framing facts") {
  MessageParser p(MessageParser::Kind::Response);
  size_t consumed = 0;
  std::string a = "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\n\r\nabc";
  REQUIRE(p.feedHead(a.data(), a.size(), &consumed) == ParseStatus::HeadDone);
  CHECK(consumed == a.size() - 3);
  CHECK(p.response().status == 200);
  CHECK(p.response().content_length == 3);
  CHECK(p.response().keep_alive);
  CHECK(p.response().headers.size() == 3);
  p.reset();
  std::string b = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n";
  REQUIRE(p.feedHead(b.data(), b.size(), &consumed) == ParseStatus::HeadDone);
  CHECK(p.response().chunked);
  std::string out;
  size_t used = 0;
  auto sink = [](void* arg, const char* d, size_t n) { static_cast<std::string*>(arg)->append(d, n); };
  CHECK(p.feedChunked(b.data() + consumed, b.size() - consumed, &used, sink, &out) == ParseStatus::BodyDone);
  CHECK(out == "abc");
  p.reset();
  std::string c = "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nxyz";
  REQUIRE(p.feedHead(c.data(), c.size(), &consumed) == ParseStatus::HeadDone);
  CHECK_FALSE(p.response().keep_alive);
  CHECK(p.response().content_length == -1);
  CHECK_FALSE(p.response().chunked);
  p.reset();
  std::string d = "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\nraw";
  REQUIRE(p.feedHead(d.data(), d.size(), &consumed) == ParseStatus::HeadDone);
  CHECK(p.response().status == 101);
  CHECK(d.substr(consumed) == "raw");
  p.reset();
  std::string e = "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n";
  REQUIRE(p.feedHead(e.data(), e.size(), &consumed) == ParseStatus::HeadDone);
  CHECK(p.response().status == 100);
  p.reset();
  size_t more = 0;
  REQUIRE(p.feedHead(e.data() + consumed, e.size() - consumed, &more) == ParseStatus::HeadDone);
  CHECK(p.response().status == 204);
}

TEST_CASE("helpers") {
  CHECK(headerHasToken("keep-alive, Upgrade", "upgrade"));
  CHECK_FALSE(headerHasToken("keep-alive, Upgrades", "upgrade"));
  std::string out;
  CHECK(percentDecodePath("/a%2Fb%41", out));
  CHECK(out == "/a/bA");
  CHECK_FALSE(percentDecodePath("/a%4", out));
}
