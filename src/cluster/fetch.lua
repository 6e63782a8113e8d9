-- FETCH: what changed in the line since a host's copy (engine.h has the keys).
--
-- Every ticket enrolled, returned or missed takes the next place number
-- (P:order) in P:line, P:back or P:missed, so what a host lacks is always
-- the tickets placed after the last number it has, and whoever left since
-- the line's version it has (P:gone). A ticket that moved (missed, then
-- returned) comes again under its new number: the host takes the newer.
--
-- Answer: {version, P:line's length, reset, more, #gone, gone ids...,
--          #tickets, then per ticket: id, section (b returned, w waiting,
--          m missed), its number, "nonce:issued[:client]"}
-- reset 1: the host's copy is too old (or it has none): it starts from an
-- empty copy, and the tickets listed are everyone's from the first place.
-- more 1: tickets placed after the last listed remain: ask again from it.

local line_key = KEYS[1]    -- P:line
local tix_key = KEYS[2]     -- P:tix
local back_key = KEYS[3]    -- P:back
local missed_key = KEYS[4]  -- P:missed
local gone_key = KEYS[5]    -- P:gone
local floor_key = KEYS[6]   -- P:gonefloor
local ver_key = KEYS[7]     -- P:ver

local limit = tonumber(ARGV[1])       -- tickets listed at most
local since_order = tonumber(ARGV[2]) -- the last place number the host has (-1: none)
local since_ver = tonumber(ARGV[3])   -- the line's version its copy reflects (-1: none)

-- HMGET takes this many ids at a time (unpack's stack stays small); P:gone
-- is read from its end this many at a time.
local CHUNK = 1000

local ver = tonumber(redis.call('GET', ver_key) or '0')
local floor = tonumber(redis.call('GET', floor_key) or '0')
local reset = 0
if since_ver < 0 or since_ver < floor or since_ver > ver or since_order < 0 then
  reset = 1
  since_order = -1
end

local gone = {}
if reset == 0 and since_ver < ver then
  local len = redis.call('LLEN', gone_key)
  local stop, done = len - 1, false
  while stop >= 0 and not done do
    local start = math.max(0, stop - CHUNK + 1)
    local entries = redis.call('LRANGE', gone_key, start, stop)
    for i = #entries, 1, -1 do
      local v, id = string.match(entries[i], '^(%d+) (%d+)$')
      if tonumber(v) <= since_ver then
        done = true
        break
      end
      gone[#gone + 1] = id
    end
    stop = start - 1
  end
end

-- The tickets placed after since_order, in place order across the three lists.
local placed, more = {}, 0
for _, list in ipairs({{back_key, 'b'}, {line_key, 'w'}, {missed_key, 'm'}}) do
  local flat = redis.call('ZRANGEBYSCORE', list[1], '(' .. since_order, '+inf', 'WITHSCORES', 'LIMIT', 0, limit)
  if #flat / 2 >= limit then more = 1 end
  for i = 1, #flat, 2 do placed[#placed + 1] = {flat[i], list[2], tonumber(flat[i + 1])} end
end
table.sort(placed, function(x, y) return x[3] < y[3] end)
if #placed > limit then
  more = 1
  for i = #placed, limit + 1, -1 do placed[i] = nil end
end

local out = {ver, redis.call('ZCARD', line_key), reset, more, #gone}
for _, id in ipairs(gone) do out[#out + 1] = id end
out[#out + 1] = #placed
for from = 1, #placed, CHUNK do
  local chunk = {}
  for i = from, math.min(from + CHUNK - 1, #placed) do chunk[#chunk + 1] = placed[i][1] end
  local tix = redis.call('HMGET', tix_key, unpack(chunk))
  for i, id in ipairs(chunk) do
    local p = placed[from + i - 1]
    out[#out + 1] = id
    out[#out + 1] = p[2]
    out[#out + 1] = p[3]
    out[#out + 1] = tix[i] or ''
  end
end
return out
