// The loader: command line, CONCERT_* environment, YAML file and defaults,
// all through the schema table (schema.h) and the value parsers (parse.h).
//
// Stages, each collecting every error it finds rather than stopping:
//   1. walk argv: special flags (-c, -t, -version, -help) and setting flags;
//      -version/-help return at once, whatever else is on the line;
//   2. read the YAML file named by -c (syntax, unknown and duplicate keys);
//   3. per setting, validate the value of *every* source that supplies one
//      (a broken file stays broken even when a flag overrides the key), and
//      apply the highest-precedence one: flag > env > file > default;
//   4. cross-setting rules on the result (path-list conflicts), derived
//      values (asset cap, retry-after clamp, reaper and token-ttl defaults),
//      the waiting-page file and the secrets.
// It runs in the master only (at start and on SIGHUP) and has no side
// effect beyond reading files, so a failed reload changes nothing.
#include "config/loader.h"

#include <fcntl.h>
#include <openssl/rand.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <array>
#include <cerrno>
#include <cstring>
#include <limits>
#include <optional>

#include "common/page_template.h"
#include "config/parse.h"
#include "config/schema.h"

extern char** environ;

namespace concert::config {

namespace {

constexpr size_t kMinSecretBytes = 32;
// What 0 means for -reaper and -token-ttl: the room library's default.
constexpr Millis kRoomDefaultInterval = 5 * 60 * 1000;
constexpr size_t kMaxHtmlBytes = 4 << 20;

// One value offered for a setting by one source. `label` starts every
// message about it: "-cap (flag)", "CONCERT_CAPACITY (env)", "f.yaml:3: cap".
struct Offer {
  std::string text;
  std::string label;
};

enum Source { kFlag, kEnv, kFile, kSourceCount };

struct Offers {
  std::array<std::optional<Offer>, kSourceCount> by_source;
};

std::string quoted(std::string_view text) {
  return std::string("\"").append(text).append("\"");
}

// Levenshtein distance, to suggest the setting an operator probably meant.
size_t editDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// " (did you mean -cap?)", a secrets hint, or "".
std::string unknownHint(std::string_view name, std::string_view dash) {
  if (name == "admit-secret") return " (secrets are read from CONCERT_ADMIT_SECRET only)";
  if (name == "admin-token") return " (secrets are read from CONCERT_ADMIN_TOKEN only)";
  if (name == "promote-secret") return " (secrets are read from CONCERT_PROMOTE_SECRET only)";
  const Setting* best = nullptr;
  size_t best_distance = 3;
  for (const Setting& s : settings()) {
    size_t d = editDistance(name, s.name);
    if (d < best_distance) {
      best_distance = d;
      best = &s;
    }
  }
  if (best == nullptr) return {};
  return " (did you mean " + std::string(dash) + std::string(best->name) + "?)";
}

int availableCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    int count = CPU_COUNT(&set);
    if (count > 0) return count;
  }
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  return online > 0 ? static_cast<int>(std::min<long>(online, std::numeric_limits<int>::max())) : 1;
}

std::string rangeError(const Setting& s, std::string_view got) {
  const auto show = [&](int64_t v) {
    if (s.type == ValueType::Duration) return goDurationString(v);
    if (s.type == ValueType::ByteSize) return byteSizeString(v);
    return std::to_string(v);
  };
  std::string zero = s.zero_allowed ? "0 or " : "";
  bool unbounded = s.max == std::numeric_limits<int64_t>::max();
  if (unbounded && s.min == 0 && !s.zero_allowed) return "must not be negative, got " + std::string(got);
  if (unbounded) return "must be " + zero + "at least " + show(s.min) + ", got " + std::string(got);
  return "must be " + zero + "between " + show(s.min) + " and " + show(s.max) + ", got " + std::string(got);
}

template <typename T>
void assignNumber(const SettingTarget& target, Config& out, T value) {
  if (auto p = std::get_if<int32_t Config::*>(&target)) {
    out.*(*p) = static_cast<int32_t>(value);
  } else if (auto q = std::get_if<int64_t Config::*>(&target)) {
    out.*(*q) = static_cast<int64_t>(value);
  } else if (auto d = std::get_if<double Config::*>(&target)) {
    out.*(*d) = static_cast<double>(value);
  }
}

// Parses `text` as setting `s` and stores it in `out`. Returns the errors
// (without label); adds warnings (without label).
std::vector<std::string> applyText(const Setting& s, std::string_view text, Config& out,
                                   std::vector<std::string>& warnings) {
  switch (s.type) {
    case ValueType::String: {
      if (s.check != nullptr) {
        std::string problem = s.check(text);
        if (!problem.empty()) return {problem + ", got " + quoted(text)};
      }
      out.*std::get<std::string Config::*>(s.target) = std::string(text);
      return {};
    }
    case ValueType::Bool: {
      Parsed<bool> v = parseBool(text);
      if (!v.ok()) return {v.error};
      out.*std::get<bool Config::*>(s.target) = *v.value;
      return {};
    }
    case ValueType::Int:
    case ValueType::Workers: {
      if (s.type == ValueType::Workers && text == "auto") {
        out.*std::get<int32_t Config::*>(s.target) =
            static_cast<int32_t>(std::clamp<int64_t>(availableCpus(), s.min, s.max));
        return {};
      }
      Parsed<int64_t> v = parseInt(text);
      if (!v.ok()) {
        if (s.type == ValueType::Workers) return {"expected auto or an integer, got " + quoted(text)};
        if (v.error.rfind("integer out of range", 0) == 0) return {rangeError(s, text)};
        return {v.error};
      }
      if (!(s.zero_allowed && *v.value == 0) && (*v.value < s.min || *v.value > s.max)) return {rangeError(s, text)};
      assignNumber(s.target, out, *v.value);
      return {};
    }
    case ValueType::Float: {
      Parsed<double> v = parseFloat(text);
      if (!v.ok()) return {v.error};
      if (*v.value < 0) return {"must not be negative, got " + std::string(text)};
      assignNumber(s.target, out, *v.value);
      return {};
    }
    case ValueType::Duration: {
      Parsed<int64_t> ns = parseGoDurationNs(text);
      if (!ns.ok()) return {ns.error};
      // Range checks in nanoseconds so that "1ns" is not mistaken for 0.
      constexpr int64_t kNsPerMs = 1'000'000;
      int64_t v = *ns.value;
      bool in_range = v >= s.min * kNsPerMs && (s.max == std::numeric_limits<int64_t>::max() || v <= s.max * kNsPerMs);
      if (!(s.zero_allowed && v == 0) && !in_range) return {rangeError(s, text)};
      out.*std::get<int64_t Config::*>(s.target) = v / kNsPerMs;
      return {};
    }
    case ValueType::ByteSize: {
      Parsed<int64_t> v = parseByteSize(text);
      if (!v.ok()) return {v.error};
      if (*v.value < s.min || *v.value > s.max) return {rangeError(s, text)};
      out.*std::get<int64_t Config::*>(s.target) = *v.value;
      return {};
    }
    case ValueType::Url: {
      Parsed<Upstream> v = parseUpstream(text);
      if (!v.ok()) return {v.error};
      out.*std::get<Upstream Config::*>(s.target) = std::move(*v.value);
      return {};
    }
    case ValueType::PathList: {
      PathListParse v = parsePathList(text);
      for (std::string& w : v.warnings) warnings.push_back(std::move(w));
      if (!v.errors.empty()) return v.errors;
      out.*std::get<PathList Config::*>(s.target) = std::move(v.rules);
      return {};
    }
    case ValueType::CidrList: {
      CidrListParse v = parseCidrList(text);
      for (std::string& w : v.warnings) warnings.push_back(std::move(w));
      if (!v.errors.empty()) return v.errors;
      out.*std::get<CidrList Config::*>(s.target) = std::move(v.cidrs);
      return {};
    }
  }
  return {"unsupported setting type"};
}

// Where the command line asked us to go, plus the settings it set.
constexpr Millis kMaxInviteTtl = 8760LL * 3600 * 1000;  // a year

struct CommandLine {
  Action action = Action::Run;  // Version or Help once seen, else Run or TestConfig
  bool version_or_help = false;
  bool test_config = false;
  std::optional<Millis> invite_ttl;  // -invite DURATION
  std::string config_file;
  std::optional<std::string> config_file_label;
  std::vector<std::optional<Offer>> offers;  // indexed like settings()
  std::vector<std::string> errors;
};

bool isBoolFlag(std::string_view name) {
  if (name == "t" || name == "test-config" || name == "version" || name == "h" || name == "help") return true;
  const Setting* s = findSetting(name);
  return s != nullptr && s->type == ValueType::Bool;
}

CommandLine parseCommandLine(const std::vector<std::string>& args) {
  CommandLine cl;
  cl.offers.resize(settings().size());
  bool flags_done = false;
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (flags_done || arg.size() < 2 || arg[0] != '-') {
      cl.errors.push_back("unexpected argument " + quoted(arg) + " (settings are given as -flag value)");
      continue;
    }
    if (arg == "--") {
      flags_done = true;
      continue;
    }
    std::string_view body(arg);
    std::string_view dash = body.substr(0, body[1] == '-' ? 2 : 1);
    body.remove_prefix(dash.size());
    std::string_view name = body;
    std::optional<std::string> value;
    size_t eq = body.find('=');
    if (eq != std::string_view::npos) {
      name = body.substr(0, eq);
      value = std::string(body.substr(eq + 1));
    }
    const std::string label = std::string(dash) + std::string(name) + " (flag)";
    if (name.empty() || name.front() == '-') {
      cl.errors.push_back("unexpected argument " + quoted(arg));
      continue;
    }
    const Setting* setting = findSetting(name);
    bool known = setting != nullptr || name == "c" || name == "config" || name == "invite" || isBoolFlag(name);
    if (!known) {
      cl.errors.push_back(label + ": unknown flag" + unknownHint(name, dash));
      continue;
    }
    if (isBoolFlag(name)) {
      // A bare boolean never takes the next argument: `-daemon -cap 5`.
      bool on = true;
      if (value) {
        Parsed<bool> parsed = parseBool(*value);
        if (!parsed.ok()) {
          cl.errors.push_back(label + ": " + parsed.error);
          continue;
        }
        on = *parsed.value;
      }
      if (name == "version" || name == "h" || name == "help") {
        if (on && !cl.version_or_help) {
          cl.version_or_help = true;
          cl.action = name == "version" ? Action::Version : Action::Help;
        }
        continue;
      }
      if (name == "t" || name == "test-config") {
        cl.test_config = on;
        continue;
      }
      value = on ? "true" : "false";
    } else if (!value) {
      if (i + 1 >= args.size()) {
        cl.errors.push_back(label + ": missing value");
        continue;
      }
      value = args[++i];
    }
    if (name == "invite") {
      Parsed<Millis> ttl = parseDurationMs(*value);
      if (!ttl.ok() || *ttl.value < 1000 || *ttl.value > kMaxInviteTtl)
        cl.errors.push_back(label + ": must be a duration from 1s to 8760h (e.g. 48h)" +
                            (ttl.ok() ? std::string() : ", " + ttl.error));
      else
        cl.invite_ttl = *ttl.value;
      continue;
    }
    if (name == "c" || name == "config") {
      cl.config_file = *value;
      cl.config_file_label = label;
      continue;
    }
    size_t index = static_cast<size_t>(setting - settings().data());
    cl.offers[index] = Offer{*value, label};  // the last occurrence wins, as with Go's flag package
  }
  if (!cl.version_or_help) cl.action = cl.invite_ttl ? Action::Invite : cl.test_config ? Action::TestConfig : Action::Run;
  return cl;
}

bool readWholeFile(const std::string& path, size_t limit, std::string& out, std::string& error) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    error = std::strerror(errno);
    return false;
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    error = "not a regular file";
    ::close(fd);
    return false;
  }
  out.clear();
  char buf[8192];
  while (true) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      error = std::strerror(errno);
      ::close(fd);
      return false;
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > limit) {
      error = "larger than " + byteSizeString(static_cast<int64_t>(limit));
      ::close(fd);
      return false;
    }
  }
  ::close(fd);
  return true;
}

// Reads the YAML file into per-setting offers. Every problem is an error
// "FILE:LINE: key: message" (or "FILE: message" when there is no line).
void readYamlFile(const std::string& path, std::vector<std::optional<Offer>>& offers,
                  std::vector<std::string>& errors) {
  std::string text;
  std::string why;
  if (!readWholeFile(path, 16 << 20, text, why)) {
    errors.push_back(path + ": cannot read configuration file: " + why);
    return;
  }
  std::vector<YAML::Node> documents;
  try {
    documents = YAML::LoadAll(text);
  } catch (const YAML::Exception& e) {
    errors.push_back(path + ":" + std::to_string(e.mark.line + 1) + ": YAML syntax error: " + e.msg);
    return;
  }
  if (documents.empty()) return;  // an empty file sets nothing
  if (documents.size() > 1) {
    errors.push_back(path + ":" + std::to_string(documents[1].Mark().line + 1) + ": only one YAML document is allowed");
    return;
  }
  const YAML::Node& root = documents.front();
  if (!root || root.IsNull()) return;  // an empty file sets nothing
  if (!root.IsMap()) {
    errors.push_back(path + ":" + std::to_string(root.Mark().line + 1) +
                     ": the file must be a mapping of setting: value");
    return;
  }
  std::vector<int> first_line(settings().size(), 0);
  for (const auto& entry : root) {
    const YAML::Node key = entry.first;
    const YAML::Node value = entry.second;
    int line = key.Mark().line + 1;
    std::string where = path + ":" + std::to_string(line) + ": ";
    if (!key.IsScalar()) {
      errors.push_back(where + "keys must be setting names");
      continue;
    }
    const std::string name = key.Scalar();
    // state_dir is how unit files and packaging spell the state dir's key;
    // it means state-dir (and counts as it: both in one file is a duplicate).
    const Setting* setting = findSetting(name == "state_dir" ? std::string("state-dir") : name);
    if (setting == nullptr) {
      errors.push_back(where + name + ": unknown setting" + unknownHint(name, ""));
      continue;
    }
    size_t index = static_cast<size_t>(setting - settings().data());
    if (first_line[index] != 0) {
      errors.push_back(where + name + ": duplicate key (first set on line " + std::to_string(first_line[index]) + ")");
      continue;
    }
    first_line[index] = line;
    std::string label = path + ":" + std::to_string(line) + ": " + name;
    std::string scalar;
    if (value.IsNull()) {
      scalar.clear();
    } else if (value.IsScalar()) {
      scalar = value.Scalar();
    } else if (value.IsSequence() && (setting->type == ValueType::PathList || setting->type == ValueType::CidrList)) {
      bool ok = true;
      for (const YAML::Node& item : value) {
        if (!item.IsScalar()) {
          errors.push_back(label + (setting->type == ValueType::PathList ? ": list entries must be paths"
                                                                          : ": list entries must be addresses"));
          ok = false;
          break;
        }
        if (!scalar.empty()) scalar += ',';
        scalar += item.Scalar();
      }
      if (!ok) continue;
    } else {
      errors.push_back(label + ": expected a single value, got a " +
                       std::string(value.IsSequence() ? "list" : "mapping"));
      continue;
    }
    offers[index] = Offer{std::move(scalar), std::move(label)};
  }
}

// Rejects a rule listed twice, or one rule under another's prefix, across
// -bypass, -assets, -asset-public and -long-lived (and within one of them): the router
// would otherwise have to pick one silently.
void checkPathConflicts(const Config& config, const std::vector<std::string>& labels,
                        std::vector<std::string>& errors) {
  struct Listed {
    const PathRule* rule;
    std::string_view list;
  };
  const std::pair<const PathList*, std::string_view> lists[] = {
      {&config.bypass, "bypass"}, {&config.assets, "assets"}, {&config.asset_public, "asset-public"},
      {&config.long_lived, "long-lived"}};
  std::vector<Listed> seen;
  for (const auto& [list, name] : lists) {
    const std::string& label = labels[static_cast<size_t>(findSetting(name) - settings().data())];
    for (const PathRule& rule : *list) {
      for (const Listed& other : seen) {
        const PathRule& o = *other.rule;
        std::string in = std::string("-").append(other.list);
        if (o.path == rule.path && o.prefix == rule.prefix) {
          errors.push_back(label + ": " + quoted(pathRuleText(rule)) + " is already listed in " + in);
        } else if ((o.prefix && rule.path.rfind(o.path, 0) == 0) || (rule.prefix && o.path.rfind(rule.path, 0) == 0)) {
          errors.push_back(label + ": " + quoted(pathRuleText(rule)) + " overlaps " + quoted(pathRuleText(o)) + " in " +
                           in + " (a prefix rule may not contain another rule)");
        } else {
          continue;
        }
        break;
      }
      seen.push_back({&rule, name});
    }
  }
}

// Relative file names are resolved against the directory Concert was
// started from: a daemon runs in "/" and still opens, reopens and removes
// them after it detached, and the master reloads from the start directory.
void makeAbsolute(std::string& path) {
  if (path.empty() || path.front() == '/') return;
  char cwd[4096];
  if (::getcwd(cwd, sizeof cwd) == nullptr) return;  // keep it relative; opening it reports the problem
  path = std::string(cwd) + "/" + path;
}

// The admit secret kept in the state dir: read from DIR/admit-secret, or
// made there (32 random bytes as 64 hex digits, mode 0600) on the first
// start, so that passes and tickets stay valid across restarts without an
// operator-provided CONCERT_ADMIT_SECRET. The directory is made (0700) when
// missing.
bool stateDirSecret(const std::string& dir, std::string& secret, std::string& why) {
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    why = std::string("cannot create it: ") + std::strerror(errno);
    return false;
  }
  const std::string path = dir + "/admit-secret";
  for (int attempt = 0; attempt < 2; ++attempt) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      char buf[1024];
      ssize_t n = ::read(fd, buf, sizeof buf);
      ::close(fd);
      std::string text = n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
      while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
      if (text.size() < kMinSecretBytes) {
        why = path + " holds " + std::to_string(text.size()) + " bytes, an admit secret needs at least 32";
        return false;
      }
      secret = text;
      return true;
    }
    if (errno != ENOENT) {
      why = "cannot read " + path + ": " + std::strerror(errno);
      return false;
    }
    unsigned char bytes[kMinSecretBytes];
    if (RAND_bytes(bytes, sizeof bytes) != 1) {
      why = "no random admit secret could be generated";
      return false;
    }
    static const char kHex[] = "0123456789abcdef";
    std::string hex;
    for (unsigned char b : bytes) hex += {kHex[b >> 4], kHex[b & 15]};
    hex += '\n';
    fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
      if (errno == EEXIST) continue;  // another start made it first: read theirs
      why = "cannot create " + path + ": " + std::strerror(errno);
      return false;
    }
    const bool written = ::write(fd, hex.data(), hex.size()) == static_cast<ssize_t>(hex.size());
    ::close(fd);
    if (!written) {
      ::unlink(path.c_str());
      why = "cannot write " + path;
      return false;
    }
  }
  why = "cannot read " + path;
  return false;
}

void loadSecrets(const Environment& env, Config& config, LoadResult& result) {
  auto secret = env.find("CONCERT_ADMIT_SECRET");
  if (secret != env.end() && !secret->second.empty()) {
    if (secret->second.size() < kMinSecretBytes) {
      result.errors.push_back("CONCERT_ADMIT_SECRET must be at least 32 bytes (got " +
                              std::to_string(secret->second.size()) + ")");
    } else {
      config.admit_secret = secret->second;
      config.admit_secret_generated = false;
    }
  } else if (!config.state_dir.empty()) {
    std::string why;
    if (!stateDirSecret(config.state_dir, config.admit_secret, why)) {
      result.errors.push_back("state-dir " + config.state_dir + ": " + why);
    } else {
      config.admit_secret_generated = false;
      config.admit_secret_in_state_dir = true;
    }
  } else {
    unsigned char bytes[kMinSecretBytes];
    if (RAND_bytes(bytes, sizeof bytes) != 1) {
      result.errors.push_back("CONCERT_ADMIT_SECRET is not set and no random secret could be generated");
    } else {
      config.admit_secret.assign(reinterpret_cast<const char*>(bytes), sizeof bytes);
      config.admit_secret_generated = true;
      result.warnings.push_back(
          "CONCERT_ADMIT_SECRET is not set: using a random secret; admission passes reset on restart and are "
          "not shared across instances");
    }
  }
  auto token = env.find("CONCERT_ADMIN_TOKEN");
  config.admin_token = token != env.end() ? token->second : std::string();
  auto promote = env.find("CONCERT_PROMOTE_SECRET");
  config.promote_secret.clear();
  if (promote != env.end() && !promote->second.empty()) {
    if (promote->second.size() < kMinSecretBytes)
      result.errors.push_back("CONCERT_PROMOTE_SECRET must be at least 32 bytes (got " +
                              std::to_string(promote->second.size()) + ")");
    else
      config.promote_secret = promote->second;
  }
}

}  // namespace

Environment currentEnvironment() {
  Environment env;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    std::string_view text(*entry);
    size_t eq = text.find('=');
    if (eq == std::string_view::npos) continue;
    env.emplace(std::string(text.substr(0, eq)), std::string(text.substr(eq + 1)));
  }
  return env;
}

LoadResult load(const std::vector<std::string>& args, const Environment& env) {
  LoadResult result;
  CommandLine cl = parseCommandLine(args);
  result.action = cl.action;
  if (cl.version_or_help) return result;  // nothing else is looked at
  result.errors = std::move(cl.errors);
  result.invite_ttl = cl.invite_ttl.value_or(0);

  const size_t count = settings().size();
  std::vector<Offers> offers(count);
  for (size_t i = 0; i < count; ++i) offers[i].by_source[kFlag] = std::move(cl.offers[i]);

  // An empty variable counts as unset, as with `CONCERT_X=` in a compose file.
  for (size_t i = 0; i < count; ++i) {
    const Setting& s = settings()[i];
    auto it = env.find(std::string(s.env));
    if (it != env.end() && !it->second.empty())
      offers[i].by_source[kEnv] = Offer{it->second, std::string(s.env) + " (env)"};
  }
  for (const auto& variable : env) {
    const std::string& name = variable.first;
    if (name.rfind("CONCERT_", 0) != 0 || variable.second.empty()) continue;
    // A master hands its next image (a binary upgrade) what it keeps in these.
    if (name == "CONCERT_UPGRADE" || name == "CONCERT_UPGRADE_CHECK") continue;
    bool known = std::any_of(settings().begin(), settings().end(), [&](const Setting& s) { return s.env == name; }) ||
                 std::any_of(secrets().begin(), secrets().end(), [&](const Secret& s) { return s.env == name; });
    if (!known) result.warnings.push_back(name + " (env): not a concert setting; ignored");
  }

  if (!cl.config_file.empty()) {
    std::vector<std::optional<Offer>> file_offers(count);
    readYamlFile(cl.config_file, file_offers, result.errors);
    for (size_t i = 0; i < count; ++i) offers[i].by_source[kFile] = std::move(file_offers[i]);
  } else if (cl.config_file_label) {
    result.errors.push_back(*cl.config_file_label + ": empty file name");
  }

  auto config = std::make_shared<Config>();
  config->config_file = cl.config_file;
  std::vector<std::string> labels(count);
  for (size_t i = 0; i < count; ++i) {
    const Setting& s = settings()[i];
    bool applied = false;
    for (const std::optional<Offer>& offer : offers[i].by_source) {
      if (!offer) continue;
      // Lower-precedence values are still checked (into a scratch copy) so
      // that `-t` reports a broken file even while a flag hides the key.
      Config scratch;
      std::vector<std::string> warnings;
      std::vector<std::string> errors = applyText(s, offer->text, applied ? scratch : *config, warnings);
      for (const std::string& w : warnings) result.warnings.push_back(offer->label + ": " + w);
      for (const std::string& e : errors) result.errors.push_back(offer->label + ": " + e);
      if (!applied) labels[i] = offer->label;
      applied = true;
    }
    if (!applied) {
      labels[i] = std::string("-").append(s.name).append(" (default)");
      std::vector<std::string> warnings;
      for (const std::string& e : applyText(s, s.default_text, *config, warnings))
        result.errors.push_back(labels[i] + ": " + e);
    }
  }

  checkPathConflicts(*config, labels, result.errors);

  // Derived values, as the original computes them.
  if (config->retry_after < 1) config->retry_after = 1;
  if (config->reaper == 0) config->reaper = kRoomDefaultInterval;
  if (config->token_ttl == 0) config->token_ttl = kRoomDefaultInterval;
  config->crawler_agent_list.clear();
  for (size_t from = 0; from <= config->crawler_agents.size();) {
    size_t to = config->crawler_agents.find(',', from);
    if (to == std::string::npos) to = config->crawler_agents.size();
    std::string agent = config->crawler_agents.substr(from, to - from);
    while (!agent.empty() && (agent.front() == ' ' || agent.front() == '\t')) agent.erase(agent.begin());
    while (!agent.empty() && (agent.back() == ' ' || agent.back() == '\t')) agent.pop_back();
    for (char& c : agent) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (!agent.empty()) config->crawler_agent_list.push_back(std::move(agent));
    from = to + 1;
  }
  if (Parsed<std::vector<std::string>> classes = parsePriorityClasses(config->priority_classes); classes.ok())
    config->priority_class_list = std::move(*classes.value);
  if (Parsed<AdmitRateSpec> rate = parseAdmitRate(config->admit_rate); rate.ok()) {
    config->admit_interval_ns = rate.value->interval_ns;
    const int64_t per_second = rate.value->count * 1000 / std::max<int64_t>(rate.value->per_ms, 1);
    if (rate.value->interval_ns != 0)
      config->admit_burst_tokens = config->admit_burst > 0 ? config->admit_burst : std::max<int64_t>(per_second, 1);
  }
  if (Parsed<int64_t> start = parseRfc3339Ms(config->event_start); start.ok()) config->event_start_ms = *start.value;
  if (Parsed<ClusterUrl> url = parseClusterUrl(config->cluster); url.ok()) config->cluster_url = *url.value;
  if (Parsed<Upstream> url = parseUpstream(config->origin_status); !config->origin_status.empty() && url.ok())
    config->origin_status_url = *url.value;
  config->asset_cap_derived = config->asset_cap == 0;
  if (config->asset_cap_derived) {
    int64_t derived = int64_t{config->cap} * config->asset_user_cap_h2;
    config->asset_cap = static_cast<int32_t>(std::min<int64_t>(derived, std::numeric_limits<int32_t>::max()));
  }

  for (std::string* path : {&config->config_file, &config->html_file, &config->maintenance_html_file, &config->pid_file, &config->state_dir,
                            &config->error_log, &config->access_log_file})
    makeAbsolute(*path);
  if (!config->html_file.empty()) {
    std::string why;
    const std::string& label = labels[static_cast<size_t>(findSetting("html") - settings().data())];
    if (!readWholeFile(config->html_file, kMaxHtmlBytes, config->html_template, why)) {
      result.errors.push_back(label + ": cannot read " + quoted(config->html_file) + ": " + why);
    } else {
      // A placeholder Concert would not fill would reach visitors as it is.
      for (const common::TemplateProblem& p : common::checkWaitingPageTemplate(config->html_template)) {
        std::string e = label + ": " + quoted(config->html_file) + " line " + std::to_string(p.line) + ": " + p.message;
        if (p.message.starts_with("unknown")) e += " (known: " + std::string(common::kWaitingPagePlaceholders) + ")";
        result.errors.push_back(std::move(e));
      }
    }
  }

  if (!config->maintenance_html_file.empty()) {
    std::string why;
    const std::string& label = labels[static_cast<size_t>(findSetting("maintenance-html") - settings().data())];
    if (!readWholeFile(config->maintenance_html_file, kMaxHtmlBytes, config->maintenance_template, why)) {
      result.errors.push_back(label + ": cannot read " + quoted(config->maintenance_html_file) + ": " + why);
    } else {
      for (const common::TemplateProblem& p : common::checkPageTemplate(config->maintenance_template)) {
        std::string e =
            label + ": " + quoted(config->maintenance_html_file) + " line " + std::to_string(p.line) + ": " + p.message;
        if (p.message.starts_with("unknown")) e += " (known: " + std::string(common::kPagePlaceholders) + ")";
        result.errors.push_back(std::move(e));
      }
    }
  }

  loadSecrets(env, *config, result);

  auto labelOf = [&](const char* name) { return labels[static_cast<size_t>(findSetting(name) - settings().data())]; };
  if (config->proxy_protocol && config->trusted_proxies.empty())
    result.errors.push_back(labelOf("proxy-protocol") +
                            ": needs -trusted-proxies (the balancers allowed to send the header); without it every "
                            "connection would be closed");
  if (!config->cluster.empty() && (config->admit_secret_generated || config->admit_secret_in_state_dir))
    result.errors.push_back(labelOf("cluster") +
                            ": needs CONCERT_ADMIT_SECRET, the same on every host, so that tickets, passes and "
                            "references work on each of them");
  if (config->adaptive) {
    if (!config->cluster.empty())
      result.errors.push_back(labelOf("adaptive") +
                              ": cannot be used with -cluster: the cap is the room's, shared by every host, and each "
                              "host sees only its own share of the origin");
    if (config->cap_min > config->adaptiveCeiling())
      result.errors.push_back(labelOf("cap-min") + ": " + std::to_string(config->cap_min) + " is above -cap-max " +
                              std::to_string(config->adaptiveCeiling()));
    else if (config->cap < config->cap_min || config->cap > config->adaptiveCeiling())
      result.errors.push_back(labelOf("cap") + ": " + std::to_string(config->cap) +
                              " is outside -cap-min " + std::to_string(config->cap_min) + " .. -cap-max " +
                              std::to_string(config->adaptiveCeiling()) + ", where -adaptive starts from it");
  }
  if (config->abuse_threshold > 0 && config->admit_secret_generated)
    result.warnings.push_back(labelOf("abuse-threshold") +
                              ": CONCERT_ADMIT_SECRET is generated, so after a restart every visitor's pass is foreign "
                              "and counts as a forgery; set the secret");

  if (result.errors.empty()) result.config = std::move(config);
  return result;
}

std::string helpText() {
  std::string out =
      "usage: concert [-c FILE] [-t] [-flag value ...]\n"
      "\n"
      "Flags take one or two dashes, as -flag value or -flag=value; booleans as -flag or\n"
      "-flag=true|false. Every setting is also a CONCERT_* environment variable and a key\n"
      "of the YAML file. Precedence: flag > environment > file > default. Durations use\n"
      "Go syntax (500ms, 30s, 5m, 1h30m).\n"
      "\n"
      "  -c, --config FILE\n"
      "        YAML file whose keys are the setting names below\n"
      "  -t, --test-config\n"
      "        validate the configuration, print \"configuration ok\" or the errors, and exit\n"
      "  -invite DURATION\n"
      "        print one single-use invitation (?concert_invite=), valid for DURATION, signed\n"
      "        with CONCERT_ADMIT_SECRET, and exit\n"
      "  -version, --version\n"
      "        print the version and exit\n"
      "  -h, -help, --help\n"
      "        print this help and exit\n";
  std::string_view group;
  for (const Setting& s : settings()) {
    if (s.group != group) {
      group = s.group;
      out += "\n" + std::string(group) + ":\n";
    }
    out += "  -" + std::string(s.name);
    switch (s.type) {
      case ValueType::Bool: break;
      case ValueType::Int:
      case ValueType::Workers: out += " int"; break;
      case ValueType::Float: out += " number"; break;
      case ValueType::Duration: out += " duration"; break;
      case ValueType::ByteSize: out += " size"; break;
      case ValueType::Url: out += " url"; break;
      case ValueType::PathList: out += " paths"; break;
      case ValueType::CidrList: out += " cidrs"; break;
      case ValueType::String: out += " string"; break;
    }
    out += "\n        " + std::string(s.help) + "\n        env " + std::string(s.env) + ", default " +
           (s.default_text.empty() ? std::string("empty") : quoted(s.default_text));
    std::string range = rangeText(s);
    if (!range.empty()) out += ", " + range;
    if (s.reload == Reload::Restart) out += "; changing it needs a restart";
    if (s.reload == Reload::RestartToGrow) out += "; raising it needs a restart";
    out += "\n";
  }
  out += "\nEnvironment only:\n";
  for (const Secret& secret : secrets())
    out += "  " + std::string(secret.env) + "\n        " + std::string(secret.help) + "\n";
  return out;
}

}  // namespace concert::config
