// Response serialisation, proxy head rewriting and the access log line.
#include <doctest/doctest.h>

#include <string>

#include "admission/origin_policy.h"
#include "config/config.h"
#include "worker/access_log.h"
#include "worker/rewrite.h"
#include "http/parser.h"
#include "http/response.h"

using namespace concert;
using namespace concert::worker;
using namespace concert::http;
// The origin's policy headers are the room's; the data path only drops them.
using concert::admission::endsSession;
using concert::admission::priorityHeader;
using concert::admission::sessionEndHeaders;

namespace {

// Header block lines between the first line and the blank line.
std::vector<std::string> lines(const std::string& head) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (true) {
    size_t end = head.find("\r\n", pos);
    if (end == std::string::npos || end == pos) break;
    out.push_back(head.substr(pos, end - pos));
    pos = end + 2;
  }
  return out;
}

bool hasLine(const std::string& head, const std::string& line) {
  for (const std::string& l : lines(head))
    if (l == line) return true;
  return false;
}

bool hasName(const std::string& head, const std::string& name) {
  for (const std::string& l : lines(head)) {
    size_t colon = l.find(':');
    if (colon != std::string::npos && equalsIgnoreCase(l.substr(0, colon), name)) return true;
  }
  return false;
}

Request sampleRequest() {
  Request r;
  r.method = "GET";
  r.target = "/p/a%20b?q=1";
  r.raw_path = "/p/a%20b";
  r.path = "/p/a b";
  r.query = "q=1";
  r.peer_ip = "10.1.2.3";
  r.headers = {{"Host", "concert.example"},
               {"User-Agent", "ua"},
               {"Connection", "keep-alive, X-Hop"},
               {"X-Hop", "secret"},
               {"Keep-Alive", "timeout=5"},
               {"Proxy-Connection", "keep-alive"},
               {"Proxy-Authorization", "Basic x"},
               {"TE", "trailers, deflate"},
               {"Trailer", "X-T"},
               {"Upgrade", "h2c"},
               {"Forwarded", "for=1.1.1.1"},
               {"X-Forwarded-For", "6.6.6.6"},
               {"X-Forwarded-Host", "evil"},
               {"X-Forwarded-Proto", "https"},
               {"X-Forwarded-Port", "443"},
               {"Accept", "*/*"}};
  return r;
}

config::Config sampleConfig() {
  config::Config c;
  c.upstream.raw = "http://127.0.0.1:3000";
  c.upstream.host = "127.0.0.1";
  c.upstream.port = 3000;
  c.upstream.host_port = "127.0.0.1:3000";
  return c;
}

}  // namespace

TEST_CASE("reason phrases") {
  CHECK(std::string(reasonPhrase(200)) == "OK");
  CHECK(std::string(reasonPhrase(429)) == "Too Many Requests");
  CHECK(std::string(reasonPhrase(431)) == "Request Header Fields Too Large");
  CHECK(std::string(reasonPhrase(504)) == "Gateway Timeout");
  CHECK(std::string(reasonPhrase(599)) == "");
}

TEST_CASE("stream heads: chunked for HTTP/1.1, close-delimited otherwise, never a length") {
  LocalResponse r;
  r.headers = {{"Content-Type", "text/event-stream"}, {"Content-Length", "5"}, {"Connection", "keep-alive"},
               {"Transfer-Encoding", "gzip"}, {"Cache-Control", "no-store"}};
  r.body = "ignored";
  std::string out;
  serializeStreamHead(r, true, false, out);
  CHECK(out.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
  CHECK(hasLine(out, "Content-Type: text/event-stream"));
  CHECK(hasLine(out, "Cache-Control: no-store"));
  CHECK(hasLine(out, "Transfer-Encoding: chunked"));
  CHECK_FALSE(hasLine(out, "Transfer-Encoding: gzip"));
  CHECK(hasName(out, "Date"));
  CHECK_FALSE(hasName(out, "Content-Length"));
  CHECK_FALSE(hasName(out, "Connection"));
  CHECK(out.substr(out.size() - 4) == "\r\n\r\n");

  out.clear();
  serializeStreamHead(r, true, true, out);
  CHECK(hasLine(out, "Transfer-Encoding: chunked"));
  CHECK(hasLine(out, "Connection: close"));

  out.clear();
  serializeStreamHead(r, false, false, out);
  CHECK(hasLine(out, "Connection: close"));
  CHECK_FALSE(hasName(out, "Transfer-Encoding"));
  CHECK_FALSE(hasName(out, "Content-Length"));
  CHECK(out.substr(out.size() - 4) == "\r\n\r\n");
}

TEST_CASE("local responses: length, date, connection, HEAD") {
  LocalResponse r = plainText(200, "ok");
  r.headers.push_back({"Content-Length", "999"});  // ignored: framing is the serialiser's
  std::string out;
  serializeResponse(r, WireOptions{}, out);
  CHECK(out.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
  CHECK(hasLine(out, "Content-Type: text/plain; charset=utf-8"));
  CHECK(hasLine(out, "Content-Length: 2"));
  CHECK_FALSE(hasLine(out, "Content-Length: 999"));
  CHECK(hasName(out, "Date"));
  CHECK_FALSE(hasName(out, "Connection"));
  CHECK(out.substr(out.size() - 6) == "\r\n\r\nok");

  out.clear();
  WireOptions head;
  head.head_request = true;
  head.close = true;
  serializeResponse(r, head, out);
  CHECK(hasLine(out, "Content-Length: 2"));
  CHECK(hasLine(out, "Connection: close"));
  CHECK(out.substr(out.size() - 4) == "\r\n\r\n");

  out.clear();
  LocalResponse nc;
  nc.status = 204;
  nc.body = "ignored";
  WireOptions ka;
  ka.http10_keep_alive = true;
  serializeResponse(nc, ka, out);
  CHECK(out.rfind("HTTP/1.1 204 No Content\r\n", 0) == 0);
  CHECK_FALSE(hasName(out, "Content-Length"));
  CHECK(hasLine(out, "Connection: keep-alive"));
  CHECK(out.substr(out.size() - 4) == "\r\n\r\n");
}

TEST_CASE("upstream target joins paths with a single slash and merges queries") {
  config::Upstream u;
  Request r;
  r.raw_path = "/foo/";
  CHECK(upstreamTarget(u, r) == "/foo/");
  r.query = "a=1";
  CHECK(upstreamTarget(u, r) == "/foo/?a=1");
  u.path = "/base";
  CHECK(upstreamTarget(u, r) == "/base/foo/?a=1");
  u.path = "/base/";
  CHECK(upstreamTarget(u, r) == "/base/foo/?a=1");
  u.query = "k=v";
  CHECK(upstreamTarget(u, r) == "/base/foo/?k=v&a=1");
  r.query.clear();
  CHECK(upstreamTarget(u, r) == "/base/foo/?k=v");
  r.raw_path = "/a%2Fb";
  u = {};
  CHECK(upstreamTarget(u, r) == "/a%2Fb");
}

TEST_CASE("the origin is sent the path the parser normalised, with the query as sent") {
  config::Config c = sampleConfig();
  auto forwarded = [&](const std::string& target) {
    MessageParser p(MessageParser::Kind::Request);
    std::string text = "GET " + target + " HTTP/1.1\r\nHost: h\r\n\r\n";
    size_t consumed = 0;
    REQUIRE(p.feedHead(text.data(), text.size(), &consumed) == ParseStatus::HeadDone);
    std::string out;
    buildUpstreamRequestHead(p.request(), c, out);
    return out.substr(0, out.find("\r\n"));
  };
  CHECK(forwarded("/static/../checkout") == "GET /checkout HTTP/1.1");
  CHECK(forwarded("/static/%2E%2e/checkout?a=/../b") == "GET /checkout?a=/../b HTTP/1.1");
  CHECK(forwarded("/static/./x.css") == "GET /static/x.css HTTP/1.1");
  CHECK(forwarded("/a%2Fb/./c%20d") == "GET /a%2Fb/c%20d HTTP/1.1");
  CHECK(forwarded("/a//b/") == "GET /a//b/ HTTP/1.1");
  c.upstream.path = "/base";
  CHECK(forwarded("/x/../y") == "GET /base/y HTTP/1.1");
}

TEST_CASE("request head toward the origin: hop-by-hop removed, forwarding headers replaced") {
  config::Config c = sampleConfig();
  Request r = sampleRequest();
  std::string out;
  buildUpstreamRequestHead(r, c, out);
  CHECK(out.rfind("GET /p/a%20b?q=1 HTTP/1.1\r\n", 0) == 0);
  CHECK(hasLine(out, "Host: concert.example"));
  CHECK(hasLine(out, "User-Agent: ua"));
  CHECK(hasLine(out, "Accept: */*"));
  for (const char* gone : {"Connection", "X-Hop", "Keep-Alive", "Proxy-Connection", "Proxy-Authorization", "Trailer",
                           "Upgrade", "X-Forwarded-Port", "Content-Length", "Transfer-Encoding", "Cookie"})
    CHECK_MESSAGE(!hasName(out, gone), gone);
  CHECK(hasLine(out, "TE: trailers"));
  CHECK(hasLine(out, "X-Forwarded-For: 10.1.2.3"));
  CHECK(hasLine(out, "X-Forwarded-Host: concert.example"));
  CHECK(hasLine(out, "X-Forwarded-Proto: http"));
  CHECK(hasLine(out, "Forwarded: for=10.1.2.3;host=concert.example;proto=http"));
  CHECK_FALSE(hasLine(out, "X-Forwarded-For: 6.6.6.6"));
  CHECK_FALSE(hasLine(out, "Forwarded: for=1.1.1.1"));
  CHECK_FALSE(hasLine(out, "X-Forwarded-Host: evil"));
  CHECK_FALSE(hasLine(out, "X-Forwarded-Proto: https"));
  CHECK(out.substr(out.size() - 4) == "\r\n\r\n");
}

TEST_CASE("request head from a trusted proxy: its chain carried on with the peer appended, proto and host kept") {
  config::Config c = sampleConfig();
  Request r = sampleRequest();
  r.peer_trusted = true;  // as dispatch sets it for a peer in -trusted-proxies
  std::string out;
  buildUpstreamRequestHead(r, c, out);
  CHECK(hasLine(out, "X-Forwarded-For: 6.6.6.6, 10.1.2.3"));
  CHECK(hasLine(out, "X-Forwarded-Host: evil"));
  CHECK(hasLine(out, "X-Forwarded-Proto: https"));
  CHECK(hasLine(out, "Forwarded: for=6.6.6.6;host=evil;proto=https, for=10.1.2.3"));
  CHECK_FALSE(hasName(out, "X-Forwarded-Port"));  // not part of the contract: dropped as before
  size_t count = 0;
  for (size_t at = out.find("\nX-Forwarded-For:"); at != std::string::npos; at = out.find("\nX-Forwarded-For:", at + 1))
    ++count;
  CHECK(count == 1);
}

TEST_CASE("request head: Host rewrite, framing, upgrade") {
  config::Config c = sampleConfig();
  c.preserve_host = false;
  Request r = sampleRequest();
  r.method = "POST";
  r.content_length = 12;
  r.headers.push_back({"Content-Length", "12"});
  r.headers.push_back({"Expect", "100-continue"});
  std::string out;
  buildUpstreamRequestHead(r, c, out);
  CHECK(hasLine(out, "Host: 127.0.0.1:3000"));
  CHECK(hasLine(out, "X-Forwarded-Host: concert.example"));
  CHECK(hasLine(out, "Content-Length: 12"));
  CHECK_FALSE(hasName(out, "Expect"));

  Request chunked = sampleRequest();
  chunked.chunked = true;
  chunked.headers.push_back({"Transfer-Encoding", "chunked"});
  out.clear();
  buildUpstreamRequestHead(chunked, c, out);
  CHECK(hasLine(out, "Transfer-Encoding: chunked"));
  CHECK_FALSE(hasName(out, "Content-Length"));

  Request ws;
  ws.method = "GET";
  ws.raw_path = "/ws";
  ws.peer_ip = "127.0.0.1";
  ws.upgrade = true;
  ws.headers = {{"Host", "h"}, {"Connection", "Upgrade"}, {"Upgrade", "websocket"}, {"Sec-WebSocket-Key", "k"}};
  out.clear();
  buildUpstreamRequestHead(ws, c, out);
  CHECK(hasLine(out, "Connection: Upgrade"));
  CHECK(hasLine(out, "Upgrade: websocket"));
  CHECK(hasLine(out, "Sec-WebSocket-Key: k"));

  Request tls = sampleRequest();
  tls.tls = true;
  out.clear();
  buildUpstreamRequestHead(tls, c, out);
  CHECK(hasLine(out, "X-Forwarded-Proto: https"));
}

TEST_CASE("request head: no Cookie header is invented") {
  config::Config c = sampleConfig();
  Request r = sampleRequest();
  std::string out;
  buildUpstreamRequestHead(r, c, out);
  CHECK_FALSE(hasName(out, "Cookie"));
}

TEST_CASE("response head toward the client") {
  Request get;
  get.method = "GET";
  get.http_minor = 1;
  ResponseHead origin;
  origin.status = 200;
  origin.content_length = 5;
  origin.headers = {{"Content-Type", "text/plain"},
                    {"Content-Length", "5"},
                    {"Connection", "keep-alive, X-Private"},
                    {"X-Private", "1"},
                    {"Keep-Alive", "timeout=4"},
                    {"Set-Cookie", "a=1"},
                    {"Set-Cookie", "b=2"},
                    {"Date", "Mon, 30 Nov 2026 03:00:00 GMT"}};
  CHECK(chooseClientFraming(origin, get) == ClientFraming::Length);
  std::string out;
  Headers extra = {{"Set-Cookie", "concert_admit=x; Path=/"}};
  buildClientResponseHead(origin, get, ClientFraming::Length, false, extra, out);
  CHECK(out.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
  CHECK(hasLine(out, "Content-Length: 5"));
  CHECK(hasLine(out, "Set-Cookie: a=1"));
  CHECK(hasLine(out, "Set-Cookie: b=2"));
  CHECK(hasLine(out, "Set-Cookie: concert_admit=x; Path=/"));
  CHECK(hasLine(out, "Date: Mon, 30 Nov 2026 03:00:00 GMT"));
  CHECK_FALSE(hasName(out, "X-Private"));
  CHECK_FALSE(hasName(out, "Keep-Alive"));
  CHECK_FALSE(hasName(out, "Connection"));

  ResponseHead stream;
  stream.status = 200;
  stream.chunked = true;
  stream.transfer_encoding = true;
  stream.headers = {{"Transfer-Encoding", "chunked"}};
  CHECK(chooseClientFraming(stream, get) == ClientFraming::Chunked);
  Request old = get;
  old.http_minor = 0;
  CHECK(chooseClientFraming(stream, old) == ClientFraming::Close);
  out.clear();
  buildClientResponseHead(stream, old, ClientFraming::Close, true, {}, out);
  CHECK_FALSE(hasName(out, "Transfer-Encoding"));
  CHECK_FALSE(hasName(out, "Content-Length"));
  CHECK(hasLine(out, "Connection: close"));
  CHECK(hasName(out, "Date"));

  Request head = get;
  head.method = "HEAD";
  CHECK(chooseClientFraming(origin, head) == ClientFraming::None);
  out.clear();
  buildClientResponseHead(origin, head, ClientFraming::None, false, {}, out);
  CHECK(hasLine(out, "Content-Length: 5"));

  ResponseHead nc;
  nc.status = 204;
  nc.content_length = 0;
  CHECK(chooseClientFraming(nc, get) == ClientFraming::None);
  out.clear();
  buildClientResponseHead(nc, get, ClientFraming::None, false, {}, out);
  CHECK_FALSE(hasName(out, "Content-Length"));

  ResponseHead up;
  up.status = 101;
  up.headers = {{"Connection", "Upgrade"}, {"Upgrade", "websocket"}, {"Sec-WebSocket-Accept", "abc"}};
  out.clear();
  buildClientResponseHead(up, get, ClientFraming::None, false, {}, out);
  CHECK(out.rfind("HTTP/1.1 101 Switching Protocols\r\n", 0) == 0);
  CHECK(hasLine(out, "Connection: Upgrade"));
  CHECK(hasLine(out, "Upgrade: websocket"));
  CHECK(hasLine(out, "Sec-WebSocket-Accept: abc"));
}

TEST_CASE("access log line: combined format, time, outcome, escaping") {
  Request r;
  r.method = "GET";
  r.target = "/p?q=1";
  r.peer_ip = "127.0.0.1";
  r.headers = {{"Referer", "http://r/"}, {"User-Agent", "curl \"8\""}};
  std::string out;
  formatAccessLine(out, r, 200, 1234, 0.0012, admission::Outcome::Admitted, 0);
  CHECK(out.find("127.0.0.1 - - [") == 0);
  CHECK(out.find("] \"GET /p?q=1 HTTP/1.1\" 200 1234 \"http://r/\" \"curl \\x228\\x22\" 0.001 admitted\n") !=
        std::string::npos);
  out.clear();
  Request bare;
  bare.method = "POST";
  bare.target = "/x";
  bare.http_minor = 0;
  bare.peer_ip = "::1";
  formatAccessLine(out, bare, 429, 0, 1.5, admission::Outcome::Queued, 0);
  CHECK(out.find("::1 - - [") == 0);
  CHECK(out.find("\"POST /x HTTP/1.0\" 429 0 \"-\" \"-\" 1.500 queued\n") != std::string::npos);
  // The first field is the client address once dispatch has resolved it.
  out.clear();
  Request behind = r;
  behind.client_ip = "203.0.113.7";
  formatAccessLine(out, behind, 200, 1, 0, admission::Outcome::Bypass, 0);
  CHECK(out.find("203.0.113.7 - - [") == 0);
  CHECK(std::string(admission::outcomeName(admission::Outcome::Bypass)) == "bypass");
  CHECK(std::string(admission::outcomeName(admission::Outcome::Local)) == "local");
  CHECK(std::string(admission::outcomeName(admission::Outcome::Rejected)) == "rejected");
}

TEST_CASE("request head: Concert's cookies are stripped, the rest kept in order") {
  config::Config c = sampleConfig();
  Request r = sampleRequest();
  r.headers.push_back(
      {"Cookie", "room_ticket=a; session=keep; room_pass=b; room_probe=1; concert_admit=z; theme=dark"});
  std::string out;
  buildUpstreamRequestHead(r, c, out);
  CHECK(hasLine(out, "Cookie: session=keep; theme=dark"));

  Request priority = sampleRequest();
  priority.headers.push_back({"Cookie", "a=1; concert_priority=p; concert_admit=z; b=2"});
  out.clear();
  buildUpstreamRequestHead(priority, c, out);
  CHECK(hasLine(out, "Cookie: a=1; b=2"));

  Request only = sampleRequest();
  only.headers.push_back({"Cookie", "room_probe=1; concert_admit=z"});
  out.clear();
  buildUpstreamRequestHead(only, c, out);
  CHECK_FALSE(hasName(out, "Cookie"));

  Request split = sampleRequest();  // several Cookie fields become one
  split.headers.push_back({"Cookie", "a=1"});
  split.headers.push_back({"Cookie", "room_ticket=x; b=2"});
  out.clear();
  buildUpstreamRequestHead(split, c, out);
  CHECK(hasLine(out, "Cookie: a=1; b=2"));
  CHECK(out.find("Cookie:") == out.rfind("Cookie:"));
}

TEST_CASE("event-stream responses are told by their Content-Type") {
  auto with = [](std::string type) {
    ResponseHead r;
    r.status = 200;
    r.headers = {{"Cache-Control", "no-cache"}, {"content-type", std::move(type)}};
    return isEventStream(r);
  };
  CHECK(with("text/event-stream"));
  CHECK(with("Text/Event-Stream; charset=utf-8"));
  CHECK(with("  text/event-stream"));
  CHECK_FALSE(with("text/event-streaming"));
  CHECK_FALSE(with("text/html"));
  CHECK_FALSE(with(""));
  ResponseHead none;
  CHECK_FALSE(isEventStream(none));
}

TEST_CASE("Concert-Session: end is told in any case, and never reaches the client") {
  ResponseHead origin;
  origin.status = 200;
  origin.content_length = 2;
  CHECK_FALSE(endsSession(origin));
  for (const char* name : {"Concert-Session", "concert-session", "CONCERT-SESSION"}) {
    for (const char* value : {"end", "END", " End ", "keep, end"}) {
      CAPTURE(name);
      CAPTURE(value);
      origin.headers = {{"Content-Type", "text/html"}, {name, value}};
      CHECK(endsSession(origin));
    }
  }
  for (const char* value : {"", "keep", "ending", "end-now"}) {
    CAPTURE(value);
    origin.headers = {{"Concert-Session", value}};
    CHECK_FALSE(endsSession(origin));
  }
  origin.headers = {{"X-Concert-Session", "end"}};
  CHECK_FALSE(endsSession(origin));

  // Whatever its value, the header is Concert's: it is dropped toward the client.
  Request get;
  get.method = "GET";
  get.http_minor = 1;
  for (const char* value : {"end", "keep"}) {
    origin.headers = {{"Content-Type", "text/html"}, {"concert-SESSION", value}, {"Set-Cookie", "cart=1"}};
    std::string out;
    buildClientResponseHead(origin, get, ClientFraming::Length, false, {}, out);
    CHECK_FALSE(hasName(out, "Concert-Session"));
    CHECK(hasLine(out, "Set-Cookie: cart=1"));
    CHECK(hasLine(out, "Content-Type: text/html"));
  }
}

TEST_CASE("Concert-Priority is found in any case and never reaches the client") {
  ResponseHead origin;
  origin.status = 200;
  origin.content_length = 2;
  std::string_view value;
  CHECK_FALSE(priorityHeader(origin, value));
  origin.headers = {{"X-Concert-Priority", "staff"}};
  CHECK_FALSE(priorityHeader(origin, value));
  origin.headers = {{"Content-Type", "text/html"}, {"concert-PRIORITY", "staff; ttl=60"}, {"Concert-Priority", "vip"},
                    {"Set-Cookie", "cart=1"}};
  REQUIRE(priorityHeader(origin, value));
  CHECK(value == "staff; ttl=60");  // the first one

  Request get;
  get.method = "GET";
  get.http_minor = 1;
  std::string out;
  buildClientResponseHead(origin, get, ClientFraming::Length, false, {{"Set-Cookie", "concert_priority=x"}}, out);
  CHECK_FALSE(hasName(out, "Concert-Priority"));
  CHECK(hasLine(out, "Set-Cookie: cart=1"));
  CHECK(hasLine(out, "Set-Cookie: concert_priority=x"));
  CHECK(hasLine(out, "Content-Type: text/html"));
}

TEST_CASE("a response that ends the session expires concert_admit instead of sliding it") {
  const std::string expire = "concert_admit=; Path=/; Max-Age=0; HttpOnly; SameSite=Lax";
  const Headers extra = {{"Set-Cookie", "concert_admit=slid-pass; Path=/; Max-Age=600; HttpOnly; SameSite=Lax"},
                         {"Set-Cookie", "room_ticket=00; Path=/"},
                         {"X-Other", "kept"},
                         {"set-cookie", " concert_admit =another"}};
  const Headers ended = sessionEndHeaders(extra, expire);
  REQUIRE(ended.size() == 3);
  CHECK(ended[0].value == "room_ticket=00; Path=/");
  CHECK(ended[1].name == "X-Other");
  CHECK(ended[2].name == "Set-Cookie");
  CHECK(ended[2].value == expire);
  CHECK(sessionEndHeaders({}, expire).size() == 1);

  ResponseHead origin;
  origin.status = 303;
  origin.content_length = 0;
  origin.headers = {{"Location", "/thanks"}, {"Concert-Session", "end"}, {"Set-Cookie", "order=42; Path=/"}};
  Request post;
  post.method = "POST";
  post.http_minor = 1;
  std::string out;
  buildClientResponseHead(origin, post, ClientFraming::Length, false, ended, out);
  CHECK(out.rfind("HTTP/1.1 303 See Other\r\n", 0) == 0);
  CHECK_FALSE(hasName(out, "Concert-Session"));
  CHECK(hasLine(out, "Set-Cookie: order=42; Path=/"));
  CHECK(hasLine(out, "Set-Cookie: " + expire));
  CHECK(out.find("slid-pass") == std::string::npos);
  CHECK(out.find("another") == std::string::npos);
}
