-- DPCS quota engine: change a family's pool and re-arm thresholds atomically.
-- KEYS[1] family:{f}:meta  KEYS[2] family:{f}:pool:{YYYYMM}  KEYS[3] family:{f}:alerts:{YYYYMM}
-- ARGV[1] op: "plan" (set the monthly plan), "topup" (add to this month),
--         "thr" (set the thresholds list); ARGV[2] value; ARGV[3] max total bytes;
--         ARGV[4] month ttl s
-- Returns {remaining, total} after the change, or an error reply when the total
-- would exceed the maximum.
local op, value, maxtotal = ARGV[1], ARGV[2], tonumber(ARGV[3])
local plan = tonumber(redis.call('HGET', KEYS[1], 'plan')) or 0
local pool = redis.call('HMGET', KEYS[2], 'used', 'topup')
local used, topup = tonumber(pool[1]) or 0, tonumber(pool[2]) or 0

if op == 'plan' then
  plan = tonumber(value)
  if plan + topup > maxtotal then return redis.error_reply('DPCS pool total would exceed the maximum') end
  redis.call('HSET', KEYS[1], 'plan', value)
elseif op == 'topup' then
  topup = topup + tonumber(value)
  if plan + topup > maxtotal then return redis.error_reply('DPCS pool total would exceed the maximum') end
  redis.call('HINCRBY', KEYS[2], 'topup', value)
  redis.call('EXPIRE', KEYS[2], tonumber(ARGV[4]))
elseif op == 'thr' then
  redis.call('HSET', KEYS[1], 'thr', value)
else
  return redis.error_reply('DPCS unknown pool op')
end

local total = plan + topup
local rem = total - used
if rem < 0 then rem = 0 end
-- Re-arm every fired threshold the pool is now above again.
for _, p in ipairs(redis.call('SMEMBERS', KEYS[3])) do
  if not (total > 0 and rem * 100 <= tonumber(p) * total) then
    redis.call('SREM', KEYS[3], p)
  end
end
return {rem, total}
