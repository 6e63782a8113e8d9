-- Shared by notes.lua and sync.lua (embed_scripts.py puts it where they say
-- `#include`): how a mark changes and how a ticket leaves P:tix. Each script
-- defines the keys used here under these names, and `now`.

-- Every change of a list of marks raises P:marks and is logged under the new
-- value (P:marklog), so that SYNC sends a host only what changed since its copy.
local MARKLOG_MAX = 4096
local function logMark(list, member, score)
  local v = redis.call('INCR', marks_key)
  redis.call('RPUSH', marklog_key, v .. ' ' .. list .. ' ' .. member .. ' ' .. score)
  redis.call('LTRIM', marklog_key, -MARKLOG_MAX, -1)
end

-- A ticket leaves P:tix: its client holds one ticket fewer, and may have
-- another again (notes.lua marks a client full). Every departure is logged
-- under the line's next version (P:gone), so that FETCH tells a host only
-- who left since its copy; the script raises P:ver to it when it ends.
local GONE_MAX = 16384
local next_ver = tonumber(redis.call('GET', ver_key) or '0') + 1
local function forget(id)
  local client = string.match(redis.call('HGET', tix_key, id) or '', '^%x+:%d+:(%x+)$')
  redis.call('HDEL', tix_key, id)
  if redis.call('RPUSH', gone_key, next_ver .. ' ' .. id) > GONE_MAX then
    local dropped = redis.call('LPOP', gone_key)
    redis.call('SET', floor_key, string.match(dropped, '^(%d+)'))
  end
  if client then
    if redis.call('HINCRBY', clients_key, client, -1) <= 0 then redis.call('HDEL', clients_key, client) end
    if redis.call('ZREM', full_key, client) > 0 then logMark('f', client, '-') end
  end
end
