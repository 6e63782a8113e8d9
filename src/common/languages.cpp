// The room's words in six languages; see languages.h.
#include "common/languages.h"

#include <vector>

#include "common/json.h"

namespace concert::common {
namespace {

constexpr std::array<std::string_view, kLanguageCount> kCodes = {"en", "de", "fr", "es", "it", "pt"};

struct Row {
  Text text;
  std::string_view name;
  bool script;                                         // the waiting page's script needs it
  std::array<std::string_view, kLanguageCount> words;  // in kLanguages order: en de fr es it pt
};

// clang-format off
// Every string of the room's pages. French puts a no-break space (U+00A0)
// before a colon. {n} is a number, {nth} (English only) an ordinal.
constexpr std::array<Row, kTextCount> kTable = {{
  {Text::Title, "Title", false, {
    "You're in line",
    "Sie sind in der Warteschlange",
    "Vous êtes dans la file d'attente",
    "Estás en la fila",
    "Sei in coda",
    "Está na fila de espera"}},
  {Text::Lead, "Lead", false, {
    "The site is busy right now. Keep this page open: it moves you forward by itself.",
    "Die Website ist gerade stark gefragt. Lassen Sie diese Seite geöffnet: Sie rücken von selbst vor.",
    "Le site est très sollicité en ce moment. Gardez cette page ouverte\u00a0: elle vous fait avancer toute seule.",
    "El sitio está muy solicitado en este momento. Mantén esta página abierta: avanzarás automáticamente.",
    "Il sito è molto richiesto in questo momento. Tieni aperta questa pagina: avanzerai automaticamente.",
    "O site está muito solicitado neste momento. Mantenha esta página aberta: avança automaticamente."}},
  {Text::PositionLabel, "PositionLabel", false, {
    "Your place in line",
    "Ihr Platz in der Warteschlange",
    "Votre place dans la file",
    "Tu lugar en la fila",
    "Il tuo posto in coda",
    "O seu lugar na fila"}},
  {Text::Waiting, "Waiting", false, {
    "Waiting for your turn…",
    "Sie warten, bis Sie an der Reihe sind…",
    "En attente de votre tour…",
    "Esperando tu turno…",
    "In attesa del tuo turno…",
    "À espera da sua vez…"}},
  {Text::EtaLabel, "EtaLabel", false, {
    "Estimated wait:",
    "Geschätzte Wartezeit:",
    "Attente estimée\u00a0:",
    "Espera estimada:",
    "Attesa stimata:",
    "Espera estimada:"}},
  {Text::Vip, "Vip", false, {
    "VIP pass active",
    "VIP-Pass aktiv",
    "Pass VIP actif",
    "Pase VIP activo",
    "Pass VIP attivo",
    "Passe VIP ativo"}},
  {Text::SkipTitle, "SkipTitle", false, {
    "Skip the line",
    "Warteschlange überspringen",
    "Passer devant",
    "Saltar la fila",
    "Salta la coda",
    "Passar à frente"}},
  {Text::SkipFor, "SkipFor", false, {
    "Move to the front for",
    "Ganz nach vorne für",
    "Passez en tête pour",
    "Pasa al principio por",
    "Passa in testa per",
    "Passe para a frente por"}},
  {Text::SkipPerPlace, "SkipPerPlace", false, {
    "per place",
    "pro Platz",
    "par place",
    "por puesto",
    "a posto",
    "por lugar"}},
  {Text::Note, "Note", false, {
    "You keep your place as long as this page stays open.",
    "Ihr Platz bleibt Ihnen, solange diese Seite geöffnet ist.",
    "Vous gardez votre place tant que cette page reste ouverte.",
    "Conservas tu lugar mientras esta página siga abierta.",
    "Mantieni il tuo posto finché questa pagina resta aperta.",
    "Mantém o seu lugar enquanto esta página estiver aberta."}},
  {Text::NoScript, "NoScript", false, {
    "This page refreshes itself every few seconds. Keep it open: it keeps your place and lets you in when it is "
    "your turn.",
    "Diese Seite lädt sich alle paar Sekunden selbst neu. Lassen Sie sie geöffnet: So behalten Sie Ihren Platz und "
    "werden eingelassen, sobald Sie an der Reihe sind.",
    "Cette page se recharge d'elle-même toutes les quelques secondes. Gardez-la ouverte\u00a0: elle garde votre "
    "place et vous fait entrer quand c'est votre tour.",
    "Esta página se actualiza sola cada pocos segundos. Mantenla abierta: conserva tu lugar y te deja entrar cuando "
    "sea tu turno.",
    "Questa pagina si aggiorna da sola ogni pochi secondi. Tienila aperta: conserva il tuo posto e ti fa entrare "
    "quando è il tuo turno.",
    "Esta página atualiza-se sozinha a cada poucos segundos. Mantenha-a aberta: guarda o seu lugar e deixa-o "
    "entrar quando for a sua vez."}},
  {Text::CookiesTitle, "CookiesTitle", true, {
    "Cookies are required",
    "Cookies sind erforderlich",
    "Les cookies sont nécessaires",
    "Se necesitan cookies",
    "I cookie sono necessari",
    "São necessários cookies"}},
  {Text::NoCookies, "NoCookies", true, {
    "Your browser did not keep the cookie that holds your place in line. Please allow cookies for this site, then "
    "reload the page.",
    "Ihr Browser hat das Cookie nicht behalten, das Ihren Platz in der Warteschlange hält. Bitte erlauben Sie "
    "Cookies für diese Website und laden Sie die Seite dann neu.",
    "Votre navigateur n'a pas conservé le cookie qui garde votre place dans la file. Autorisez les cookies pour ce "
    "site, puis rechargez la page.",
    "Tu navegador no ha guardado la cookie que conserva tu lugar en la fila. Permite las cookies para este sitio y "
    "vuelve a cargar la página.",
    "Il tuo browser non ha conservato il cookie che tiene il tuo posto in coda. Consenti i cookie per questo sito, "
    "poi ricarica la pagina.",
    "O seu navegador não guardou o cookie que mantém o seu lugar na fila. Permita cookies para este site e depois "
    "recarregue a página."}},
  {Text::Admitting, "Admitting", true, {
    "It's your turn — you're being admitted…",
    "Sie sind an der Reihe – Sie werden eingelassen…",
    "C'est votre tour — vous entrez…",
    "Es tu turno: estás entrando…",
    "È il tuo turno: stai entrando…",
    "É a sua vez — está a entrar…"}},
  {Text::NextInLine, "NextInLine", true, {
    "Almost there — next in line…",
    "Gleich geschafft – Sie sind als Nächstes dran…",
    "Presque\u00a0: c'est bientôt à vous…",
    "Ya casi: tu turno es el siguiente…",
    "Ci siamo quasi: il prossimo turno è il tuo…",
    "Quase lá — a próxima vez é a sua…"}},
  {Text::InLine, "InLine", true, {
    "{nth} in line",
    "Platz {n} in der Warteschlange",
    "Place {n} dans la file",
    "Puesto {n} en la fila",
    "Posto {n} in coda",
    "Lugar {n} na fila"}},
  {Text::Checking, "Checking", true, {
    "Checking…",
    "Wird geprüft…",
    "Vérification…",
    "Comprobando…",
    "Verifica in corso…",
    "A verificar…"}},
  {Text::EtaLessThanMinute, "EtaLessThanMinute", true, {
    "less than a minute",
    "weniger als eine Minute",
    "moins d'une minute",
    "menos de un minuto",
    "meno di un minuto",
    "menos de um minuto"}},
  {Text::EtaMinute, "EtaMinute", true, {
    "about 1 minute",
    "ungefähr 1 Minute",
    "environ 1 minute",
    "aproximadamente 1 minuto",
    "circa 1 minuto",
    "cerca de 1 minuto"}},
  {Text::EtaMinutes, "EtaMinutes", true, {
    "about {n} minutes",
    "ungefähr {n} Minuten",
    "environ {n} minutes",
    "aproximadamente {n} minutos",
    "circa {n} minuti",
    "cerca de {n} minutos"}},
  {Text::EtaHour, "EtaHour", true, {
    "about 1 hour",
    "ungefähr 1 Stunde",
    "environ 1 heure",
    "aproximadamente 1 hora",
    "circa 1 ora",
    "cerca de 1 hora"}},
  {Text::EtaHours, "EtaHours", true, {
    "about {n} hours",
    "ungefähr {n} Stunden",
    "environ {n} heures",
    "aproximadamente {n} horas",
    "circa {n} ore",
    "cerca de {n} horas"}},
  {Text::FullTitle, "FullTitle", false, {
    "The waiting room is full",
    "Der Warteraum ist voll",
    "La salle d'attente est pleine",
    "La sala de espera está llena",
    "La sala d'attesa è piena",
    "A sala de espera está cheia"}},
  {Text::FullText, "FullText", false, {
    "So many people are waiting right now that we can't add you to the line. Please try again in a few minutes.",
    "Gerade warten so viele Menschen, dass wir Sie nicht in die Warteschlange aufnehmen können. Bitte versuchen Sie "
    "es in ein paar Minuten erneut.",
    "Tant de personnes attendent en ce moment que nous ne pouvons pas vous ajouter à la file. Veuillez réessayer "
    "dans quelques minutes.",
    "Hay tanta gente esperando en este momento que no podemos añadirte a la fila. Vuelve a intentarlo dentro de unos "
    "minutos.",
    "In questo momento ci sono così tante persone in attesa che non possiamo aggiungerti alla coda. Riprova tra "
    "qualche minuto.",
    "Neste momento há tantas pessoas à espera que não conseguimos juntá-lo à fila. Tente novamente dentro de alguns "
    "minutos."}},
  {Text::BusyTitle, "BusyTitle", false, {
    "Busy right now",
    "Gerade ausgelastet",
    "Très sollicité en ce moment",
    "Ocupado en este momento",
    "Occupato in questo momento",
    "Ocupado neste momento"}},
  {Text::BusyText, "BusyText", false, {
    "The site is at capacity this moment and your request was not sent. Please try again in a few seconds.",
    "Die Website ist in diesem Moment voll ausgelastet, Ihre Anfrage wurde nicht weitergeleitet. Bitte versuchen "
    "Sie es in ein paar Sekunden erneut.",
    "Le site est à pleine capacité en ce moment et votre demande n'a pas été transmise. Veuillez réessayer dans "
    "quelques secondes.",
    "El sitio está al máximo de su capacidad en este momento y tu solicitud no se ha enviado. Vuelve a intentarlo "
    "dentro de unos segundos.",
    "Il sito è al limite della capacità in questo momento e la tua richiesta non è stata inviata. Riprova tra "
    "qualche secondo.",
    "O site está no limite da capacidade neste momento e o seu pedido não foi enviado. Tente novamente dentro de "
    "alguns segundos."}},
  {Text::MaintenanceTitle, "MaintenanceTitle", false, {
    "Down for maintenance",
    "Wartungsarbeiten",
    "Maintenance en cours",
    "En mantenimiento",
    "Manutenzione in corso",
    "Em manutenção"}},
  {Text::MaintenanceText, "MaintenanceText", false, {
    "The site is closed for a short while for maintenance. Please come back in a few minutes.",
    "Die Website ist für kurze Zeit wegen Wartungsarbeiten geschlossen. Bitte schauen Sie in ein paar Minuten wieder "
    "vorbei.",
    "Le site est fermé quelques instants pour maintenance. Veuillez revenir dans quelques minutes.",
    "El sitio está cerrado un momento por mantenimiento. Vuelve dentro de unos minutos.",
    "Il sito è chiuso per poco tempo per manutenzione. Torna tra qualche minuto.",
    "O site está fechado por pouco tempo para manutenção. Volte dentro de alguns minutos."}},
  {Text::SaleStarts, "SaleStarts", true, {
    "The sale starts at {time} UTC, in {in}.",
    "Der Verkauf beginnt um {time} UTC, in {in}.",
    "La vente commence à {time} UTC, dans {in}.",
    "La venta empieza a las {time} UTC, dentro de {in}.",
    "La vendita inizia alle {time} UTC, tra {in}.",
    "A venda começa às {time} UTC, daqui a {in}."}},
}};
// clang-format on

constexpr bool tableInOrder() {
  for (size_t i = 0; i < kTable.size(); ++i)
    if (static_cast<size_t>(kTable[i].text) != i) return false;
  return true;
}
static_assert(tableInOrder(), "kTable rows must follow the order of enum Text");

const Row& row(Text t) {
  return kTable[static_cast<size_t>(t)];
}

char lower(char c) {
  return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
}

bool equalsLower(std::string_view a, std::string_view lower_b) {
  if (a.size() != lower_b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (lower(a[i]) != lower_b[i]) return false;
  return true;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// A qvalue in thousandths ("0.8" -> 800, "1" -> 1000); nullopt when malformed.
std::optional<int> parseQ(std::string_view v) {
  if (v.empty() || (v[0] != '0' && v[0] != '1')) return std::nullopt;
  int q = (v[0] - '0') * 1000;
  v.remove_prefix(1);
  if (!v.empty()) {
    if (v[0] != '.') return std::nullopt;
    v.remove_prefix(1);
    int scale = 100;
    for (char c : v) {
      if (c < '0' || c > '9') return std::nullopt;
      q += (c - '0') * scale;  // digits past the third add nothing
      scale /= 10;
    }
  }
  if (q > 1000) return std::nullopt;
  return q;
}

std::string replaceN(std::string_view pattern, std::string_view key, std::string_view value) {
  std::string out(pattern);
  for (size_t at = out.find(key); at != std::string::npos; at = out.find(key, at + value.size()))
    out.replace(at, key.size(), value);
  return out;
}

}  // namespace

std::string_view languageCode(Language language) {
  return kCodes[static_cast<size_t>(language)];
}

std::string_view text(Language language, Text t) {
  return row(t).words[static_cast<size_t>(language)];
}

std::string_view textName(Text t) {
  return row(t).name;
}

std::optional<Text> textByName(std::string_view name) {
  for (const Row& r : kTable)
    if (r.name == name) return r.text;
  return std::nullopt;
}

bool scriptText(Text t) {
  return row(t).script;
}

Language chooseLanguage(std::string_view header) {
  struct Entry {
    std::optional<Language> language;  // nullopt: "*"
    int q;
  };
  constexpr size_t kMaxItems = 64;  // a longer header is read up to here
  std::vector<Entry> entries;
  std::array<bool, kLanguageCount> named{};
  for (size_t items = 0; !header.empty() && items < kMaxItems; ++items) {
    size_t comma = header.find(',');
    std::string_view item = header.substr(0, comma);
    header.remove_prefix(comma == std::string_view::npos ? header.size() : comma + 1);
    size_t semi = item.find(';');
    std::string_view tag = trim(item.substr(0, semi));
    if (tag.empty()) continue;
    std::optional<int> q = 1000;
    for (std::string_view params = semi == std::string_view::npos ? std::string_view() : item.substr(semi + 1);
         !params.empty();) {
      size_t next = params.find(';');
      std::string_view param = trim(params.substr(0, next));
      params.remove_prefix(next == std::string_view::npos ? params.size() : next + 1);
      if (param.size() >= 2 && lower(param[0]) == 'q' && trim(param.substr(1)).starts_with('=')) {
        std::string_view value = trim(param.substr(1));
        q = parseQ(trim(value.substr(1)));
      }
    }
    if (!q) continue;  // a malformed q-value makes the entry unusable
    if (tag == "*") {
      entries.push_back({std::nullopt, *q});
      continue;
    }
    std::string_view primary = tag.substr(0, tag.find_first_of("-_"));
    for (Language l : kLanguages) {
      if (!equalsLower(primary, languageCode(l))) continue;
      named[static_cast<size_t>(l)] = true;
      entries.push_back({l, *q});
    }
  }
  std::optional<Language> any;  // what "*" stands for: the first supported language not named
  for (Language l : kLanguages)
    if (!named[static_cast<size_t>(l)]) {
      any = l;
      break;
    }
  std::optional<Language> best;
  int best_q = 0;
  for (const Entry& e : entries) {
    std::optional<Language> candidate = e.language ? e.language : any;
    if (!candidate || e.q <= best_q) continue;  // q=0 never wins; ties keep the earlier entry
    best = candidate;
    best_q = e.q;
  }
  return best.value_or(Language::English);
}

std::string etaWords(Language language, std::optional<int64_t> seconds) {
  if (!seconds || *seconds < 0) return std::string();
  if (*seconds < 60) return std::string(text(language, Text::EtaLessThanMinute));
  int64_t minutes = *seconds / 60 + (*seconds % 60 >= 30 ? 1 : 0);
  if (minutes < 60) {
    if (minutes == 1) return std::string(text(language, Text::EtaMinute));
    return replaceN(text(language, Text::EtaMinutes), "{n}", std::to_string(minutes));
  }
  int64_t hours = minutes / 60 + (minutes % 60 >= 30 ? 1 : 0);
  if (hours == 1) return std::string(text(language, Text::EtaHour));
  return replaceN(text(language, Text::EtaHours), "{n}", std::to_string(hours));
}

std::string scriptStrings(Language language) {
  JsonObject object;
  for (const Row& r : kTable)
    if (r.script) object.add(r.name, r.words[static_cast<size_t>(language)]);
  return object.str();
}

}  // namespace concert::common
