-- SYNC: one host's round with the engine (engine.h has the keys and what
-- each holds). Renews the host's lease and takes its share of the cap; reaps
-- abandoned tickets; marks turns and missed turns by the room's rules; takes
-- a newly banned client's tickets out of the line; answers the line's
-- figures, cap and mode, bans and the other marks, a block of numbers.

local hosts_key = KEYS[1]      -- P:hosts
local resv_key = KEYS[2]       -- P:resv
local busy_key = KEYS[3]       -- P:busy
local cap_key = KEYS[4]        -- P:cap
local mode_key = KEYS[5]       -- P:mode
local line_key = KEYS[6]       -- P:line
local seen_key = KEYS[7]       -- P:seen
local tix_key = KEYS[8]        -- P:tix
local ver_key = KEYS[9]        -- P:ver
local epoch_key = KEYS[10]     -- P:epoch
local grace_key = KEYS[11]     -- P:grace
local seq_key = KEYS[12]       -- P:seq
local bans_key = KEYS[13]      -- P:bans
local back_key = KEYS[14]      -- P:back
local missed_key = KEYS[15]    -- P:missed
local ready_key = KEYS[16]     -- P:ready
local order_key = KEYS[17]     -- P:order
local promoted_key = KEYS[18]  -- P:promoted
local revoked_key = KEYS[19]   -- P:revoked
local marks_key = KEYS[20]     -- P:marks
local want_key = KEYS[21]      -- P:want
local held_key = KEYS[22]      -- P:held
local clients_key = KEYS[23]   -- P:clients
local full_key = KEYS[24]      -- P:full
local marklog_key = KEYS[25]   -- P:marklog
local gone_key = KEYS[26]      -- P:gone
local floor_key = KEYS[27]     -- P:gonefloor
local pre_key = KEYS[28]       -- P:pre

local host = ARGV[1]                    -- this host's name in P:hosts
local ttl = tonumber(ARGV[2])           -- -cluster-lease-ttl, ms
local lease = tonumber(ARGV[3])         -- -cluster-lease
local busy = tonumber(ARGV[4])          -- page slots in use on this host
local demand = tonumber(ARGV[5])        -- requests that found no slot here since the last round
local host_cap = ARGV[6]                -- the global cap as this host has it
local push_cap = ARGV[7] == '1'         -- ... changed on this host
local host_mode = ARGV[8]               -- the room's mode as this host has it
local push_mode = ARGV[9] == '1'        -- ... changed on this host
local known_epoch = ARGV[10]            -- the epoch the host knew ('' = none)
local new_epoch = ARGV[11]              -- a fresh one, used if the engine has none
local block = tonumber(ARGV[12])        -- ticket numbers wanted (0 = none)
local reap_limit = tonumber(ARGV[13])   -- tickets reaped at most per round
local claim_window = tonumber(ARGV[14]) -- -claim-window, ms
local host_marks = ARGV[15]             -- P:marks as the host last read it
local host_held = ARGV[16] == '1'       -- a scheduled sale's pre-queue holds this host's line
local shuffle = ARGV[17] == '1'         -- -shuffle-prequeue
local first_ban = 18                    -- then "key:until" per ban that began on this host

-- A host whose request found no slot within this long shares the free slots.
local WANT_MS = 500
-- Members of each list of marks sent at most (ClusterLine's kClusterMarks).
local MARKS_MAX = 8192
-- In passthrough every ticket's turn has come: readiness is stamped for at
-- most this many of them per round (the head of the line).
local EVERYONE_MAX = 16384

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- #include "departures.lua"

-- A ticket leaves the line, wherever it stands.
local function drop(id)
  redis.call('ZREM', line_key, id)
  redis.call('ZREM', back_key, id)
  redis.call('ZREM', missed_key, id)
  redis.call('ZREM', ready_key, id)
  redis.call('ZREM', seen_key, id)
  forget(id)
end

-- The room's identity; a host that knew another one learns the engine lost it,
-- and for one lease TTL no host takes slots beyond what it has in flight.
local epoch = redis.call('GET', epoch_key)
if not epoch then
  epoch = new_epoch
  redis.call('SET', epoch_key, epoch)
end
local lost = 0
if known_epoch ~= '' and known_epoch ~= epoch then
  lost = 1
  if now + ttl > tonumber(redis.call('GET', grace_key) or '0') then
    redis.call('SET', grace_key, now + ttl, 'PX', ttl)
  end
end

-- Hosts that stopped renewing lose their reservations.
for _, h in ipairs(redis.call('ZRANGEBYSCORE', hosts_key, '-inf', now)) do
  redis.call('HDEL', resv_key, h)
  redis.call('HDEL', busy_key, h)
  redis.call('HDEL', want_key, h)
  redis.call('HDEL', held_key, h)
  redis.call('ZREM', hosts_key, h)
end
redis.call('ZADD', hosts_key, now + ttl, host)
if host_held then
  redis.call('HSET', held_key, host, 1)
else
  redis.call('HDEL', held_key, host)
end
if push_cap or not redis.call('GET', cap_key) then redis.call('SET', cap_key, host_cap) end
local cap = tonumber(redis.call('GET', cap_key))
if push_mode or not redis.call('GET', mode_key) then redis.call('SET', mode_key, host_mode) end
local mode = redis.call('GET', mode_key)

-- This host's share: what it has in flight, plus its part of the free slots.
redis.call('HSET', busy_key, host, busy)
local resv, used = {}, {}
local flat = redis.call('HGETALL', resv_key)
for i = 1, #flat, 2 do resv[flat[i]] = tonumber(flat[i + 1]) end
flat = redis.call('HGETALL', busy_key)
for i = 1, #flat, 2 do used[flat[i]] = tonumber(flat[i + 1]) end
local others, in_use = 0, 0
for h, n in pairs(used) do
  in_use = in_use + n
  if h ~= host then others = others + math.max(n, resv[h] or 0) end
end
for h, n in pairs(resv) do
  if h ~= host and used[h] == nil then others = others + n end
end
local hosts = redis.call('ZCARD', hosts_key)
local spare = math.max(0, cap - in_use)

-- Headroom. Hosts where a request found no slot lately (P:want, the last
-- WANT_MS) share the free slots, each a whole number of leases enough for
-- the requests it saw go without; while none does and nobody waits, every
-- host holds a part of them, so that arrivals go straight in anywhere;
-- otherwise a host gives its headroom back.
if demand > 0 then redis.call('HSET', want_key, host, now) end
local wanting, me_wanting = 0, false
flat = redis.call('HGETALL', want_key)
for i = 1, #flat, 2 do
  if tonumber(flat[i + 1]) >= now - WANT_MS then
    wanting = wanting + 1
    if flat[i] == host then me_wanting = true end
  else
    redis.call('HDEL', want_key, flat[i])
  end
end
local waiting = redis.call('ZCARD', line_key) + redis.call('ZCARD', back_key)
local headroom = 0
if me_wanting then
  headroom = math.min(math.max(1, math.ceil(demand / lease)) * lease, math.ceil(spare / wanting))
elseif wanting == 0 and waiting == 0 then
  headroom = math.min(lease, math.ceil(spare / math.max(hosts, 1)))
end
local grant = math.max(0, math.min(busy + headroom, cap - others))
local in_grace = tonumber(redis.call('GET', grace_key) or '0') > now
if in_grace then grant = math.min(grant, busy) end
redis.call('HSET', resv_key, host, grant)

-- How the line moves, by the same rule as on one host: in pause and reject,
-- and in an open room while any host's scheduled sale holds its pre-queue,
-- no ticket's turn comes (and so none is missed); in passthrough every
-- ticket's turn has come; otherwise turns come as slots free across the room.
local still = mode == 'pause' or mode == 'reject' or (mode ~= 'passthrough' and redis.call('HLEN', held_key) > 0)
local horizon
if still then
  horizon = 0
elseif mode == 'passthrough' then
  horizon = math.min(waiting, EVERYONE_MAX)
else
  horizon = spare
end
if in_grace then horizon = 0 end

-- A scheduled sale's pre-queue closes: the tickets enrolled while it held
-- the line (P:pre) take their places in a random order (-shuffle-prequeue),
-- each under a new place number, so behind everyone placed before them and
-- ahead of everyone after; their holders were shown no position meanwhile.
-- The random order is drawn from this round's fresh epoch word.
local shuffled = 0
if not still and redis.call('SCARD', pre_key) > 0 then
  if shuffle then
    local ids = {}
    for _, id in ipairs(redis.call('SMEMBERS', pre_key)) do
      local place = redis.call('ZSCORE', line_key, id)
      if place then ids[#ids + 1] = {id, tonumber(place)} end
    end
    table.sort(ids, function(x, y) return x[2] < y[2] end)
    math.randomseed(tonumber(string.sub(new_epoch, 1, 8), 16) or 1)
    for i = #ids, 2, -1 do
      local j = math.random(i)
      ids[i], ids[j] = ids[j], ids[i]
    end
    for _, p in ipairs(ids) do redis.call('ZADD', line_key, redis.call('INCR', order_key), p[1]) end
    shuffled = #ids
  end
  redis.call('DEL', pre_key)
end

-- Tickets unseen past their deadline leave, wherever they stand.
local changed = 0
local reaped = redis.call('ZRANGEBYSCORE', seen_key, '-inf', now, 'LIMIT', 0, reap_limit)
for _, id in ipairs(reaped) do
  drop(id)
  changed = changed + 1
end

-- Turns: returned tickets first, then the line; a turn not taken within the
-- claim window is missed (the ticket stops holding the line); a returned
-- ticket that misses again has had its turn back once and leaves. While the
-- line stands still no turn has come: readiness is forgotten, and counts
-- anew from when the line moves again.
local missed = 0
if still or in_grace then
  redis.call('DEL', ready_key)
else
  local turns = {}
  if horizon > 0 then
    for _, id in ipairs(redis.call('ZRANGE', back_key, 0, horizon - 1)) do turns[#turns + 1] = id end
    if #turns < horizon then
      for _, id in ipairs(redis.call('ZRANGE', line_key, 0, horizon - #turns - 1)) do turns[#turns + 1] = id end
    end
  end
  local current = {}
  for _, id in ipairs(turns) do
    current[id] = true
    redis.call('ZADD', ready_key, 'NX', now, id)
  end
  for _, id in ipairs(redis.call('ZRANGE', ready_key, 0, -1)) do
    if not current[id] then redis.call('ZREM', ready_key, id) end
  end
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', ready_key, '-inf', now - claim_window)) do
    redis.call('ZREM', ready_key, id)
    if redis.call('ZREM', back_key, id) > 0 then
      forget(id)
      redis.call('ZREM', seen_key, id)
      missed = missed + 1
    elseif redis.call('ZREM', line_key, id) > 0 then
      redis.call('ZADD', missed_key, redis.call('INCR', order_key), id)
      missed = missed + 1
    end
  end
end

-- Bans that began on this host. A new ban takes the client's tickets out of
-- the line, whichever host issued them (each ticket's client is in P:tix).
local banned, bans = {}, 0
for i = first_ban, #ARGV do
  local key, untils = string.match(ARGV[i], '^(%x+):(%d+)$')
  if key and tonumber(untils) > tonumber(redis.call('ZSCORE', bans_key, key) or '0') then
    redis.call('ZADD', bans_key, untils, key)
    logMark('b', key, untils)
    banned[key] = true
    bans = bans + 1
  end
end
local removed = 0
if bans > 0 then
  local flat = redis.call('HGETALL', tix_key)
  for i = 1, #flat, 2 do
    local client = string.match(flat[i + 1], '^%x+:%d+:(%x+)$')
    if client and banned[client] then
      drop(flat[i])
      removed = removed + 1
    end
  end
end
if changed + missed + removed + shuffled > 0 then redis.call('INCR', ver_key) end

-- A block of ticket numbers.
local first = 0
if block > 0 then first = redis.call('INCRBY', seq_key, block) - block + 1 end

-- Bans, promotions, ended sessions and full clients, when they changed since
-- the host's copy: only the changes when the log still holds them all
-- (marks_sent 2), else every mark in force (1). Expired marks are dropped
-- here and by each host on its own (each carries its end).
local marks = tonumber(redis.call('GET', marks_key) or '0')
local lists, changes, marks_sent = {{}, {}, {}, {}}, {}, 0
for _, key in ipairs({bans_key, promoted_key, revoked_key, full_key}) do
  redis.call('ZREMRANGEBYSCORE', key, '-inf', math.floor(now / 1000))
end
if tostring(marks) ~= host_marks then
  local since = tonumber(host_marks) or -1
  local oldest = tonumber(string.match(redis.call('LINDEX', marklog_key, 0) or '', '^(%d+)') or '-1')
  if since >= 0 and since < marks and oldest >= 0 and oldest <= since + 1 then
    changes = redis.call('LRANGE', marklog_key, since - marks, -1)
    marks_sent = 2
  else
    for i, key in ipairs({bans_key, promoted_key, revoked_key, full_key}) do
      lists[i] = redis.call('ZRANGE', key, 0, MARKS_MAX - 1, 'WITHSCORES')
    end
    marks_sent = 1
  end
end
return {grant, hosts, horizon, redis.call('ZCARD', line_key) + redis.call('ZCARD', back_key),
        tonumber(redis.call('GET', ver_key) or '0'), cap, mode, epoch, lost, first, #reaped, missed, marks,
        lists[1], lists[2], lists[3], lists[4], removed, marks_sent, changes, shuffled}
