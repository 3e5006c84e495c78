-- auth_fail.lua: one failed login of a key (RedisLimiter.Fail). Counts the
-- failure and, once the count reaches the threshold, clears it and locks the
-- key. Both keys carry the same hash tag, so they share a Cluster slot.
--
-- KEYS[1] the consecutive-failure count, KEYS[2] the lock
-- ARGV[1] the threshold (failures that lock)
-- ARGV[2] the lifetime in ms of the lock, and of a count after its last failure
--
-- Returns how many more failures the key is allowed before it is locked:
-- 0 when this failure locked it (once per lockout).
local n = redis.call('INCR', KEYS[1])
local after = tonumber(ARGV[1])
if n >= after then
  redis.call('DEL', KEYS[1])
  redis.call('SET', KEYS[2], '1', 'PX', ARGV[2])
  return 0
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return after - n
