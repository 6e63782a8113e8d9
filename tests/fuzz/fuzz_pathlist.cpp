// Fuzz target: the path-list parser behind -bypass, -assets and
// -asset-public (config::parsePathList, pathListText, PathRule::matches).
// Properties: every accepted rule starts with '/', a prefix rule ends with
// '/', no accepted rule is "/" as a prefix or touches a reserved path
// (/queue/status, /_room, /_room/...); printing the rules and parsing them
// again gives the same rules with no error; a prefix rule matches exactly
// the paths under it.
#include <string>

#include "config/parse.h"
#include "fuzz_target.h"

namespace concert::fuzz {

int fuzzPathList(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  config::PathListParse parsed = config::parsePathList(text);
  for (const config::PathRule& rule : parsed.rules) {
    FUZZ_ASSERT(!rule.path.empty() && rule.path.front() == '/');
    FUZZ_ASSERT(rule.path.find(',') == std::string::npos);
    if (rule.prefix) {
      FUZZ_ASSERT(rule.path.back() == '/');
      FUZZ_ASSERT(rule.path != "/");
      FUZZ_ASSERT(!rule.matches("/queue/status"));
      FUZZ_ASSERT(rule.matches(rule.path) && rule.matches(rule.path + "x/y"));
      FUZZ_ASSERT(!rule.matches(rule.path.substr(0, rule.path.size() - 1)));
    } else {
      FUZZ_ASSERT(rule.matches(rule.path) && !rule.matches(rule.path + "x"));
    }
    FUZZ_ASSERT(rule.path != "/queue/status" && rule.path != "/_room" && rule.path.rfind("/_room/", 0) != 0);
    FUZZ_ASSERT(!rule.matches("/_room/stats") && !rule.matches("/_room/cap") && !rule.matches("/_room/healthz"));
  }
  // Round trip through the operator's spelling. Rules with surrounding
  // blanks cannot exist (entries are trimmed), so the text parses back as is.
  std::string printed = config::pathListText(parsed.rules);
  config::PathListParse again = config::parsePathList(printed);
  FUZZ_ASSERT(again.errors.empty() && again.warnings.empty());
  FUZZ_ASSERT(again.rules.size() == parsed.rules.size());
  for (size_t i = 0; i < again.rules.size(); ++i) {
    FUZZ_ASSERT(again.rules[i].path == parsed.rules[i].path);
    FUZZ_ASSERT(again.rules[i].prefix == parsed.rules[i].prefix);
  }
  return 0;
}

}  // namespace concert::fuzz

CONCERT_FUZZ_ENTRY(fuzzPathList)
