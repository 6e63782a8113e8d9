// The room's words: the table, the choice by Accept-Language, the estimated
// wait in words in every language, and the script's strings.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <set>

#include "common/languages.h"

using concert::common::chooseLanguage;
using concert::common::etaWords;
using concert::common::kLanguages;
using concert::common::kTextCount;
using concert::common::Language;
using concert::common::languageCode;
using concert::common::scriptStrings;
using concert::common::Text;
using concert::common::text;
using concert::common::textByName;
using concert::common::textName;

namespace {

Text nth(size_t i) {
  return static_cast<Text>(i);
}

}  // namespace

TEST_CASE("every string exists in every language, and is safe in HTML text and attributes") {
  std::set<std::string_view> names;
  for (size_t i = 0; i < kTextCount; ++i) {
    std::string_view name = textName(nth(i));
    INFO(name);
    CHECK_FALSE(name.empty());
    CHECK(names.insert(name).second);
    REQUIRE(textByName(name).has_value());
    CHECK(*textByName(name) == nth(i));
    for (Language l : kLanguages) {
      std::string_view words = text(l, nth(i));
      INFO(languageCode(l));
      CHECK_FALSE(words.empty());
      CHECK(words.find_first_of("<>&\"") == std::string_view::npos);
      CHECK(words.find("{{") == std::string_view::npos);
    }
  }
  CHECK_FALSE(textByName("Nope").has_value());
  CHECK_FALSE(textByName("").has_value());
  CHECK_FALSE(textByName("title").has_value());  // names are case-sensitive
}

TEST_CASE("a translation is a translation: no other language repeats the English of a sentence") {
  for (Text t : {Text::Title, Text::Lead, Text::NoScript, Text::NoCookies, Text::FullText, Text::BusyText,
                 Text::EtaMinutes, Text::EtaLessThanMinute}) {
    INFO(textName(t));
    std::set<std::string_view> seen;
    for (Language l : kLanguages) CHECK(seen.insert(text(l, t)).second);
  }
}

TEST_CASE("language codes") {
  CHECK(languageCode(Language::English) == "en");
  CHECK(languageCode(Language::German) == "de");
  CHECK(languageCode(Language::French) == "fr");
  CHECK(languageCode(Language::Spanish) == "es");
  CHECK(languageCode(Language::Italian) == "it");
  CHECK(languageCode(Language::Portuguese) == "pt");
}

TEST_CASE("Accept-Language: the highest q-value among the languages Concert speaks") {
  CHECK(chooseLanguage("") == Language::English);
  CHECK(chooseLanguage("de") == Language::German);
  CHECK(chooseLanguage("fr-FR,fr;q=0.9,en;q=0.8") == Language::French);
  CHECK(chooseLanguage("en;q=0.5, es;q=0.9") == Language::Spanish);
  CHECK(chooseLanguage("it;q=0.3,pt-BR;q=0.7") == Language::Portuguese);
  CHECK(chooseLanguage("ja, zh-CN;q=0.9") == Language::English);  // nothing Concert speaks
  CHECK(chooseLanguage("ja, it;q=0.1") == Language::Italian);     // anything it speaks beats nothing
  CHECK(chooseLanguage("da, en-gb;q=0.8, de;q=0.7") == Language::English);
}

TEST_CASE("Accept-Language: region and script tags match their language, case does not matter") {
  CHECK(chooseLanguage("de-AT") == Language::German);
  CHECK(chooseLanguage("de-CH-1996") == Language::German);
  CHECK(chooseLanguage("DE-at") == Language::German);
  CHECK(chooseLanguage("pt_BR") == Language::Portuguese);
  CHECK(chooseLanguage("es-419") == Language::Spanish);
  CHECK(chooseLanguage("FR") == Language::French);
  CHECK(chooseLanguage("deu") == Language::English);  // not a subtag of de
  CHECK(chooseLanguage("d") == Language::English);
}

TEST_CASE("Accept-Language: q=0 rules a language out") {
  CHECK(chooseLanguage("de;q=0") == Language::English);
  CHECK(chooseLanguage("de;q=0, fr;q=0.1") == Language::French);
  CHECK(chooseLanguage("de;q=0.000, it") == Language::Italian);
  CHECK(chooseLanguage("en;q=0, es;q=0.2") == Language::Spanish);
  CHECK(chooseLanguage("en;q=0") == Language::English);  // nothing else acceptable: English all the same
}

TEST_CASE("Accept-Language: ties keep the header's order") {
  CHECK(chooseLanguage("fr, de") == Language::French);
  CHECK(chooseLanguage("de, fr") == Language::German);
  CHECK(chooseLanguage("it;q=0.5, es;q=0.5") == Language::Italian);
  CHECK(chooseLanguage("es;q=0.5, it;q=0.5") == Language::Spanish);
  CHECK(chooseLanguage("pt;q=0.5, de;q=0.8, fr;q=0.8") == Language::German);
}

TEST_CASE("Accept-Language: * stands for a language the header does not name") {
  CHECK(chooseLanguage("*") == Language::English);
  CHECK(chooseLanguage("fr;q=0.5, *;q=0.8") == Language::English);  // any other: English first
  CHECK(chooseLanguage("en;q=0.1, *;q=0.8") == Language::German);   // English is named: the next one
  CHECK(chooseLanguage("en;q=0, *") == Language::German);
  CHECK(chooseLanguage("*;q=0.1, it") == Language::Italian);
  CHECK(chooseLanguage("en;q=0,de;q=0,fr;q=0,es;q=0,it;q=0, *") == Language::Portuguese);
  CHECK(chooseLanguage("*;q=0, fr;q=0.1") == Language::French);
}

TEST_CASE("Accept-Language: what cannot be read is passed over") {
  CHECK(chooseLanguage(" , ,de ,") == Language::German);
  CHECK(chooseLanguage("de;q=1.5, fr;q=0.2") == Language::French);  // q above 1
  CHECK(chooseLanguage("de;q=x, it;q=0.2") == Language::Italian);
  CHECK(chooseLanguage("de;q=, it;q=0.2") == Language::Italian);
  CHECK(chooseLanguage("de;q=-1, it;q=0.2") == Language::Italian);
  CHECK(chooseLanguage("de ; q = 0.9 , it;q=0.2") == Language::German);  // spaces around the parameter
  CHECK(chooseLanguage("de;level=1;q=0.4, it;q=0.2") == Language::German);
  CHECK(chooseLanguage("de;Q=0.1, it;q=0.2") == Language::Italian);
  CHECK(chooseLanguage("fr;q=1.000") == Language::French);
  CHECK(chooseLanguage("fr;q=0.0001, it;q=0.0009") == Language::English);  // both round down to 0
  std::string endless;
  for (int i = 0; i < 1000; ++i) endless += "ja, ";
  CHECK(chooseLanguage(endless + "de") == Language::English);  // read up to 64 entries
}

TEST_CASE("the estimated wait in words, in English") {
  CHECK(etaWords(Language::English, std::nullopt) == "");
  CHECK(etaWords(Language::English, -1) == "");
  CHECK(etaWords(Language::English, 0) == "less than a minute");
  CHECK(etaWords(Language::English, 59) == "less than a minute");
  CHECK(etaWords(Language::English, 60) == "about 1 minute");
  CHECK(etaWords(Language::English, 89) == "about 1 minute");
  CHECK(etaWords(Language::English, 90) == "about 2 minutes");
  CHECK(etaWords(Language::English, 240) == "about 4 minutes");
  CHECK(etaWords(Language::English, 59 * 60 + 29) == "about 59 minutes");
  CHECK(etaWords(Language::English, 59 * 60 + 30) == "about 1 hour");
  CHECK(etaWords(Language::English, 89 * 60) == "about 1 hour");
  CHECK(etaWords(Language::English, 90 * 60) == "about 2 hours");
  CHECK(etaWords(Language::English, 26 * 3600) == "about 26 hours");
  CHECK(etaWords(Language::English, INT64_MAX).starts_with("about "));
}

TEST_CASE("the estimated wait in words, in every language") {
  struct Case {
    Language language;
    const char* unknown;
    const char* under_a_minute;
    const char* one_minute;
    const char* four_minutes;
    const char* one_hour;
    const char* three_hours;
  };
  const Case cases[] = {
      {Language::English, "", "less than a minute", "about 1 minute", "about 4 minutes", "about 1 hour",
       "about 3 hours"},
      {Language::German, "", "weniger als eine Minute", "ungefähr 1 Minute", "ungefähr 4 Minuten", "ungefähr 1 Stunde",
       "ungefähr 3 Stunden"},
      {Language::French, "", "moins d'une minute", "environ 1 minute", "environ 4 minutes", "environ 1 heure",
       "environ 3 heures"},
      {Language::Spanish, "", "menos de un minuto", "aproximadamente 1 minuto", "aproximadamente 4 minutos",
       "aproximadamente 1 hora", "aproximadamente 3 horas"},
      {Language::Italian, "", "meno di un minuto", "circa 1 minuto", "circa 4 minuti", "circa 1 ora", "circa 3 ore"},
      {Language::Portuguese, "", "menos de um minuto", "cerca de 1 minuto", "cerca de 4 minutos", "cerca de 1 hora",
       "cerca de 3 horas"},
  };
  CHECK(std::size(cases) == kLanguages.size());
  for (const Case& c : cases) {
    INFO(languageCode(c.language));
    CHECK(etaWords(c.language, std::nullopt) == c.unknown);
    CHECK(etaWords(c.language, 12) == c.under_a_minute);
    CHECK(etaWords(c.language, 75) == c.one_minute);
    CHECK(etaWords(c.language, 4 * 60 + 10) == c.four_minutes);
    CHECK(etaWords(c.language, 3600 + 600) == c.one_hour);
    CHECK(etaWords(c.language, 3 * 3600 - 100) == c.three_hours);
  }
}

TEST_CASE("the script's strings: JSON with every string the script needs, none it does not") {
  for (Language l : kLanguages) {
    INFO(languageCode(l));
    std::string json = scriptStrings(l);
    CHECK(json.find('<') == std::string::npos);  // nothing can close the <script> element
    nlohmann::json parsed = nlohmann::json::parse(json);
    REQUIRE(parsed.is_object());
    for (size_t i = 0; i < kTextCount; ++i) {
      std::string name(textName(nth(i)));
      INFO(name);
      if (concert::common::scriptText(nth(i))) {
        REQUIRE(parsed.contains(name));
        CHECK(parsed[name].get<std::string>() == text(l, nth(i)));
      } else {
        CHECK_FALSE(parsed.contains(name));
      }
    }
    for (const char* needed : {"Admitting", "NoCookies", "CookiesTitle", "InLine", "NextInLine", "Checking",
                               "EtaLessThanMinute", "EtaMinute", "EtaMinutes", "EtaHour", "EtaHours"})
      CHECK(parsed.contains(needed));
  }
}
