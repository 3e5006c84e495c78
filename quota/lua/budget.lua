-- DPCS quota engine, a part of grant.lua (written in where it says
-- "--[[budget.lua]]", quota.scriptSource): a grant step's use counted for
-- the daily budgets of its app and category (policy/budget.go), on the
-- step's day, when the member has one (#c's flag, checked before).
-- In: x (HMGET of the constraints' LIMIT:DATA:APP:<app>,
-- LIMIT:DATA:CATEGORY:<category>), charged, KEYS[12] (the step's day's
-- budget hash). Out: ab, cb (the budgets, false when none), au, cu (the
-- day's counted use after the charge, written when charged).
local ab, cb = app ~= '' and x[1], category ~= '' and x[2]
local au, cu = 0, 0
if ab or cb then
  local u = redis.call('HMGET', KEYS[12], 'a:' .. app, 'c:' .. category)
  au, cu = tonumber(u[1]) or 0, tonumber(u[2]) or 0
  if charged > 0 then
    local bw = {}
    if ab then
      au = au + charged
      bw[1], bw[2] = 'a:' .. app, string.format('%d', au)
    end
    if cb then
      cu = cu + charged
      bw[#bw + 1], bw[#bw + 2] = 'c:' .. category, string.format('%d', cu)
    end
    redis.call('HSET', KEYS[12], unpack(bw))
    redis.call('EXPIRE', KEYS[12], (1440 - now) * 60 + DPCS_BUCKET_TTL)
  end
end
