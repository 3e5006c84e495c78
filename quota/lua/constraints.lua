-- DPCS quota engine: replace a member's constraints if the version is newer.
-- KEYS[1] family:{f}:customer:{c}:constraints  KEYS[2] family:{f}:customer:{c}:cver
-- ARGV[1] version, ARGV[2..] field, value pairs (already validated and canonical)
-- Returns 1 when applied, 0 when the stored version is the same or newer.
local version = tonumber(ARGV[1])
local current = tonumber(redis.call('GET', KEYS[2])) or 0
if version <= current then return 0 end
redis.call('DEL', KEYS[1])
if #ARGV > 1 then
  redis.call('HSET', KEYS[1], unpack(ARGV, 2))
end
redis.call('SET', KEYS[2], ARGV[1])
return 1
