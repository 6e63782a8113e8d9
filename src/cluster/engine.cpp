// The engine's keys and scripts (engine.h).
#include "cluster/engine.h"

#include <cinttypes>
#include <cstdio>

namespace concert::cluster {

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
                     "revoked", "marks"});
}

std::vector<std::string> syncKeys(std::string_view room) {
  return keys(room, {"hosts", "resv", "busy", "cap", "mode", "line", "seen", "tix", "ver", "epoch", "grace", "seq",
                     "bans", "back", "missed", "ready", "order", "promoted", "revoked", "marks", "want"});
}

std::vector<std::string> fetchKeys(std::string_view room) {
  return keys(room, {"line", "tix", "back", "missed"});
}

// KEYS: line tix seen ver seq order back missed ready epoch promoted revoked
// marks.
// ARGV: ttl ms, first-poll grace ms, the epoch the host knows ("" = none
// yet), then one note per argument. Answers -1, applying nothing, when the
// engine has another epoch (or none): it lost the room, and the host's next
// SYNC learns so and re-enrolls the old line before these notes.
const char* const kNotesScript = R"lua(
if ARGV[3] ~= '' and redis.call('GET', KEYS[10]) ~= ARGV[3] then return -1 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl, grace = tonumber(ARGV[1]), tonumber(ARGV[2])
local changed = 0
for i = 4, #ARGV do
  local kind, id, nonce, issued = string.match(ARGV[i], '^(%a) (%x+) ?(%x*) ?(%d*)$')
  if kind == 'E' or kind == 'R' then
    if not (redis.call('ZSCORE', KEYS[1], id) or redis.call('ZSCORE', KEYS[7], id) or
            redis.call('ZSCORE', KEYS[8], id)) then
      local n = tonumber(id)
      if n < 70368744177664 and n > tonumber(redis.call('GET', KEYS[5]) or '0') then redis.call('SET', KEYS[5], id) end
      redis.call('ZADD', KEYS[1], redis.call('INCR', KEYS[6]), id)
      redis.call('HSET', KEYS[2], id, nonce .. ':' .. issued)
      redis.call('ZADD', KEYS[3], now + (kind == 'E' and grace or ttl), id)
      changed = changed + 1
    end
  elseif kind == 'P' or kind == 'V' then
    redis.call('ZADD', KEYS[kind == 'P' and 11 or 12], 'GT', issued, id .. ':' .. nonce)
    redis.call('INCR', KEYS[13])
  elseif kind == 'T' or kind == 'K' then
    if kind == 'T' and redis.call('ZSCORE', KEYS[8], id) then
      -- it missed its turn and its holder is back for the page: ahead of the line
      redis.call('ZREM', KEYS[8], id)
      redis.call('ZREM', KEYS[9], id)
      redis.call('ZADD', KEYS[7], redis.call('INCR', KEYS[6]), id)
      redis.call('ZADD', KEYS[3], now + ttl, id)
      changed = changed + 1
    elseif redis.call('ZSCORE', KEYS[1], id) or redis.call('ZSCORE', KEYS[7], id) or
           redis.call('ZSCORE', KEYS[8], id) then
      -- a poll, a stream or a hold keeps it from the TTL and takes no turn back
      redis.call('ZADD', KEYS[3], 'GT', now + ttl, id)
    end
  elseif kind == 'L' then
    if redis.call('ZREM', KEYS[1], id) + redis.call('ZREM', KEYS[7], id) + redis.call('ZREM', KEYS[8], id) > 0 then
      redis.call('HDEL', KEYS[2], id)
      redis.call('ZREM', KEYS[3], id)
      redis.call('ZREM', KEYS[9], id)
      changed = changed + 1
    end
  end
end
if changed > 0 then redis.call('INCR', KEYS[4]) end
return changed
)lua";

// KEYS: hosts resv busy cap mode line seen tix ver epoch grace seq bans back
// missed ready order promoted revoked marks want.
// ARGV: host, lease ttl ms, lease, busy, wanted, cap, push cap, mode, push
// mode, known epoch, new epoch, block, reap limit, claim window ms, the marks
// version the host has, then "key:until" per new ban.
const char* const kSyncScript = R"lua(
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local host, ttl, lease, busy = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local epoch = redis.call('GET', KEYS[10])
if not epoch then
  epoch = ARGV[11]
  redis.call('SET', KEYS[10], epoch)
end
local lost = 0
if ARGV[10] ~= '' and ARGV[10] ~= epoch then
  lost = 1
  if now + ttl > tonumber(redis.call('GET', KEYS[11]) or '0') then
    redis.call('SET', KEYS[11], now + ttl, 'PX', ttl)
  end
end
-- hosts that stopped renewing lose their reservations
for _, h in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)) do
  redis.call('HDEL', KEYS[2], h)
  redis.call('HDEL', KEYS[3], h)
  redis.call('HDEL', KEYS[21], h)
  redis.call('ZREM', KEYS[1], h)
end
redis.call('ZADD', KEYS[1], now + ttl, host)
if ARGV[7] == '1' or not redis.call('GET', KEYS[4]) then redis.call('SET', KEYS[4], ARGV[6]) end
local cap = tonumber(redis.call('GET', KEYS[4]))
if ARGV[9] == '1' or not redis.call('GET', KEYS[5]) then redis.call('SET', KEYS[5], ARGV[8]) end
local mode = redis.call('GET', KEYS[5])
-- this host's share: what it has in flight, plus its part of the free slots
redis.call('HSET', KEYS[3], host, busy)
local resv, used = {}, {}
local flat = redis.call('HGETALL', KEYS[2])
for i = 1, #flat, 2 do resv[flat[i]] = tonumber(flat[i + 1]) end
flat = redis.call('HGETALL', KEYS[3])
for i = 1, #flat, 2 do used[flat[i]] = tonumber(flat[i + 1]) end
local others, in_use = 0, 0
for h, n in pairs(used) do
  in_use = in_use + n
  if h ~= host then others = others + math.max(n, resv[h] or 0) end
end
for h, n in pairs(resv) do
  if h ~= host and used[h] == nil then others = others + n end
end
local hosts = redis.call('ZCARD', KEYS[1])
local spare = math.max(0, cap - in_use)
-- Headroom. Hosts where a request found no slot lately (P:want, the last
-- 500 ms) share the free slots, each a whole number of leases enough for
-- the requests it saw go without; while none does and nobody waits, every
-- host holds a part of them, so that arrivals go straight in anywhere;
-- otherwise a host gives its headroom back.
local demand = tonumber(ARGV[5])
if demand > 0 then redis.call('HSET', KEYS[21], host, now) end
local wanting, me_wanting = 0, false
flat = redis.call('HGETALL', KEYS[21])
for i = 1, #flat, 2 do
  if tonumber(flat[i + 1]) >= now - 500 then
    wanting = wanting + 1
    if flat[i] == host then me_wanting = true end
  else
    redis.call('HDEL', KEYS[21], flat[i])
  end
end
local waiting = redis.call('ZCARD', KEYS[6]) + redis.call('ZCARD', KEYS[14])
local headroom = 0
if me_wanting then
  headroom = math.min(math.max(1, math.ceil(demand / lease)) * lease, math.ceil(spare / wanting))
elseif wanting == 0 and waiting == 0 then
  headroom = math.min(lease, math.ceil(spare / math.max(hosts, 1)))
end
local grant = math.max(0, math.min(busy + headroom, cap - others))
local horizon = spare
if tonumber(redis.call('GET', KEYS[11]) or '0') > now then
  grant = math.min(grant, busy)
  horizon = 0
end
redis.call('HSET', KEYS[2], host, grant)
-- tickets unseen past their deadline leave, wherever they stand
local changed = 0
local reaped = redis.call('ZRANGEBYSCORE', KEYS[7], '-inf', now, 'LIMIT', 0, tonumber(ARGV[13]))
for _, id in ipairs(reaped) do
  redis.call('ZREM', KEYS[6], id)
  redis.call('ZREM', KEYS[14], id)
  redis.call('ZREM', KEYS[15], id)
  redis.call('ZREM', KEYS[16], id)
  redis.call('HDEL', KEYS[8], id)
  redis.call('ZREM', KEYS[7], id)
  changed = changed + 1
end
-- turns: returned tickets first, then the line; a turn not taken within
-- the claim window is missed (the ticket stops holding the line); a
-- returned ticket that misses again has had its turn back once and leaves
local turns = {}
if horizon > 0 then
  for _, id in ipairs(redis.call('ZRANGE', KEYS[14], 0, horizon - 1)) do turns[#turns + 1] = id end
  if #turns < horizon then
    for _, id in ipairs(redis.call('ZRANGE', KEYS[6], 0, horizon - #turns - 1)) do turns[#turns + 1] = id end
  end
end
local current = {}
for _, id in ipairs(turns) do
  current[id] = true
  redis.call('ZADD', KEYS[16], 'NX', now, id)
end
for _, id in ipairs(redis.call('ZRANGE', KEYS[16], 0, -1)) do
  if not current[id] then redis.call('ZREM', KEYS[16], id) end
end
local missed = 0
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[16], '-inf', now - tonumber(ARGV[14]))) do
  redis.call('ZREM', KEYS[16], id)
  if redis.call('ZREM', KEYS[14], id) > 0 then
    redis.call('HDEL', KEYS[8], id)
    redis.call('ZREM', KEYS[7], id)
    missed = missed + 1
  elseif redis.call('ZREM', KEYS[6], id) > 0 then
    redis.call('ZADD', KEYS[15], redis.call('INCR', KEYS[17]), id)
    missed = missed + 1
  end
end
if changed + missed > 0 then redis.call('INCR', KEYS[9]) end
local first = 0
local n = tonumber(ARGV[12])
if n > 0 then first = redis.call('INCRBY', KEYS[12], n) - n + 1 end
for i = 16, #ARGV do
  local key, untils = string.match(ARGV[i], '^(%x+):(%d+)$')
  if key and tonumber(untils) > tonumber(redis.call('ZSCORE', KEYS[13], key) or '0') then
    redis.call('ZADD', KEYS[13], untils, key)
    redis.call('INCR', KEYS[20])
  end
end
-- bans, promotions and ended sessions: every one in force, when they changed
local marks = tonumber(redis.call('GET', KEYS[20]) or '0')
local lists = {{}, {}, {}}
for i, key in ipairs({KEYS[13], KEYS[18], KEYS[19]}) do
  redis.call('ZREMRANGEBYSCORE', key, '-inf', math.floor(now / 1000))
  if tostring(marks) ~= ARGV[15] then lists[i] = redis.call('ZRANGE', key, 0, 8191, 'WITHSCORES') end
end
return {grant, hosts, horizon, redis.call('ZCARD', KEYS[6]) + redis.call('ZCARD', KEYS[14]),
        tonumber(redis.call('GET', KEYS[9]) or '0'), cap, mode, epoch, lost, first, #reaped, missed, marks,
        lists[1], lists[2], lists[3]}
)lua";

// KEYS: line tix back missed. ARGV: how many tickets at most.
// Answer: line length, then per section (returned, line, missed) its count
// listed and id, "nonce:issued" per ticket.
const char* const kFetchScript = R"lua(
local limit = tonumber(ARGV[1])
local out = {redis.call('ZCARD', KEYS[1])}
for _, key in ipairs({KEYS[3], KEYS[1], KEYS[4]}) do
  local ids = {}
  if limit > 0 then ids = redis.call('ZRANGE', key, 0, limit - 1) end
  limit = limit - #ids
  out[#out + 1] = #ids
  for from = 1, #ids, 1000 do
    local chunk = {}
    for i = from, math.min(from + 999, #ids) do chunk[#chunk + 1] = ids[i] end
    local tix = redis.call('HMGET', KEYS[2], unpack(chunk))
    for i, id in ipairs(chunk) do
      out[#out + 1] = id
      out[#out + 1] = tix[i] or ''
    end
  end
end
return out
)lua";

std::string noteArg(const shm::ClusterNoteValue& note, bool reenroll) {
  char buf[96];
  switch (note.kind) {
    case shm::NoteKind::Enroll:
      std::snprintf(buf, sizeof buf, "%c %" PRIu64 " %016" PRIx64 " %" PRId64, reenroll ? 'R' : 'E', note.id,
                    note.nonce, note.issued_ms);
      break;
    case shm::NoteKind::Touch: std::snprintf(buf, sizeof buf, "T %" PRIu64, note.id); break;
    case shm::NoteKind::Keep: std::snprintf(buf, sizeof buf, "K %" PRIu64, note.id); break;
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
                                  std::to_string(r.marks_version)};
  out.insert(out.end(), r.bans.begin(), r.bans.end());
  return out;
}

std::optional<SyncReply> parseSync(const Reply& reply) {
  if (reply.type != Reply::Type::Array || reply.elements.size() != 16) return std::nullopt;
  const std::vector<Reply>& e = reply.elements;
  SyncReply out;
  std::optional<int64_t> n[13];
  for (size_t i : {0, 1, 2, 3, 4, 5, 8, 9, 10, 11, 12}) {
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
  const bool bans_ok = pairs(e[13], [&](const std::string& key, int64_t until) {
    std::optional<uint64_t> a = hexOf(std::string_view(key).substr(0, 16));
    std::optional<uint64_t> b = key.size() == 32 ? hexOf(std::string_view(key).substr(16)) : std::nullopt;
    if (a && b) out.bans.push_back({bswap(*a), bswap(*b), until});
  });
  auto halves = [](const std::string& member) -> std::pair<std::string_view, std::string_view> {
    const size_t colon = member.find(':');
    if (colon == std::string::npos) return {};
    return {std::string_view(member).substr(0, colon), std::string_view(member).substr(colon + 1)};
  };
  const bool promoted_ok = pairs(e[14], [&](const std::string& member, int64_t until) {
    const auto [id_text, nonce_text] = halves(member);
    Reply id;
    id.type = Reply::Type::String;
    id.str = std::string(id_text);
    std::optional<int64_t> ticket = integerOf(id);
    std::optional<uint64_t> nonce = hexOf(nonce_text);
    if (ticket && *ticket > 0 && nonce) out.promoted.push_back({static_cast<uint64_t>(*ticket), *nonce, until});
  });
  const bool revoked_ok = pairs(e[15], [&](const std::string& member, int64_t until) {
    const auto [a_text, b_text] = halves(member);
    std::optional<uint64_t> a = hexOf(a_text), b = hexOf(b_text);
    if (a && b) out.revoked.push_back({*a, *b, until});
  });
  if (!bans_ok || !promoted_ok || !revoked_ok) return std::nullopt;
  return out;
}

std::optional<FetchReply> parseFetch(const Reply& reply) {
  if (reply.type != Reply::Type::Array || reply.elements.empty()) return std::nullopt;
  const std::vector<Reply>& e = reply.elements;
  FetchReply out;
  std::optional<int64_t> depth = integerOf(e[0]);
  if (!depth) return std::nullopt;
  out.depth = *depth;
  size_t at = 1;
  for (shm::LineSection section : {shm::LineSection::Returned, shm::LineSection::Waiting, shm::LineSection::Missed}) {
    if (at >= e.size()) return std::nullopt;
    std::optional<int64_t> count = integerOf(e[at++]);
    if (!count || *count < 0 || e.size() - at < static_cast<size_t>(*count) * 2) return std::nullopt;
    for (int64_t i = 0; i < *count; ++i, at += 2) {
      std::optional<int64_t> id = integerOf(e[at]);
      const std::string& tix = e[at + 1].str;
      const size_t colon = tix.find(':');
      if (!id || *id <= 0 || colon == std::string::npos) continue;  // a ticket half gone: skipped
      std::optional<uint64_t> nonce = hexOf(std::string_view(tix).substr(0, colon));
      Reply issued_text;
      issued_text.type = Reply::Type::String;
      issued_text.str = tix.substr(colon + 1);
      std::optional<int64_t> issued = integerOf(issued_text);
      if (!nonce || !issued) continue;
      out.line.push_back({static_cast<uint64_t>(*id), *nonce, *issued, section});
    }
  }
  if (at != e.size()) return std::nullopt;
  return out;
}

}  // namespace concert::cluster
