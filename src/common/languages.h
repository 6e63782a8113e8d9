// The words of the room's own pages (the waiting page, "the room is full",
// "busy right now", the maintenance page) in every language Concert speaks, the choice of one by
// Accept-Language, and the estimated wait in words. Every string lives in the
// one table in languages.cpp; the HTML pages name them as {{.Text.NAME}}.
// Pure data and pure functions: nothing here is shared between processes.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace concert::common {

enum class Language : uint8_t { English, German, French, Spanish, Italian, Portuguese };
inline constexpr size_t kLanguageCount = 6;
inline constexpr std::array<Language, kLanguageCount> kLanguages = {
    Language::English, Language::German, Language::French, Language::Spanish, Language::Italian, Language::Portuguese};

// The strings, by the name a page uses for them ({{.Text.Title}}).
enum class Text : uint8_t {
  Title,              // the waiting page's title and heading
  Lead,               // the line under it
  PositionLabel,      // the label of the big number
  Waiting,            // the status before the first update
  EtaLabel,           // "Estimated wait:" before the words
  Vip,                // the badge of a visitor with a pass
  SkipTitle,          // skip-the-line card: heading and button
  SkipFor,            // "Move to the front for" $X
  SkipPerPlace,       // ($Y "per place")
  Note,               // the small print
  NoScript,           // the <noscript> text: the page refreshes itself
  CookiesTitle,       // the heading when cookies are refused
  NoCookies,          // what to do about it
  Admitting,          // the status when the turn has come
  NextInLine,         // the status at position 1
  InLine,             // the status further back: {n} the position, {nth} its English ordinal
  Checking,           // the status while the server cannot be reached
  EtaLessThanMinute,  // the wait in words: under a minute
  EtaMinute,          // one minute
  EtaMinutes,         // {n} minutes
  EtaHour,            // one hour
  EtaHours,           // {n} hours
  FullTitle,          // the "room is full" page
  FullText,
  BusyTitle,  // the "busy right now" page
  BusyText,
  MaintenanceTitle,  // the maintenance page (-mode reject)
  MaintenanceText,
  SaleStarts,  // a scheduled sale's pre-queue: {time} the start (HH:MM:SS UTC), {in} how long until it
};
inline constexpr size_t kTextCount = static_cast<size_t>(Text::SaleStarts) + 1;

// "en", "de", "fr", "es", "it", "pt": the value of <html lang> and {{.Lang}}.
std::string_view languageCode(Language language);

// The string `text` in `language` (UTF-8; never contains < > & or ").
std::string_view text(Language language, Text text);

// The name of a string ("Title") and the string of a name.
std::string_view textName(Text text);
std::optional<Text> textByName(std::string_view name);

// Whether the waiting page's script needs the string ({{.Strings}} carries these).
bool scriptText(Text text);

// The language for an Accept-Language header (several joined with ", " are
// one list): the supported language with the highest q-value, ties going to
// the earlier entry. A region or script tag matches its language (de-AT is
// German), case does not matter, q=0 rules a language out, "*" stands for
// any supported language the header does not name (English first). English
// when nothing matches or the header is absent.
Language chooseLanguage(std::string_view accept_language);

// The estimated wait in words: "less than a minute" under 60 s, else "about N
// minutes" rounded to the nearest minute, from 60 minutes on "about N hours"
// rounded to the nearest hour. Empty when unknown (nullopt or negative).
std::string etaWords(Language language, std::optional<int64_t> seconds);

// The strings the waiting page's script needs, as a JSON object keyed by
// name ({"Admitting":"...",...}); safe inside a <script> element.
std::string scriptStrings(Language language);

}  // namespace concert::common
