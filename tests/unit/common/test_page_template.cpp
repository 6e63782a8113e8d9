// Page templates: rendering {{.Name}} placeholders and checking a waiting
// page template for ones Concert would not fill.
#include <doctest/doctest.h>

#include <map>

#include "common/page_template.h"

using concert::common::checkWaitingPageTemplate;
using concert::common::isWaitingPagePlaceholder;
using concert::common::renderTemplate;
using concert::common::TemplateProblem;

namespace {

std::string render(std::string_view text, const std::map<std::string, std::string, std::less<>>& values) {
  return renderTemplate(text, [&](std::string_view name) -> std::optional<std::string> {
    auto it = values.find(name);
    if (it == values.end()) return std::nullopt;
    return it->second;
  });
}

}  // namespace

TEST_CASE("render fills every placeholder it has a value for, once, without re-scanning values") {
  std::map<std::string, std::string, std::less<>> v = {{".A", "1"}, {".B", "{{.A}}"}, {".Empty", ""}};
  CHECK(render("", v) == "");
  CHECK(render("plain", v) == "plain");
  CHECK(render("{{.A}}", v) == "1");
  CHECK(render("x{{.A}}y{{.A}}z", v) == "x1y1z");
  CHECK(render("{{.B}}", v) == "{{.A}}");
  CHECK(render("[{{.Empty}}]", v) == "[]");
  CHECK(render("{{ .A }} {{\t.A}}", v) == "1 1");
  CHECK(render("{{.Unknown}} {{.A}}", v) == "{{.Unknown}} 1");
  CHECK(render("{{.A", v) == "{{.A");
  CHECK(render("{{.A}} {{", v) == "1 {{");
  CHECK(render("}} {{.A}} }}", v) == "}} 1 }}");
  CHECK(render("{{{.A}}}", v) == "{{{.A}}}");  // the name is "{.A"
}

TEST_CASE("the waiting page's placeholders") {
  for (const char* known : {".Position", ".SkipURL", ".Lang", ".ETA", ".Strings", ".Text.Title", ".Text.NoScript",
                            ".Text.EtaMinutes", ".Text.BusyText"})
    CHECK_MESSAGE(isWaitingPagePlaceholder(known), known);
  for (const char* unknown : {"", ".", ".position", "Position", ".Text", ".Text.", ".Text.Nope", ".Text.title",
                              ".Position.X", ".ETA ", "range .Items", ".Foo"})
    CHECK_FALSE_MESSAGE(isWaitingPagePlaceholder(unknown), unknown);
}

TEST_CASE("check names each unknown placeholder and its line") {
  CHECK(checkWaitingPageTemplate("").empty());
  CHECK(checkWaitingPageTemplate("<p>{{.Position}} {{ .Lang }} {{.ETA}} {{.Text.Title}}</p>").empty());
  std::vector<TemplateProblem> p = checkWaitingPageTemplate("<p>\n{{.Position}}\n\n a {{.Positon}} b {{.Foo}}\n{{.X}}");
  REQUIRE(p.size() == 3);
  CHECK(p[0].line == 4);
  CHECK(p[0].message == "unknown placeholder {{.Positon}}");
  CHECK(p[1].line == 4);
  CHECK(p[1].message == "unknown placeholder {{.Foo}}");
  CHECK(p[2].line == 5);
  CHECK(p[2].message == "unknown placeholder {{.X}}");
}

TEST_CASE("check: an unclosed {{, a placeholder over lines, a long one, the limit") {
  std::vector<TemplateProblem> p = checkWaitingPageTemplate("ok {{.Lang}}\nthen {{.Lang");
  REQUIRE(p.size() == 1);
  CHECK(p[0].line == 2);
  CHECK(p[0].message == "unclosed {{");

  p = checkWaitingPageTemplate("a\n{{.Fo\no}}\n{{.Bar}}");
  REQUIRE(p.size() == 2);
  CHECK(p[0].line == 2);
  CHECK(p[1].line == 4);

  p = checkWaitingPageTemplate("{{" + std::string(500, 'x') + "}}");
  REQUIRE(p.size() == 1);
  CHECK(p[0].message == "unknown placeholder {{" + std::string(60, 'x') + "...}}");

  std::string many;
  for (int i = 0; i < 50; ++i) many += "{{.N}}\n";
  p = checkWaitingPageTemplate(many);
  CHECK(p.size() == 10);
  CHECK(p.back().line == 10);
  CHECK(checkWaitingPageTemplate(many, 3).size() == 3);
}
