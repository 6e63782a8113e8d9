-- FETCH: the tickets in turn order, with their nonces and issue times
-- (engine.h has the keys). Answer: P:line's length, then per section
-- (returned, line, missed) how many it lists and, per ticket, its id and
-- "nonce:issued".

local line_key = KEYS[1]    -- P:line
local tix_key = KEYS[2]     -- P:tix
local back_key = KEYS[3]    -- P:back
local missed_key = KEYS[4]  -- P:missed

local limit = tonumber(ARGV[1])  -- tickets listed at most, over the three sections

-- HMGET takes this many ids at a time (unpack's stack stays small).
local CHUNK = 1000

local out = {redis.call('ZCARD', line_key)}
for _, key in ipairs({back_key, line_key, missed_key}) do
  local ids = {}
  if limit > 0 then ids = redis.call('ZRANGE', key, 0, limit - 1) end
  limit = limit - #ids
  out[#out + 1] = #ids
  for from = 1, #ids, CHUNK do
    local chunk = {}
    for i = from, math.min(from + CHUNK - 1, #ids) do chunk[#chunk + 1] = ids[i] end
    local tix = redis.call('HMGET', tix_key, unpack(chunk))
    for i, id in ipairs(chunk) do
      out[#out + 1] = id
      out[#out + 1] = tix[i] or ''
    end
  end
end
return out
