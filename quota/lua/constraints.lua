-- DPCS quota engine: replace a member's constraints if the version is newer.
-- KEYS[1] family:{f}:customer:{c}:constraints  KEYS[2] family:{f} (v:<cid>,
-- the member's policy version)  KEYS[3] family:{f}:customer:{c}:ver (where an
-- earlier engine kept the version: read while v:<cid> is absent, deleted by
-- the first write)
-- ARGV[1] the field v:<cid>, ARGV[2] version, ARGV[3..] field, value pairs
-- (already validated and canonical)
-- Returns 1 when applied, 0 when the stored version is the same or newer.
local version = tonumber(ARGV[2])
local current = tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or redis.call('GET', KEYS[3])) or 0
if version <= current then return 0 end
redis.call('DEL', KEYS[1], KEYS[3])
if #ARGV > 2 then
  redis.call('HSET', KEYS[1], unpack(ARGV, 3))
end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
return 1
