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
  return keys(room, {"line", "tix", "seen", "ver", "seq", "order"});
}

std::vector<std::string> syncKeys(std::string_view room) {
  return keys(room, {"hosts", "resv", "busy", "cap", "mode", "line", "seen", "tix", "ver", "epoch", "grace", "seq",
                     "bans"});
}

std::vector<std::string> fetchKeys(std::string_view room) {
  return keys(room, {"line", "tix"});
}

// ARGV: ttl ms, first-poll grace ms, then one note per argument.
const char* const kNotesScript = R"lua(
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl, grace = tonumber(ARGV[1]), tonumber(ARGV[2])
local changed = 0
for i = 3, #ARGV do
  local kind, id, nonce, issued = string.match(ARGV[i], '^(%a) (%d+) ?(%x*) ?(%d*)$')
  if kind == 'E' or kind == 'R' then
    if not redis.call('ZSCORE', KEYS[1], id) then
      local n = tonumber(id)
      if n < 70368744177664 and n > tonumber(redis.call('GET', KEYS[5]) or '0') then redis.call('SET', KEYS[5], id) end
      redis.call('ZADD', KEYS[1], redis.call('INCR', KEYS[6]), id)
      redis.call('HSET', KEYS[2], id, nonce .. ':' .. issued)
      redis.call('ZADD', KEYS[3], now + (kind == 'E' and grace or ttl), id)
      changed = changed + 1
    end
  elseif kind == 'T' then
    if redis.call('ZSCORE', KEYS[1], id) then redis.call('ZADD', KEYS[3], 'GT', now + ttl, id) end
  elseif kind == 'L' then
    if redis.call('ZREM', KEYS[1], id) == 1 then
      redis.call('HDEL', KEYS[2], id)
      redis.call('ZREM', KEYS[3], id)
      changed = changed + 1
    end
  end
end
if changed > 0 then redis.call('INCR', KEYS[4]) end
return changed
)lua";

// ARGV: host, lease ttl ms, lease, busy, wanted, cap, push cap, mode, push
// mode, known epoch, new epoch, block, reap limit, then "key:until" per new ban.
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
for _, h in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)) do
  redis.call('HDEL', KEYS[2], h)
  redis.call('HDEL', KEYS[3], h)
  redis.call('ZREM', KEYS[1], h)
end
redis.call('ZADD', KEYS[1], now + ttl, host)
if ARGV[7] == '1' or not redis.call('GET', KEYS[4]) then redis.call('SET', KEYS[4], ARGV[6]) end
local cap = tonumber(redis.call('GET', KEYS[4]))
if ARGV[9] == '1' or not redis.call('GET', KEYS[5]) then redis.call('SET', KEYS[5], ARGV[8]) end
local mode = redis.call('GET', KEYS[5])
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
local headroom = math.min(lease, math.ceil(spare / math.max(hosts, 1)))
if ARGV[5] == '1' and headroom < 1 and spare > 0 then headroom = 1 end
local grant = math.max(0, math.min(busy + headroom, cap - others))
local horizon = spare
if tonumber(redis.call('GET', KEYS[11]) or '0') > now then
  grant = math.min(grant, busy)
  horizon = 0
end
redis.call('HSET', KEYS[2], host, grant)
local reaped = redis.call('ZRANGEBYSCORE', KEYS[7], '-inf', now, 'LIMIT', 0, tonumber(ARGV[13]))
for _, id in ipairs(reaped) do
  redis.call('ZREM', KEYS[6], id)
  redis.call('HDEL', KEYS[8], id)
  redis.call('ZREM', KEYS[7], id)
end
if #reaped > 0 then redis.call('INCR', KEYS[9]) end
local first = 0
local n = tonumber(ARGV[12])
if n > 0 then first = redis.call('INCRBY', KEYS[12], n) - n + 1 end
for i = 14, #ARGV do
  local key, untils = string.match(ARGV[i], '^(%x+):(%d+)$')
  if key and tonumber(untils) > tonumber(redis.call('ZSCORE', KEYS[13], key) or '0') then
    redis.call('ZADD', KEYS[13], untils, key)
  end
end
redis.call('ZREMRANGEBYSCORE', KEYS[13], '-inf', math.floor(now / 1000))
local bans = redis.call('ZRANGE', KEYS[13], 0, 1023, 'WITHSCORES')
return {grant, hosts, horizon, redis.call('ZCARD', KEYS[6]), tonumber(redis.call('GET', KEYS[9]) or '0'), cap,
        mode, epoch, lost, first, #reaped, bans}
)lua";

// ARGV: how many tickets from the head.
const char* const kFetchScript = R"lua(
local ids = redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1)
local out = {redis.call('ZCARD', KEYS[1])}
for from = 1, #ids, 1000 do
  local chunk = {}
  for i = from, math.min(from + 999, #ids) do chunk[#chunk + 1] = ids[i] end
  local tix = redis.call('HMGET', KEYS[2], unpack(chunk))
  for i, id in ipairs(chunk) do
    out[#out + 1] = id
    out[#out + 1] = tix[i] or ''
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
    case shm::NoteKind::Leave: std::snprintf(buf, sizeof buf, "L %" PRIu64, note.id); break;
  }
  return buf;
}

std::vector<std::string> syncArgs(const SyncRequest& r) {
  std::vector<std::string> out = {r.host,
                                  std::to_string(r.lease_ttl_ms),
                                  std::to_string(r.lease),
                                  std::to_string(r.busy),
                                  r.wanted ? "1" : "0",
                                  std::to_string(r.cap),
                                  r.push_cap ? "1" : "0",
                                  r.mode,
                                  r.push_mode ? "1" : "0",
                                  r.epoch,
                                  r.new_epoch,
                                  std::to_string(r.block),
                                  std::to_string(r.reap_limit)};
  out.insert(out.end(), r.bans.begin(), r.bans.end());
  return out;
}

std::optional<SyncReply> parseSync(const Reply& reply) {
  if (reply.type != Reply::Type::Array || reply.elements.size() != 12) return std::nullopt;
  const std::vector<Reply>& e = reply.elements;
  SyncReply out;
  std::optional<int64_t> n[11];
  for (size_t i : {0, 1, 2, 3, 4, 5, 8, 9, 10}) {
    n[i] = integerOf(e[i]);
    if (!n[i]) return std::nullopt;
  }
  if (e[6].type != Reply::Type::String || e[7].type != Reply::Type::String) return std::nullopt;
  out.reserved = *n[0];
  out.hosts = static_cast<int32_t>(*n[1]);
  out.horizon = *n[2];
  out.depth = *n[3];
  out.version = *n[4];
  out.cap = *n[5];
  out.mode = e[6].str;
  out.epoch = e[7].str;
  out.lost = *n[8] != 0;
  out.block_first = static_cast<uint64_t>(*n[9]);
  out.reaped = *n[10];
  if (e[11].type != Reply::Type::Array || e[11].elements.size() % 2 != 0) return std::nullopt;
  for (size_t i = 0; i + 1 < e[11].elements.size(); i += 2) {
    std::optional<int64_t> until = integerOf(e[11].elements[i + 1]);
    if (e[11].elements[i].type != Reply::Type::String || !until) return std::nullopt;
    out.bans.emplace_back(e[11].elements[i].str, *until);
  }
  return out;
}

std::optional<FetchReply> parseFetch(const Reply& reply) {
  if (reply.type != Reply::Type::Array || reply.elements.empty() || reply.elements.size() % 2 != 1)
    return std::nullopt;
  FetchReply out;
  std::optional<int64_t> depth = integerOf(reply.elements[0]);
  if (!depth) return std::nullopt;
  out.depth = *depth;
  for (size_t i = 1; i + 1 < reply.elements.size(); i += 2) {
    std::optional<int64_t> id = integerOf(reply.elements[i]);
    const std::string& tix = reply.elements[i + 1].str;
    const size_t colon = tix.find(':');
    if (!id || *id <= 0 || colon == std::string::npos) continue;  // a ticket half gone: skipped
    std::optional<uint64_t> nonce = hexOf(std::string_view(tix).substr(0, colon));
    Reply issued_text;
    issued_text.type = Reply::Type::String;
    issued_text.str = tix.substr(colon + 1);
    std::optional<int64_t> issued = integerOf(issued_text);
    if (!nonce || !issued) continue;
    out.line.push_back({static_cast<uint64_t>(*id), *nonce, *issued});
  }
  return out;
}

}  // namespace concert::cluster
