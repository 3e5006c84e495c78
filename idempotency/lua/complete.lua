-- Replace our claim by a completed result, only while the claim is ours.
-- KEYS[1] the key
-- ARGV[1] our claim value: "c:" .. token
-- ARGV[2] the completed value: "d:" .. result
-- ARGV[3] how long to keep the result, in milliseconds
-- Returns 1 when completed, 0 when the key no longer holds our claim.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return 1
end
return 0
