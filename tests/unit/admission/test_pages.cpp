// The room's own pages: the built-in templates, the language chosen by
// Accept-Language, the estimated wait, and the waiting page's Refresh header.
#include <doctest/doctest.h>

#include "admission/answers.h"
#include "admission/pages.h"
#include "common/languages.h"
#include "common/page_template.h"
#include "fixture.h"

using namespace concert;
using namespace concert::admission;
using common::Language;

namespace {

http::Headers browser(std::string accept_language = "") {
  http::Headers h{{"Accept", "text/html,application/xhtml+xml,*/*;q=0.8"}};
  if (!accept_language.empty()) h.push_back({"Accept-Language", accept_language});
  return h;
}

std::string langAttribute(Language l) {
  return "<html lang=\"" + std::string(common::languageCode(l)) + "\">";
}

http::LocalResponse waiting(const config::Config& c, http::Headers headers, int64_t position,
                            std::optional<int64_t> eta = std::nullopt) {
  return waitingResponse(c, test::get("/page", std::move(headers)), shm::TicketCookie{7, 9}, position, eta);
}

}  // namespace

TEST_CASE("the built-in waiting page has only placeholders Concert fills") {
  std::vector<common::TemplateProblem> problems = common::checkWaitingPageTemplate(kWaitingRoomHtml);
  for (const auto& p : problems) MESSAGE("line ", p.line, ": ", p.message);
  CHECK(problems.empty());
  // The same rules hold for the other pages, which only use .Lang and .Text.
  CHECK(common::checkWaitingPageTemplate(kQueueFullHtml).empty());
  CHECK(common::checkWaitingPageTemplate(kBusyHtml).empty());
}

TEST_CASE("the waiting page in every language: all filled, <html lang>, the ETA in words") {
  config::Config c = test::baseConfig(1);
  for (Language l : common::kLanguages) {
    INFO(common::languageCode(l));
    std::string page = renderWaitingPage(c, 7, l, 250);
    CHECK(page.find("{{") == std::string::npos);
    CHECK(page.find(langAttribute(l)) != std::string::npos);
    CHECK(page.find("<title>" + std::string(common::text(l, common::Text::Title)) + "</title>") != std::string::npos);
    CHECK(page.find(std::string(common::text(l, common::Text::NoScript))) != std::string::npos);
    CHECK(page.find(">7</span>") != std::string::npos);
    CHECK(page.find("<span id=\"eta\">" + common::etaWords(l, 250) + "</span>") != std::string::npos);
    CHECK(page.find("var T = " + common::scriptStrings(l) + ";") != std::string::npos);
    // ETA unknown: the element is empty (and hidden by the page's style).
    std::string unknown = renderWaitingPage(c, 7, l, std::nullopt);
    CHECK(unknown.find("<span id=\"eta\"></span>") != std::string::npos);
  }
  CHECK(renderWaitingPage(c, 3, Language::German, 240).find("ungefähr 4 Minuten") != std::string::npos);
  CHECK(renderWaitingPage(c, 3, Language::English, 30).find("less than a minute") != std::string::npos);
}

TEST_CASE("a -html template gets .Lang, .ETA, .Text and .Strings too") {
  config::Config c = test::baseConfig(1);
  c.html_template = "<html lang=\"{{.Lang}}\">{{.Position}} {{ .ETA }} [{{.Text.Title}}] {{.Unknown}}";
  CHECK(renderWaitingPage(c, 4, Language::French, 3 * 3600) ==
        "<html lang=\"fr\">4 environ 3 heures [Vous êtes dans la file d'attente] {{.Unknown}}");
  CHECK(renderWaitingPage(c, 4, Language::English, std::nullopt) ==
        "<html lang=\"en\">4  [You're in line] {{.Unknown}}");
  c.html_template = "{{.Strings}}";
  CHECK(renderWaitingPage(c, 1, Language::Italian, std::nullopt) == common::scriptStrings(Language::Italian));
}

TEST_CASE("the waiting page's language comes from Accept-Language") {
  config::Config c = test::baseConfig(1);
  struct Case {
    const char* header;
    Language language;
  };
  for (Case k : {Case{"", Language::English}, Case{"de-AT,de;q=0.9,en;q=0.5", Language::German},
                 Case{"en;q=0.2, fr", Language::French}, Case{"es-MX", Language::Spanish},
                 Case{"it-CH;q=0.8, de;q=0", Language::Italian}, Case{"pt-BR", Language::Portuguese},
                 Case{"ja", Language::English}}) {
    INFO(k.header);
    http::LocalResponse r = waiting(c, browser(k.header), 3);
    CHECK(r.status == 200);
    CHECK(r.body.find(langAttribute(k.language)) != std::string::npos);
    CHECK(r.body == renderWaitingPage(c, 3, k.language, std::nullopt));
  }
  // Two Accept-Language headers are one list.
  http::Headers two = browser("ja");
  two.push_back({"Accept-Language", "it"});
  CHECK(waiting(c, two, 3).body.find(langAttribute(Language::Italian)) != std::string::npos);
}

TEST_CASE("the waiting page carries Refresh: 5 s near the front, longer further back, within the first-poll grace") {
  config::Config c = test::baseConfig(1);  // -first-poll-grace 15s: at most 10 s
  CHECK(refreshSeconds(c, 0) == 5);
  CHECK(refreshSeconds(c, 1) == 5);
  CHECK(refreshSeconds(c, 10) == 5);
  CHECK(refreshSeconds(c, 11) == 6);
  CHECK(refreshSeconds(c, 20) == 6);
  CHECK(refreshSeconds(c, 21) == 7);
  CHECK(refreshSeconds(c, 60) == 10);
  CHECK(refreshSeconds(c, 1'000'000) == 10);
  CHECK(refreshSeconds(c, INT64_MAX) == 10);
  c.first_poll_grace = 60'000;  // at most 40 s
  CHECK(refreshSeconds(c, 5) == 5);
  CHECK(refreshSeconds(c, 300) == 34);
  CHECK(refreshSeconds(c, 5000) == 40);
  c.first_poll_grace = 6'000;  // at most 4 s: the first reload must come in time
  CHECK(refreshSeconds(c, 1) == 4);
  CHECK(refreshSeconds(c, 500) == 4);
  c.first_poll_grace = 1'000;
  CHECK(refreshSeconds(c, 1) == 1);
  for (int64_t grace : {7'500, 15'000, 30'000, 3'600'000})
    for (int64_t position : {1, 9, 10, 11, 99, 100, 12345}) {
      c.first_poll_grace = grace;
      int64_t n = refreshSeconds(c, position);
      CHECK(n >= 5);
      CHECK(n * 1000 <= grace);
      CHECK(n >= refreshSeconds(c, position > 1 ? position - 1 : 1));  // never shorter further back
    }

  c.first_poll_grace = 15'000;
  http::LocalResponse near = waiting(c, browser(), 2);
  CHECK(test::headerValue(near.headers, "Refresh") == "5");
  http::LocalResponse far = waiting(c, browser(), 45);
  CHECK(test::headerValue(far.headers, "Refresh") == "9");
  c.queue_status = 503;
  http::LocalResponse unavailable = waiting(c, browser(), 2);
  CHECK(unavailable.status == 503);
  CHECK(test::headerValue(unavailable.headers, "Refresh") == "5");
}

TEST_CASE("the JSON 429 has no Refresh and no words") {
  config::Config c = test::baseConfig(1);
  http::LocalResponse r = waiting(c, {{"Accept", "application/json"}, {"Accept-Language", "de"}}, 2, 120);
  CHECK(r.status == 429);
  CHECK(test::headerValue(r.headers, "Refresh").empty());
  CHECK(r.body.find("Minute") == std::string::npos);
}

TEST_CASE("the room-full and busy pages speak the visitor's language") {
  config::Config c = test::baseConfig(1);
  for (Language l : common::kLanguages) {
    INFO(common::languageCode(l));
    std::string header(common::languageCode(l));
    http::LocalResponse full = roomFullResponse(c, test::get("/", browser(header + "-XX")));
    CHECK(full.status == 503);
    CHECK(full.body.find("{{") == std::string::npos);
    CHECK(full.body.find(langAttribute(l)) != std::string::npos);
    CHECK(full.body.find("<h1>" + std::string(common::text(l, common::Text::FullTitle)) + "</h1>") !=
          std::string::npos);
    CHECK(full.body.find(std::string(common::text(l, common::Text::FullText))) != std::string::npos);
    http::LocalResponse busy = busyResponse(c, test::get("/", browser(header)), "no slot free");
    CHECK(busy.body.find("{{") == std::string::npos);
    CHECK(busy.body.find(langAttribute(l)) != std::string::npos);
    CHECK(busy.body.find("<h1>" + std::string(common::text(l, common::Text::BusyTitle)) + "</h1>") !=
          std::string::npos);
  }
  // English: the words the original's clients look for.
  CHECK(roomFullResponse(c, test::get("/", browser())).body.find("waiting room is full") != std::string::npos);
}

TEST_CASE("a sale's pre-queue: the waiting page says when it starts instead of a position; JSON carries starts_in") {
  config::Config c = test::baseConfig(1);
  SaleCountdown sale;
  sale.starts_in = 300;
  sale.start_unix_ms = 1'798'135'200'000;  // 2026-12-24T18:00:00Z
  const std::string page = renderWaitingPage(c, 7, Language::English, std::nullopt, sale);
  CHECK(page.find("data-starts-in=\"300\"") != std::string::npos);
  CHECK(page.find(">The sale starts at 18:00:00 UTC, in about 5 minutes.</p>") != std::string::npos);
  CHECK(renderWaitingPage(c, 7, Language::German, std::nullopt, sale).find("Der Verkauf beginnt um 18:00:00 UTC") !=
        std::string::npos);
  // Without a pre-queue both are empty: the page's style hides the line.
  const std::string usual = renderWaitingPage(c, 7, Language::English, std::nullopt);
  CHECK(usual.find("data-starts-in=\"\"></p>") != std::string::npos);
  c.html_template = "[{{.StartsIn}}|{{.SaleStarts}}]";
  CHECK(renderWaitingPage(c, 1, Language::English, std::nullopt) == "[|]");
  CHECK(renderWaitingPage(c, 1, Language::English, std::nullopt, sale) ==
        "[300|The sale starts at 18:00:00 UTC, in about 5 minutes.]");

  http::Headers json{{"Accept", "application/json"}};
  const http::LocalResponse r =
      waitingResponse(c, test::get("/page", json), shm::TicketCookie{7, 9}, 7, std::nullopt, sale);
  CHECK(r.status == 429);
  CHECK(r.body.find("\"starts_in\":300") != std::string::npos);
  CHECK(waiting(c, json, 7).body.find("starts_in") == std::string::npos);
}
