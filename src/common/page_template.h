// The room's HTML pages are templates: text with {{.Name}} placeholders (the
// names of Go's template syntax, no logic; spaces inside the braces are
// allowed). This renders them and checks the waiting page's: a -html file
// with a placeholder Concert does not fill is a configuration error.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace concert::common {

// Copies `text`, replacing every {{NAME}} whose fill(NAME) (NAME without the
// braces and surrounding spaces, e.g. ".Position") has a value. Others, and a
// "{{" without "}}", stay as they are. Values are not re-scanned.
std::string renderTemplate(std::string_view text,
                           const std::function<std::optional<std::string>(std::string_view)>& fill);

// The waiting page's placeholders: .Position, .SkipURL, .Lang, .ETA,
// .Strings, .StartsIn, .SaleStarts and .Text.NAME for every NAME of
// common/languages.h.
bool isWaitingPagePlaceholder(std::string_view name);

// One line of the "known:" list in error messages and docs.
inline constexpr std::string_view kWaitingPagePlaceholders =
    "{{.Position}}, {{.SkipURL}}, {{.Lang}}, {{.ETA}}, {{.Strings}}, {{.StartsIn}}, {{.SaleStarts}}, {{.Text.NAME}}";

// The placeholders of the room's other pages (the maintenance page):
// .Lang and .Text.NAME.
bool isPagePlaceholder(std::string_view name);
inline constexpr std::string_view kPagePlaceholders = "{{.Lang}}, {{.Text.NAME}}";

struct TemplateProblem {
  int line;             // 1-based line of the "{{"
  std::string message;  // "unknown placeholder {{.Foo}}" or "unclosed {{"
};

// The placeholders of a waiting-page template that Concert would not fill, in
// order, and an unclosed "{{"; at most `limit` of them.
std::vector<TemplateProblem> checkWaitingPageTemplate(std::string_view text, size_t limit = 10);
// The same for one of the other pages (isPagePlaceholder).
std::vector<TemplateProblem> checkPageTemplate(std::string_view text, size_t limit = 10);

}  // namespace concert::common
