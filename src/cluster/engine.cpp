// The engine's keys and scripts (engine.h).
#include "cluster/engine.h"

#include <cinttypes>
#include <cstdio>

#include <hiredis/hiredis.h>
#include <openssl/evp.h>

namespace concert::cluster {

Reply convertReply(const redisReply* r) {
  Reply out;
  if (!r) return out;
  switch (r->type) {
    case REDIS_REPLY_INTEGER:
      out.type = Reply::Type::Integer;
      out.integer = r->integer;
      break;
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
      out.type = Reply::Type::String;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_ERROR:
      out.type = Reply::Type::Error;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_ARRAY:
      out.type = Reply::Type::Array;
      for (size_t i = 0; i < r->elements; ++i) out.elements.push_back(convertReply(r->element[i]));
      break;
    default: break;
  }
  return out;
}

namespace {

std::vector<std::string> keys(std::string_view room, std::initializer_list<const char*> names) {
  std::vector<std::string> out;
  for (const char* name : names) out.push_back(std::string(room) + ":" + name);
  return out;
}

std::optional<int64_t> integerOf(const Reply& r) {
  if (r.type == Reply::Type::Integer) return r.integer;
  if (r.type == Reply::Type::String) {
    if (r.str.empty()) return std::nullopt;
    int64_t v = 0;
    size_t i = r.str[0] == '-' ? 1 : 0;
    if (i == r.str.size()) return std::nullopt;
    for (; i < r.str.size(); ++i) {
      if (r.str[i] < '0' || r.str[i] > '9') return std::nullopt;
      v = v * 10 + (r.str[i] - '0');
    }
    return r.str[0] == '-' ? -v : v;
  }
  return std::nullopt;
}

// The client key's hex text reads as bytes in order; a key word is those
// bytes in memory order (little-endian here), as clients.h keeps them.
uint64_t bswap(uint64_t v) {
  return __builtin_bswap64(v);
}

std::optional<uint64_t> hexOf(std::string_view s) {
  if (s.empty() || s.size() > 16) return std::nullopt;
  uint64_t v = 0;
  for (char c : s) {
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) return std::nullopt;
    v = v << 4 | static_cast<uint64_t>(d);
  }
  return v;
}

}  // namespace

std::vector<std::string> notesKeys(std::string_view room) {
  return keys(room, {"line", "tix", "seen", "ver", "seq", "order", "back", "missed", "ready", "epoch", "promoted",
                     "revoked", "marks", "clients", "full", "marklog", "gone", "gonefloor", "held", "pre"});
}

std::vector<std::string> syncKeys(std::string_view room) {
  return keys(room, {"hosts", "resv", "busy", "cap", "mode", "line", "seen", "tix", "ver", "epoch", "grace", "seq",
                     "bans", "back", "missed", "ready", "order", "promoted", "revoked", "marks", "want", "held",
                     "clients", "full", "marklog", "gone", "gonefloor", "pre"});
}

std::vector<std::string> fetchKeys(std::string_view room) {
  return keys(room, {"line", "tix", "back", "missed", "gone", "gonefloor", "ver"});
}

std::vector<std::string> releaseKeys(std::string_view room) {
  return keys(room, {"hosts", "resv", "busy", "want", "held"});
}

std::string scriptSha(std::string_view script) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  if (EVP_Digest(script.data(), script.size(), digest, &size, EVP_sha1(), nullptr) != 1) return {};
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < size; ++i) {
    out += kDigits[digest[i] >> 4];
    out += kDigits[digest[i] & 15];
  }
  return out;
}

std::string noteArg(const shm::ClusterNoteValue& note, bool reenroll) {
  char buf[96];
  switch (note.kind) {
    case shm::NoteKind::Enroll:
      if (note.key_a != 0 || note.key_b != 0)  // the client key's bytes in order, as bans carry it
        std::snprintf(buf, sizeof buf, "%c %" PRIu64 " %016" PRIx64 " %" PRId64 " %016" PRIx64 "%016" PRIx64,
                      reenroll ? 'R' : 'E', note.id, note.nonce, note.issued_ms, bswap(note.key_a), bswap(note.key_b));
      else
        std::snprintf(buf, sizeof buf, "%c %" PRIu64 " %016" PRIx64 " %" PRId64, reenroll ? 'R' : 'E', note.id,
                      note.nonce, note.issued_ms);
      break;
    case shm::NoteKind::Touch: std::snprintf(buf, sizeof buf, "T %" PRIu64, note.id); break;
    case shm::NoteKind::Keep: std::snprintf(buf, sizeof buf, "K %" PRIu64, note.id); break;
    case shm::NoteKind::Wait: std::snprintf(buf, sizeof buf, "W %" PRIu64, note.id); break;
    case shm::NoteKind::Leave: std::snprintf(buf, sizeof buf, "L %" PRIu64, note.id); break;
    case shm::NoteKind::Promote:
      std::snprintf(buf, sizeof buf, "P %" PRIu64 " %016" PRIx64 " %" PRId64, note.id, note.nonce, note.issued_ms);
      break;
    case shm::NoteKind::Revoke:  // the pass id's two words, in hex
      std::snprintf(buf, sizeof buf, "V %016" PRIx64 " %016" PRIx64 " %" PRId64, note.id, note.nonce, note.issued_ms);
      break;
  }
  return buf;
}

std::vector<std::string> syncArgs(const SyncRequest& r) {
  std::vector<std::string> out = {r.host,
                                  std::to_string(r.lease_ttl_ms),
                                  std::to_string(r.lease),
                                  std::to_string(r.busy),
                                  std::to_string(r.wanted),
                                  std::to_string(r.cap),
                                  r.push_cap ? "1" : "0",
                                  r.mode,
                                  r.push_mode ? "1" : "0",
                                  r.epoch,
                                  r.new_epoch,
                                  std::to_string(r.block),
                                  std::to_string(r.reap_limit),
                                  std::to_string(r.claim_window_ms),
                                  std::to_string(r.marks_version),
                                  r.held ? "1" : "0",
                                  r.shuffle ? "1" : "0"};
  out.insert(out.end(), r.bans.begin(), r.bans.end());
  return out;
}

static std::optional<shm::ClusterMarkValue> markOf(MarkList list, std::string_view member, int64_t until) {
  auto halves = [](std::string_view m) -> std::pair<std::string_view, std::string_view> {
    const size_t colon = m.find(':');
    if (colon == std::string_view::npos) return {};
    return {m.substr(0, colon), m.substr(colon + 1)};
  };
  switch (list) {
    case MarkList::Bans:
    case MarkList::Full: {  // a client key: 32 hex digits, its bytes in order
      std::optional<uint64_t> a = hexOf(member.substr(0, 16));
      std::optional<uint64_t> b = member.size() == 32 ? hexOf(member.substr(16)) : std::nullopt;
      if (!a || !b) return std::nullopt;
      return shm::ClusterMarkValue{bswap(*a), bswap(*b), until};
    }
    case MarkList::Promoted: {  // "id:nonce", id decimal, nonce hex
      const auto [id_text, nonce_text] = halves(member);
      Reply id;
      id.type = Reply::Type::String;
      id.str = std::string(id_text);
      std::optional<int64_t> ticket = integerOf(id);
      std::optional<uint64_t> nonce = hexOf(nonce_text);
      if (!ticket || *ticket <= 0 || !nonce) return std::nullopt;
      return shm::ClusterMarkValue{static_cast<uint64_t>(*ticket), *nonce, until};
    }
    case MarkList::Revoked: {  // "a:b", both hex
      const auto [a_text, b_text] = halves(member);
      std::optional<uint64_t> a = hexOf(a_text), b = hexOf(b_text);
      if (!a || !b) return std::nullopt;
      return shm::ClusterMarkValue{*a, *b, until};
    }
  }
  return std::nullopt;
}

std::optional<SyncReply> parseSync(const Reply& reply) {
  if (reply.type != Reply::Type::Array || reply.elements.size() != 21) return std::nullopt;
  const std::vector<Reply>& e = reply.elements;
  SyncReply out;
  std::optional<int64_t> n[21];
  for (size_t i : {0, 1, 2, 3, 4, 5, 8, 9, 10, 11, 12, 17, 18, 20}) {
    n[i] = integerOf(e[i]);
    if (!n[i]) return std::nullopt;
  }
  if (e[6].type != Reply::Type::String || e[7].type != Reply::Type::String) return std::nullopt;
  out.round.reserved = *n[0];
  out.round.hosts = static_cast<int32_t>(*n[1]);
  out.round.horizon = *n[2];
  out.round.depth = *n[3];
  out.version = *n[4];
  out.round.cap = *n[5];
  out.mode = e[6].str;
  out.epoch = e[7].str;
  out.lost = *n[8] != 0;
  out.block_first = static_cast<uint64_t>(*n[9]);
  out.reaped = *n[10];
  out.missed = *n[11];
  out.marks_version = *n[12];
  out.removed = *n[17];
  out.shuffled = *n[20];
  if (*n[18] < 0 || *n[18] > 2) return std::nullopt;
  out.marks = static_cast<SyncReply::Marks>(*n[18]);
  // Member, score pairs: bans (32 hex digits, end), promotions ("id:nonce",
  // id decimal, nonce hex) and ended sessions ("a:b", both hex).
  auto pairs = [](const Reply& list, auto&& add) {
    if (list.type != Reply::Type::Array || list.elements.size() % 2 != 0) return false;
    for (size_t i = 0; i + 1 < list.elements.size(); i += 2) {
      std::optional<int64_t> until = integerOf(list.elements[i + 1]);
      if (list.elements[i].type != Reply::Type::String || !until) return false;
      add(list.elements[i].str, *until);
    }
    return true;
  };
  auto list = [&](const Reply& pairs_of, MarkList which, std::vector<shm::ClusterMarkValue>& into) {
    return pairs(pairs_of, [&](const std::string& member, int64_t until) {
      if (std::optional<shm::ClusterMarkValue> mark = markOf(which, member, until)) into.push_back(*mark);
    });
  };
  const bool bans_ok = list(e[13], MarkList::Bans, out.bans) && list(e[16], MarkList::Full, out.full);
  const bool promoted_ok = list(e[14], MarkList::Promoted, out.promoted);
  const bool revoked_ok = list(e[15], MarkList::Revoked, out.revoked);
  // Changes: "version list member score", score "-" when the mark was taken off.
  if (e[19].type != Reply::Type::Array) return std::nullopt;
  for (const Reply& change : e[19].elements) {
    if (change.type != Reply::Type::String) return std::nullopt;
    char code = 0;
    char member[96] = {}, score[24] = {};
    long long version = 0;
    if (std::sscanf(change.str.c_str(), "%lld %c %95s %23s", &version, &code, member, score) != 4) return std::nullopt;
    const std::string_view codes = "bprf";
    const size_t at = codes.find(code);
    if (at == std::string_view::npos) return std::nullopt;
    Reply until_text;
    until_text.type = Reply::Type::String;
    until_text.str = score;
    std::optional<int64_t> until = std::string_view(score) == "-" ? std::optional<int64_t>(0) : integerOf(until_text);
    if (!until) return std::nullopt;
    const auto which = static_cast<MarkList>(at);
    if (std::optional<shm::ClusterMarkValue> mark = markOf(which, member, *until))
      out.changes.push_back({which, *mark});
  }
  if (!bans_ok || !promoted_ok || !revoked_ok) return std::nullopt;
  return out;
}

std::optional<FetchReply> parseFetch(const Reply& reply) {
  if (reply.type != Reply::Type::Array || reply.elements.size() < 6) return std::nullopt;
  const std::vector<Reply>& e = reply.elements;
  FetchReply out;
  std::optional<int64_t> head[5];
  for (size_t i = 0; i < 5; ++i)
    if (!(head[i] = integerOf(e[i]))) return std::nullopt;
  out.version = *head[0];
  out.depth = *head[1];
  out.reset = *head[2] != 0;
  out.more = *head[3] != 0;
  const int64_t gone = *head[4];
  size_t at = 5;
  if (gone < 0 || e.size() - at < static_cast<size_t>(gone) + 1) return std::nullopt;
  for (int64_t i = 0; i < gone; ++i, ++at) {
    std::optional<int64_t> id = integerOf(e[at]);
    if (!id || *id <= 0) return std::nullopt;
    out.gone.push_back(static_cast<uint64_t>(*id));
  }
  std::optional<int64_t> count = integerOf(e[at++]);
  if (!count || *count < 0 || e.size() - at != static_cast<size_t>(*count) * 4) return std::nullopt;
  for (int64_t i = 0; i < *count; ++i, at += 4) {
    std::optional<int64_t> id = integerOf(e[at]);
    std::optional<int64_t> order = integerOf(e[at + 2]);
    const std::string& code = e[at + 1].str;
    const std::string& tix = e[at + 3].str;
    if (!id || *id <= 0 || !order || code.size() != 1) return std::nullopt;
    const size_t colon = tix.find(':');
    if (colon == std::string::npos) continue;  // a ticket half gone: skipped
    std::optional<uint64_t> nonce = hexOf(std::string_view(tix).substr(0, colon));
    Reply issued_text;  // "nonce:issued" or "nonce:issued:client"
    issued_text.type = Reply::Type::String;
    issued_text.str = tix.substr(colon + 1, tix.find(':', colon + 1) - colon - 1);
    std::optional<int64_t> issued = integerOf(issued_text);
    if (!nonce || !issued) continue;
    shm::LineSection section;
    switch (code[0]) {
      case 'b': section = shm::LineSection::Returned; break;
      case 'w': section = shm::LineSection::Waiting; break;
      case 'm': section = shm::LineSection::Missed; break;
      default: return std::nullopt;
    }
    out.placed.push_back({{static_cast<uint64_t>(*id), *nonce, *issued, section}, *order});
  }
  return out;
}

}  // namespace concert::cluster
