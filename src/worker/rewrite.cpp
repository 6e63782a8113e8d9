// Reverse-proxy message rewriting: the request head Concert sends to the
// origin and the response head it sends to the client. Pure functions over
// parsed heads; see rewrite.h.
#include "worker/rewrite.h"

#include "http/client_address.h"
#include "http/response.h"

namespace concert::worker {

bool isHopByHop(std::string_view name) {
  return http::equalsIgnoreCase(name, "Connection") || http::equalsIgnoreCase(name, "Keep-Alive") ||
         http::equalsIgnoreCase(name, "Proxy-Connection") || http::equalsIgnoreCase(name, "Proxy-Authenticate") ||
         http::equalsIgnoreCase(name, "Proxy-Authorization") || http::equalsIgnoreCase(name, "TE") ||
         http::equalsIgnoreCase(name, "Trailer") || http::equalsIgnoreCase(name, "Transfer-Encoding") ||
         http::equalsIgnoreCase(name, "Upgrade");
}

namespace {

// Is `name` one of the tokens listed in the message's Connection headers?
bool namedByConnection(const http::Headers& headers, std::string_view name) {
  for (const http::Header& h : headers)
    if (http::equalsIgnoreCase(h.name, "Connection") && http::headerHasToken(h.value, name)) return true;
  return false;
}

bool named(std::span<const std::string_view> names, std::string_view name) {
  for (std::string_view n : names)
    if (http::equalsIgnoreCase(n, name)) return true;
  return false;
}

bool startsWithIgnoreCase(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() && http::equalsIgnoreCase(s.substr(0, prefix.size()), prefix);
}

void appendHeader(std::string& out, std::string_view name, std::string_view value) {
  out += name;
  out += ": ";
  out += value;
  out += "\r\n";
}

}  // namespace

std::string upstreamTarget(const config::Upstream& upstream, const http::Request& request) {
  std::string out;
  const std::string& a = upstream.path;
  const std::string& b = request.raw_path;
  out.reserve(a.size() + b.size() + upstream.query.size() + request.query.size() + 2);
  if (a.empty()) {
    out = b;
  } else {
    const bool a_slash = a.back() == '/';
    const bool b_slash = !b.empty() && b.front() == '/';
    out = a;
    if (a_slash && b_slash)
      out.append(b, 1);
    else if (!a_slash && !b_slash)
      out.append(1, '/').append(b);
    else
      out += b;
  }
  if (out.empty()) out.push_back('/');
  if (!upstream.query.empty() || !request.query.empty()) {
    out += '?';
    out += upstream.query;
    if (!upstream.query.empty() && !request.query.empty()) out += '&';
    out += request.query;
  }
  return out;
}

void buildUpstreamRequestHead(const http::Request& request, const config::Config& config, std::string& out) {
  out += request.method;
  out += ' ';
  out += upstreamTarget(config.upstream, request);
  out += " HTTP/1.1\r\n";
  const bool has_host = http::hasHeader(request.headers, "Host");
  const std::string_view inbound_host = request.header("Host");
  appendHeader(out, "Host",
               (config.preserve_host && has_host) ? inbound_host : std::string_view(config.upstream.host_port));
  bool cookie_done = false;
  for (const http::Header& h : request.headers) {
    const std::string_view name = h.name;
    if (http::equalsIgnoreCase(name, "Host") || http::equalsIgnoreCase(name, "Content-Length") ||
        http::equalsIgnoreCase(name, "Expect") || http::equalsIgnoreCase(name, "Forwarded") ||
        startsWithIgnoreCase(name, "X-Forwarded-") || isHopByHop(name) || namedByConnection(request.headers, name))
      continue;
    if (http::equalsIgnoreCase(name, "Cookie")) {
      if (cookie_done) continue;
      cookie_done = true;
      if (std::optional<std::string> kept = admission::originCookie(request)) appendHeader(out, "Cookie", *kept);
      continue;
    }
    appendHeader(out, name, h.value);
  }
  for (const http::Header& h : request.headers)
    if (http::equalsIgnoreCase(h.name, "TE") && http::headerHasToken(h.value, "trailers")) {
      appendHeader(out, "TE", "trailers");
      break;
    }
  // The incoming forwarding headers were all dropped above; these replace
  // them, carrying a trusted proxy's chain on (http/client_address.h).
  const http::OutgoingForwarding forwarding = http::outgoingForwarding(request);
  appendHeader(out, "X-Forwarded-For", forwarding.x_forwarded_for);
  if (forwarding.x_forwarded_host) appendHeader(out, "X-Forwarded-Host", *forwarding.x_forwarded_host);
  appendHeader(out, "X-Forwarded-Proto", forwarding.x_forwarded_proto);
  appendHeader(out, "Forwarded", forwarding.forwarded);
  if (request.chunked)
    appendHeader(out, "Transfer-Encoding", "chunked");
  else if (request.content_length >= 0)
    appendHeader(out, "Content-Length", std::to_string(request.content_length));
  if (request.upgrade) {
    appendHeader(out, "Connection", "Upgrade");
    appendHeader(out, "Upgrade", request.header("Upgrade"));
  }
  out += "\r\n";
}

ClientFraming chooseClientFraming(const http::ResponseHead& origin, const http::Request& request) {
  if (request.method == "HEAD" || origin.status < 200 || origin.status == 204 || origin.status == 304)
    return ClientFraming::None;
  if (!origin.transfer_encoding && origin.content_length >= 0) return ClientFraming::Length;
  return request.http_minor >= 1 ? ClientFraming::Chunked : ClientFraming::Close;
}

void buildClientResponseHead(const http::ResponseHead& origin, const http::Request& request, ClientFraming framing,
                             bool close_client, const http::Headers& extra, std::string& out,
                             std::span<const std::string_view> dropped) {
  out += "HTTP/1.1 ";
  out += std::to_string(origin.status);
  out += ' ';
  out += http::reasonPhrase(origin.status);
  out += "\r\n";
  bool has_date = false;
  for (const http::Header& h : origin.headers) {
    const std::string_view name = h.name;
    if (isHopByHop(name) || http::equalsIgnoreCase(name, "Content-Length") || named(dropped, name) ||
        namedByConnection(origin.headers, name))
      continue;
    if (!has_date && http::equalsIgnoreCase(name, "Date")) has_date = true;
    appendHeader(out, name, h.value);
  }
  for (const http::Header& h : extra) appendHeader(out, h.name, h.value);
  switch (framing) {
    case ClientFraming::None:
      // HEAD and 304 keep the length the body would have had.
      if (origin.content_length >= 0 && !origin.transfer_encoding && origin.status != 204 && origin.status >= 200)
        appendHeader(out, "Content-Length", std::to_string(origin.content_length));
      break;
    case ClientFraming::Length: appendHeader(out, "Content-Length", std::to_string(origin.content_length)); break;
    case ClientFraming::Chunked: appendHeader(out, "Transfer-Encoding", "chunked"); break;
    case ClientFraming::Close: break;
  }
  if (!has_date) appendHeader(out, "Date", http::httpDate());
  if (origin.status == 101) {
    appendHeader(out, "Connection", "Upgrade");
    appendHeader(out, "Upgrade", http::findHeader(origin.headers, "Upgrade"));
  } else if (close_client) {
    appendHeader(out, "Connection", "close");
  } else if (request.http_minor == 0) {
    appendHeader(out, "Connection", "keep-alive");
  }
  out += "\r\n";
}

bool isEventStream(const http::ResponseHead& origin) {
  constexpr std::string_view kEventStream = "text/event-stream";
  for (const http::Header& h : origin.headers) {
    if (!http::equalsIgnoreCase(h.name, "Content-Type")) continue;
    std::string_view v = h.value;
    while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
    if (v.size() < kEventStream.size() || !http::equalsIgnoreCase(v.substr(0, kEventStream.size()), kEventStream))
      return false;
    v.remove_prefix(kEventStream.size());
    return v.empty() || v.front() == ';' || v.front() == ' ' || v.front() == '\t';
  }
  return false;
}

}  // namespace concert::worker
