-- DPCS quota engine: change a family's pool and re-arm thresholds atomically.
-- KEYS[1] family:{f}  KEYS[2] family:{f}:pool:{YYYYMM}
-- ARGV[1] op: "plan" (set the monthly plan), "topup" (add to this month),
--         "topups" (raise the month's top-up total to the value, never lower it:
--         top-ups only add, so a repeated or late write changes nothing),
--         "thr" (set the thresholds list); ARGV[2] value; ARGV[3] max total bytes;
--         ARGV[4] month ttl s
-- Returns {remaining, total, pct, arms, pct, arms, …} after the change: every
-- threshold it re-armed with how often that threshold had fired this month
-- (n:<pct>, at least 1), or an error reply when the total would exceed the
-- maximum. Re-arming a threshold deletes the pool's q (the largest unfired
-- threshold, see apply.lua) with it.
local op, value, maxtotal = ARGV[1], ARGV[2], tonumber(ARGV[3])
local plan = tonumber(redis.call('HGET', KEYS[1], 'plan')) or 0
local flat = redis.call('HGETALL', KEYS[2])
local pool = {}
for i = 1, #flat, 2 do pool[flat[i]] = flat[i + 1] end
local used, topup = tonumber(pool['used']) or 0, tonumber(pool['topup']) or 0

if op == 'plan' then
  plan = tonumber(value)
  if plan + topup > maxtotal then return redis.error_reply('DPCS pool total would exceed the maximum') end
  redis.call('HSET', KEYS[1], 'plan', value)
elseif op == 'topup' then
  topup = topup + tonumber(value)
  if plan + topup > maxtotal then return redis.error_reply('DPCS pool total would exceed the maximum') end
  redis.call('HINCRBY', KEYS[2], 'topup', value)
  if #flat == 0 then redis.call('EXPIRE', KEYS[2], tonumber(ARGV[4])) end
elseif op == 'topups' then
  local v = tonumber(value)
  if v > topup then
    if plan + v > maxtotal then return redis.error_reply('DPCS pool total would exceed the maximum') end
    redis.call('HSET', KEYS[2], 'topup', value)
    if #flat == 0 then redis.call('EXPIRE', KEYS[2], tonumber(ARGV[4])) end
    topup = v
  end
elseif op == 'thr' then
  redis.call('HSET', KEYS[1], 'thr', value)
else
  return redis.error_reply('DPCS unknown pool op')
end

local total = plan + topup
local rem = total - used
if rem < 0 then rem = 0 end
-- Re-arm every fired threshold the pool is now above again.
local out = {rem, total}
for f, _ in pairs(pool) do
  if string.sub(f, 1, 2) == 'a:' then
    local p = tonumber(string.sub(f, 3))
    if not (p and total > 0 and rem * 100 <= p * total) then
      redis.call('HDEL', KEYS[2], f, 'q') -- q: see apply.lua
      if p then
        out[#out + 1] = p
        out[#out + 1] = math.max(tonumber(pool['n:' .. string.sub(f, 3)]) or 1, 1)
      end
    end
  end
end
return out
