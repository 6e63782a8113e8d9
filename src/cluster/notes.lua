-- NOTES: what a host's workers noted since its last round (engine.h has the
-- keys and what each holds). Answers how many tickets changed place, or -1,
-- applying nothing, when the engine has another epoch (or none) than the
-- host knew: it lost the room, and the host's next SYNC learns so and
-- re-enrolls the old line before these notes.
--
-- One note per argument after the first four:
--   E id nonce issued [client]
--                       enroll (nothing if the ticket is in line already);
--                       client: the holder's key (32 hex digits). A client
--                       that holds -max-tickets-per-client tickets in line
--                       already, enrolled by any host, gets no other: the
--                       ticket is not enrolled (its host finds it gone), and
--                       the client is marked full (P:full) so every host
--                       refuses it a ticket until one of its tickets leaves
--   R id nonce issued   re-enroll after a loss (deadline from the first-poll
--                       grace: every host re-enrolls its copy, and a copy a
--                       little old lists tickets that left meanwhile; their
--                       holders are gone and never renew it, the others'
--                       touch it within seconds)
--   T id                touch: its holder asked for the page (a missed turn returns, once)
--   K id                keep: its holder is still here (a poll, a stream, a hold)
--   W id                its turn came and its holder is here, but the host's
--                       admission rate had no token: the turn's clock restarts
--   L id                leave
--   P id nonce until    promoted (until: Unix s)
--   V a b until         a session ended (the pass id's words, hex)

local line_key = KEYS[1]       -- P:line
local tix_key = KEYS[2]        -- P:tix
local seen_key = KEYS[3]       -- P:seen
local ver_key = KEYS[4]        -- P:ver
local seq_key = KEYS[5]        -- P:seq
local order_key = KEYS[6]      -- P:order
local back_key = KEYS[7]       -- P:back
local missed_key = KEYS[8]     -- P:missed
local ready_key = KEYS[9]      -- P:ready
local epoch_key = KEYS[10]     -- P:epoch
local promoted_key = KEYS[11]  -- P:promoted
local revoked_key = KEYS[12]   -- P:revoked
local marks_key = KEYS[13]     -- P:marks
local clients_key = KEYS[14]   -- P:clients
local full_key = KEYS[15]      -- P:full
local marklog_key = KEYS[16]   -- P:marklog
local gone_key = KEYS[17]      -- P:gone
local floor_key = KEYS[18]     -- P:gonefloor
local held_key = KEYS[19]      -- P:held
local pre_key = KEYS[20]       -- P:pre

local ttl = tonumber(ARGV[1])    -- -token-ttl, ms
local grace = tonumber(ARGV[2])  -- -first-poll-grace, ms
local known_epoch = ARGV[3]      -- the epoch the host knows ('' = none yet)
local per_client = tonumber(ARGV[4])  -- -max-tickets-per-client (0: unlimited)
local first_note = 5

-- Ticket numbers at and above this are a host's own (ClusterLine::kLocalIds):
-- they never raise the engine's counter.
local LOCAL_IDS = 70368744177664

if known_epoch ~= '' and redis.call('GET', epoch_key) ~= known_epoch then return -1 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local function listed(id)
  return redis.call('ZSCORE', line_key, id) or redis.call('ZSCORE', back_key, id) or
         redis.call('ZSCORE', missed_key, id)
end

-- #include "departures.lua"

-- A client's tickets in line, and whether it may have another.
local function full(client)
  return per_client > 0 and tonumber(redis.call('HGET', clients_key, client) or '0') >= per_client
end

-- A client marked full keeps the mark for a token TTL unless a ticket of its
-- leaves first (sync.lua takes it off then).
local function markFull(client)
  local ends = math.floor((now + ttl) / 1000) + 1
  redis.call('ZADD', full_key, ends, client)
  logMark('f', client, ends)
end

local held = redis.call('HLEN', held_key) > 0
local changed = 0
for i = first_note, #ARGV do
  local kind, id, nonce, issued, client = string.match(ARGV[i], '^(%a) (%x+) ?(%x*) ?(%d*) ?(%x*)$')
  if kind == 'E' or kind == 'R' then
    if not listed(id) and client ~= '' and full(client) then
      markFull(client)
    elseif not listed(id) then
      local n = tonumber(id)
      if n < LOCAL_IDS and n > tonumber(redis.call('GET', seq_key) or '0') then redis.call('SET', seq_key, id) end
      redis.call('ZADD', line_key, redis.call('INCR', order_key), id)
      if client ~= '' then
        redis.call('HSET', tix_key, id, nonce .. ':' .. issued .. ':' .. client)
        redis.call('HINCRBY', clients_key, client, 1)
        if full(client) then markFull(client) end
      else
        redis.call('HSET', tix_key, id, nonce .. ':' .. issued)
      end
      redis.call('ZADD', seen_key, now + grace, id)
      -- enrolled while a sale's pre-queue holds the line: shuffled when it closes (sync.lua)
      if held then redis.call('SADD', pre_key, id) end
      changed = changed + 1
    end
  elseif kind == 'P' or kind == 'V' then
    local key, member = kind == 'P' and promoted_key or revoked_key, id .. ':' .. nonce
    redis.call('ZADD', key, 'GT', issued, member)
    logMark(kind == 'P' and 'p' or 'r', member, redis.call('ZSCORE', key, member))
  elseif kind == 'T' or kind == 'K' or kind == 'W' then
    if kind == 'T' and redis.call('ZSCORE', missed_key, id) then
      -- it missed its turn and its holder is back for the page: ahead of the line
      redis.call('ZREM', missed_key, id)
      redis.call('ZREM', ready_key, id)
      redis.call('ZADD', back_key, redis.call('INCR', order_key), id)
      redis.call('ZADD', seen_key, now + ttl, id)
      changed = changed + 1
    elseif listed(id) then
      -- a poll, a stream or a hold keeps it from the TTL and takes no turn back
      redis.call('ZADD', seen_key, 'GT', now + ttl, id)
      if kind == 'W' then redis.call('ZADD', ready_key, 'XX', now, id) end
    end
  elseif kind == 'L' then
    if redis.call('ZREM', line_key, id) + redis.call('ZREM', back_key, id) + redis.call('ZREM', missed_key, id) > 0 then
      forget(id)
      redis.call('ZREM', seen_key, id)
      redis.call('ZREM', ready_key, id)
      changed = changed + 1
    end
  end
end
if changed > 0 then redis.call('INCR', ver_key) end
return changed
