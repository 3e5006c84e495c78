-- DPCS quota engine, a part of apply.lua and grant.lua (see policy.lua):
-- the member's effective limits for the day (YYYYMMDD) and its month,
-- after policy.lua.
-- LIMIT:DATA:DAILY / MONTHLY, each (when set) raised by the extras of that
-- day and month, LIMIT:DATA:EXTRA:<YYYYMMDD> and LIMIT:DATA:EXTRA:<YYYYMM>
-- (policy.Constraints.EffectiveLimits). No limit stays no limit; extras of
-- other periods are not read. LIMIT:DATA:GIFT:<YYYYMM>, data the member
-- received less data it gave away this month (signed), moves the monthly
-- limit only (never below 0). Out: dl, ml (nil: no limit).
local dl, ml, xd, xm, gv
if c then
  dl, ml = tonumber(c['LIMIT:DATA:DAILY']), tonumber(c['LIMIT:DATA:MONTHLY'])
  xd, xm = c['LIMIT:DATA:EXTRA:' .. day], c['LIMIT:DATA:EXTRA:' .. string.sub(day, 1, 6)]
  gv = c['LIMIT:DATA:GIFT:' .. string.sub(day, 1, 6)]
else
  -- A limit is set when its field is not empty (p1 > 3, p2 > p1 + 1).
  if p1 > 3 then dl = tonumber(string.sub(cc, 3, p1 - 1)) end
  if p2 > p1 + 1 then ml = tonumber(string.sub(cc, p1 + 1, p2 - 1)) end
  -- #c's second byte: '0' + 1 (extras or gifts) + 2 (budgets).
  if (dl or ml) and (string.byte(cc, 2) - 48) % 2 == 1 then
    local mo = string.sub(day, 1, 6)
    local x = redis.call('HMGET', ck, 'LIMIT:DATA:EXTRA:' .. day, 'LIMIT:DATA:EXTRA:' .. mo, 'LIMIT:DATA:GIFT:' .. mo)
    xd, xm, gv = x[1], x[2], x[3]
  end
end
if dl or ml then
  local extra = (tonumber(xd) or 0) + (tonumber(xm) or 0)
  if dl then dl = dl + extra end
  if ml then
    ml = ml + extra + (tonumber(gv) or 0)
    if ml < 0 then ml = 0 end
  end
end
