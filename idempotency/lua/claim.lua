-- Claim a key unless it holds a live claim or a completed result.
-- KEYS[1] the key
-- ARGV[1] the claim value: "c:" .. token
-- ARGV[2] the lease in milliseconds
-- Returns {1} when claimed, else {0, current value, PTTL in ms}.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {1}
end
return {0, redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1])}
