// Page templates; see page_template.h.
#include "common/page_template.h"

#include <algorithm>

#include "common/languages.h"

namespace concert::common {
namespace {

constexpr std::string_view kOpen = "{{";
constexpr std::string_view kClose = "}}";

std::string_view trimSpaces(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::vector<TemplateProblem> checkTemplate(std::string_view text, size_t limit, bool (*known)(std::string_view)) {
  std::vector<TemplateProblem> problems;
  int line = 1;
  size_t counted = 0;  // newlines before here are in `line`
  auto lineAt = [&](size_t at) {
    line += static_cast<int>(std::count(text.begin() + static_cast<std::ptrdiff_t>(counted),
                                        text.begin() + static_cast<std::ptrdiff_t>(at), '\n'));
    counted = at;
    return line;
  };
  for (size_t open = text.find(kOpen); open != std::string_view::npos && problems.size() < limit;) {
    size_t close = text.find(kClose, open + kOpen.size());
    if (close == std::string_view::npos) {
      problems.push_back({lineAt(open), "unclosed {{"});
      break;
    }
    std::string_view name = trimSpaces(text.substr(open + kOpen.size(), close - open - kOpen.size()));
    if (!known(name)) {
      constexpr size_t kShown = 60;  // a long run of text between braces is cut short in the message
      std::string shown(name.substr(0, kShown));
      if (name.size() > kShown) shown += "...";
      problems.push_back({lineAt(open), "unknown placeholder {{" + shown + "}}"});
    }
    open = text.find(kOpen, close + kClose.size());
  }
  return problems;
}

}  // namespace

std::string renderTemplate(std::string_view text,
                           const std::function<std::optional<std::string>(std::string_view)>& fill) {
  std::string out;
  out.reserve(text.size() + 256);
  size_t from = 0;
  for (size_t open = text.find(kOpen); open != std::string_view::npos; open = text.find(kOpen, from)) {
    size_t close = text.find(kClose, open + kOpen.size());
    if (close == std::string_view::npos) break;
    out.append(text.substr(from, open - from));
    std::optional<std::string> value = fill(trimSpaces(text.substr(open + kOpen.size(), close - open - kOpen.size())));
    if (value)
      out += *value;
    else
      out.append(text.substr(open, close + kClose.size() - open));
    from = close + kClose.size();
  }
  out.append(text.substr(from));
  return out;
}

bool isWaitingPagePlaceholder(std::string_view name) {
  for (std::string_view known : {".Position", ".SkipURL", ".Lang", ".ETA", ".Strings", ".StartsIn", ".SaleStarts"})
    if (name == known) return true;
  constexpr std::string_view kText = ".Text.";
  return name.starts_with(kText) && textByName(name.substr(kText.size())).has_value();
}

std::vector<TemplateProblem> checkWaitingPageTemplate(std::string_view text, size_t limit) {
  return checkTemplate(text, limit, isWaitingPagePlaceholder);
}

bool isPagePlaceholder(std::string_view name) {
  constexpr std::string_view kText = ".Text.";
  return name == ".Lang" || (name.starts_with(kText) && textByName(name.substr(kText.size())).has_value());
}

std::vector<TemplateProblem> checkPageTemplate(std::string_view text, size_t limit) {
  return checkTemplate(text, limit, isPagePlaceholder);
}

}  // namespace concert::common
