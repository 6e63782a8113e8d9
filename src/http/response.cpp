// Serialisation of responses Concert answers itself. Framing is decided here
// and nowhere else for local answers: Content-Length always (none for 1xx,
// 204, 304), HEAD keeps the length but sends no body, Connection: close when
// the data path will close after writing; a streamed local body (the event
// stream) is chunked, or delimited by the close for an HTTP/1.0 client.
#include "http/response.h"

#include <cstdio>
#include <ctime>
#include <string>

namespace concert::http {

const char* reasonPhrase(int status) {
  switch (status) {
    case 100: return "Continue";
    case 101: return "Switching Protocols";
    case 103: return "Early Hints";
    case 200: return "OK";
    case 201: return "Created";
    case 202: return "Accepted";
    case 203: return "Non-Authoritative Information";
    case 204: return "No Content";
    case 205: return "Reset Content";
    case 206: return "Partial Content";
    case 207: return "Multi-Status";
    case 300: return "Multiple Choices";
    case 301: return "Moved Permanently";
    case 302: return "Found";
    case 303: return "See Other";
    case 304: return "Not Modified";
    case 307: return "Temporary Redirect";
    case 308: return "Permanent Redirect";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 402: return "Payment Required";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 406: return "Not Acceptable";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 410: return "Gone";
    case 411: return "Length Required";
    case 412: return "Precondition Failed";
    case 413: return "Request Entity Too Large";
    case 414: return "Request URI Too Long";
    case 415: return "Unsupported Media Type";
    case 416: return "Requested Range Not Satisfiable";
    case 417: return "Expectation Failed";
    case 418: return "I'm a teapot";
    case 421: return "Misdirected Request";
    case 422: return "Unprocessable Entity";
    case 425: return "Too Early";
    case 426: return "Upgrade Required";
    case 428: return "Precondition Required";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 451: return "Unavailable For Legal Reasons";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 505: return "HTTP Version Not Supported";
    default: return "";
  }
}

LocalResponse plainText(int status, std::string body) {
  LocalResponse r;
  r.status = status;
  r.headers.push_back({"Content-Type", "text/plain; charset=utf-8"});
  r.body = std::move(body);
  return r;
}

std::string_view httpDate() {
  static thread_local time_t cached_second = 0;
  static thread_local char cached[40];
  static thread_local size_t cached_len = 0;
  time_t now = time(nullptr);
  if (now != cached_second || cached_len == 0) {
    static const char* const kDays[] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
    static const char* const kMonths[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                          "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    struct tm tm;
    gmtime_r(&now, &tm);
    int n = snprintf(cached, sizeof cached, "%s, %02d %s %04d %02d:%02d:%02d GMT", kDays[tm.tm_wday], tm.tm_mday,
                     kMonths[tm.tm_mon], tm.tm_year + 1900, tm.tm_hour, tm.tm_min, tm.tm_sec);
    cached_len = n > 0 ? static_cast<size_t>(n) : 0;
    cached_second = now;
  }
  return std::string_view(cached, cached_len);
}

namespace {

// The status line and the response's own headers, without the framing ones.
void appendHead(const LocalResponse& response, std::string& out) {
  out += "HTTP/1.1 ";
  out += std::to_string(response.status);
  out += ' ';
  out += reasonPhrase(response.status);
  out += "\r\n";
  for (const Header& h : response.headers) {
    if (equalsIgnoreCase(h.name, "Content-Length") || equalsIgnoreCase(h.name, "Transfer-Encoding") ||
        equalsIgnoreCase(h.name, "Connection") || equalsIgnoreCase(h.name, "Date"))
      continue;
    out += h.name;
    out += ": ";
    out += h.value;
    out += "\r\n";
  }
}

void appendDate(std::string& out) {
  out += "Date: ";
  out += httpDate();
  out += "\r\n";
}

}  // namespace

void serializeResponse(const LocalResponse& response, const WireOptions& options, std::string& out) {
  const int status = response.status;
  appendHead(response, out);
  const bool bodiless = status < 200 || status == 204 || status == 304;
  if (!bodiless) {
    out += "Content-Length: ";
    out += std::to_string(response.body.size());
    out += "\r\n";
  }
  appendDate(out);
  if (options.close)
    out += "Connection: close\r\n";
  else if (options.http10_keep_alive)
    out += "Connection: keep-alive\r\n";
  out += "\r\n";
  if (!bodiless && !options.head_request) out += response.body;
}

void serializeStreamHead(const LocalResponse& response, bool chunked, bool close, std::string& out) {
  appendHead(response, out);
  appendDate(out);
  if (chunked) out += "Transfer-Encoding: chunked\r\n";
  if (close || !chunked) out += "Connection: close\r\n";
  out += "\r\n";
}

}  // namespace concert::http
