// Priority classes from the origin: minting, checking and granting the
// concert_priority cookie; see priority.h for the format and the rules.
#include "admission/priority.h"

#include <openssl/crypto.h>

#include <algorithm>
#include <cstring>

#include "admission/cookies.h"
#include "admission/session.h"
#include "common/log.h"
#include "config/parse.h"
#include "http/request.h"

namespace concert::admission {
namespace {

constexpr size_t kHeadBytes = kPassIdBytes + 8;  // pass id + expiry
constexpr size_t kMaxClassChars = config::kMaxPriorityClassChars;

bool isTokenChar(char c) {
  static constexpr std::string_view kTokenPunct = "!#$%&'*+-.^_`|~";
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         kTokenPunct.find(c) != std::string_view::npos;
}

bool isToken(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), isTokenChar);
}

std::string_view trimSpace(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// The MAC over the label and `signed_bytes` (the cookie without its MAC).
bool priorityMac(std::string_view secret, std::string_view signed_bytes, uint8_t* mac) {
  std::string message;
  message.reserve(kPriorityMacLabel.size() + signed_bytes.size());
  message.append(kPriorityMacLabel).append(signed_bytes);
  return signBytes(secret, reinterpret_cast<const uint8_t*>(message.data()), message.size(), mac);
}

// The value of a `name=value; attributes` Set-Cookie header value.
std::string_view setCookieValue(std::string_view set_cookie) {
  const size_t eq = set_cookie.find('=');
  if (eq == std::string_view::npos) return {};
  std::string_view value = set_cookie.substr(eq + 1);
  return trimSpace(value.substr(0, value.find(';')));
}

// The pass a grant binds to: the one this response sets, else the request's.
std::optional<AdmitPass> passToBind(const AdmissionContext& context, const http::Request& request,
                                    const http::Headers& response_headers, int64_t unix_now) {
  for (const http::Header& h : response_headers) {
    if (!http::equalsIgnoreCase(h.name, "Set-Cookie") || !setsAdmitCookie(h.value)) continue;
    if (std::optional<AdmitPass> pass = verifyPass(context.config->admit_secret, setCookieValue(h.value), unix_now))
      return pass;
  }
  return sessionPass(context, request, unix_now);
}

}  // namespace

std::string mintPriority(std::string_view secret, const PassId& pass_id, int64_t expiry, std::string_view class_name) {
  if (class_name.empty()) return std::string();
  std::string raw;
  raw.reserve(kHeadBytes + class_name.size() + kPassMacBytes);
  raw.append(reinterpret_cast<const char*>(pass_id.data()), pass_id.size());
  const uint64_t e = static_cast<uint64_t>(expiry);
  for (int i = 0; i < 8; ++i) raw += static_cast<char>(static_cast<uint8_t>(e >> (56 - 8 * i)));
  raw.append(class_name);
  uint8_t mac[kPassMacBytes];
  if (!priorityMac(secret, raw, mac)) return std::string();
  raw.append(reinterpret_cast<const char*>(mac), sizeof mac);
  return base64UrlEncode(reinterpret_cast<const uint8_t*>(raw.data()), raw.size());
}

CheckedPriority checkPriority(std::string_view secret, std::string_view value, int64_t now) {
  CheckedPriority out;  // Forged until proven otherwise
  constexpr size_t kMaxRawBytes = kHeadBytes + kMaxClassChars + kPassMacBytes;
  if (value.size() > (kMaxRawBytes * 4 + 2) / 3) return out;
  std::optional<std::string> raw = base64UrlDecode(value);
  if (!raw || raw->size() <= kHeadBytes + kPassMacBytes || raw->size() > kMaxRawBytes) return out;
  const std::string_view bytes = *raw;
  const std::string_view signed_bytes = bytes.substr(0, bytes.size() - kPassMacBytes);
  uint8_t mac[kPassMacBytes];
  if (!priorityMac(secret, signed_bytes, mac)) return out;
  if (CRYPTO_memcmp(mac, bytes.data() + signed_bytes.size(), kPassMacBytes) != 0) return out;
  uint64_t e = 0;
  for (size_t i = 0; i < 8; ++i) e = (e << 8) | static_cast<uint8_t>(bytes[kPassIdBytes + i]);
  // Neither can come from mintPriority with a configured class.
  const std::string_view class_name = signed_bytes.substr(kHeadBytes);
  if (e > static_cast<uint64_t>(INT64_MAX) || !isToken(class_name)) return out;
  std::memcpy(out.cookie.pass_id.data(), bytes.data(), kPassIdBytes);
  out.cookie.expiry = static_cast<int64_t>(e);
  out.cookie.class_name.assign(class_name);
  out.check = now < out.cookie.expiry ? PassCheck::Valid : PassCheck::Expired;
  return out;
}

std::optional<int> classIndex(const std::vector<std::string>& classes, std::string_view name) {
  for (size_t i = 0; i < classes.size(); ++i)
    if (http::equalsIgnoreCase(classes[i], name)) return static_cast<int>(i);
  return std::nullopt;
}

std::optional<int> priorityClass(const AdmissionContext& context, const http::Request& request,
                                 const AdmitPass& pass, int64_t unix_now) {
  const config::Config& config = *context.config;
  if (config.priority_class_list.empty()) return std::nullopt;
  std::optional<std::string> presented = cookieValue(request.headers, kPriorityCookie);
  if (!presented) return std::nullopt;
  const CheckedPriority checked = checkPriority(config.admit_secret, *presented, unix_now);
  if (checked.check != PassCheck::Valid || checked.cookie.pass_id != pass.id) return std::nullopt;
  return classIndex(config.priority_class_list, checked.cookie.class_name);
}

std::optional<PriorityGrant> parsePriorityHeader(std::string_view value) {
  PriorityGrant grant;
  const size_t semi = value.find(';');
  const std::string_view class_name = trimSpace(value.substr(0, semi));
  if (!class_name.empty() && !http::equalsIgnoreCase(class_name, "none")) {
    if (!isToken(class_name)) return std::nullopt;
    grant.class_name.assign(class_name);
  }
  std::string_view params = semi == std::string_view::npos ? std::string_view() : value.substr(semi + 1);
  while (!params.empty()) {
    const size_t next = params.find(';');
    const std::string_view param = trimSpace(params.substr(0, next));
    params = next == std::string_view::npos ? std::string_view() : params.substr(next + 1);
    const size_t eq = param.find('=');
    if (!http::equalsIgnoreCase(trimSpace(param.substr(0, eq)), "ttl")) continue;  // another parameter
    if (grant.ttl_seconds || eq == std::string_view::npos) return std::nullopt;
    const std::string_view digits = trimSpace(param.substr(eq + 1));
    // Nine digits are enough for any ttl worth asking for and cannot overflow.
    if (digits.empty() || digits.size() > 9 || !std::all_of(digits.begin(), digits.end(), [](char c) {
          return c >= '0' && c <= '9';
        }))
      return std::nullopt;
    const int64_t ttl = std::stoll(std::string(digits));
    if (ttl < 1) return std::nullopt;
    grant.ttl_seconds = ttl;
  }
  return grant;
}

std::optional<std::string> grantPriority(const AdmissionContext& context, const http::Request& request,
                                         const http::Headers& response_headers, std::string_view header_value,
                                         int64_t unix_now) {
  const config::Config& config = *context.config;
  std::optional<PriorityGrant> grant = parsePriorityHeader(header_value);
  if (!grant) {
    LOG_INFO("origin's %s for %s %s is malformed, ignored", std::string(kPriorityHeader).c_str(),
             request.method.c_str(), request.raw_path.c_str());
    return std::nullopt;
  }
  if (grant->class_name.empty()) return expiredPrioritySetCookie(config, request.client_https);
  std::optional<int> index = classIndex(config.priority_class_list, grant->class_name);
  if (!index) {
    LOG_INFO("origin granted priority class \"%s\" for %s %s, which -priority-classes does not list; ignored",
             grant->class_name.c_str(), request.method.c_str(), request.raw_path.c_str());
    return std::nullopt;
  }
  std::optional<AdmitPass> pass = passToBind(context, request, response_headers, unix_now);
  if (!pass) {
    LOG_DEBUG("origin granted priority class \"%s\" to %s without a concert_admit pass to bind it to; ignored",
              grant->class_name.c_str(), request.peer_ip.c_str());
    return std::nullopt;
  }
  const int64_t ttl = std::clamp<int64_t>(grant->ttl_seconds.value_or(config.admit_ttl / 1000), 1, kMaxPriorityTtl);
  std::string value =
      mintPriority(config.admit_secret, pass->id, unix_now + ttl, config.priority_class_list[static_cast<size_t>(*index)]);
  if (value.empty()) return std::nullopt;
  return prioritySetCookie(config, value, ttl, request.client_https);
}

}  // namespace concert::admission
