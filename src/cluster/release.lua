-- RELEASE: a host that stops gives its reservation back now rather than at
-- its lease's end (engine.h has the keys).

local hosts_key = KEYS[1]  -- P:hosts
local resv_key = KEYS[2]   -- P:resv
local busy_key = KEYS[3]   -- P:busy
local want_key = KEYS[4]   -- P:want
local held_key = KEYS[5]   -- P:held

local host = ARGV[1]  -- this host's name in P:hosts

redis.call('HDEL', resv_key, host)
redis.call('HDEL', busy_key, host)
redis.call('HDEL', want_key, host)
redis.call('HDEL', held_key, host)
redis.call('ZREM', hosts_key, host)
return 1
