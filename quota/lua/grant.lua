-- DPCS quota engine: one step of a grant, atomically (doc/architecture.md,
-- "Grants"). A grant reserves bytes of the member's limits and the family
-- pool for a session's traffic of one app or category until the network
-- reports their use. Generation (quota.OnTouch) -> dedupe by step id -> the
-- grant's reservation returned and the reported use charged to its day and
-- month -> threshold crossings of that month -> (unless a release) the
-- member's constraints in apply.lua's order (membership, BLOCK:ACCESS, app
-- and category blocks, time windows, the app's and its category's daily
-- budgets) -> a new reservation sized by
-- policy.SizeGrant -> its validity (policy.NextChange).
-- Semantics are those of policy.SizeGrant and quota's model; quota's
-- property tests hold them equal.
--
-- KEYS[1] family:{f}                               hash  plan, thr, g, m:<cid> (see apply.lua)
-- KEYS[2] family:{f}:customer:{c}:constraints      hash  (see apply.lua)
-- KEYS[3] family:{f}:pool:{YYYYMM}                 hash  the step's month (see apply.lua); r, r:<cid> and
--                                                        r:<cid>:<DD> what grants reserve of the pool, of
--                                                        the member's month and of its day DD
-- KEYS[4] family:{f}:customer:{c}:usage:{YYYYMM}   hash  the member's other days (see apply.lua)
-- KEYS[5] family:{f}:evt:<b>, KEYS[6] …:evt:<b-1>  hash  the dedupe buckets (see apply.lua)
-- KEYS[7] family:{f}:grants                        hash  <cid>|<grantId> -> "<bytes>|<YYYYMMDD>|<unix s>|<stepId>":
--                                                        each open grant's reservation, the day, the time
--                                                        and the id of the step that made it
-- KEYS[8], KEYS[9]                                       the pool and usage hashes of the step's previous
--                                                        month (touched only when ARGV[16] names it),
-- KEYS[10], KEYS[11]                                     and of its next month (ARGV[17])
-- KEYS[12] family:{f}:customer:{c}:budget:{YYYYMMDD}   the step's day's budget counters (see apply.lua;
--                                                        a step's use counts on the step's day)
-- ARGV: 1 customerId, 2 bytes used since the last step, 3 bytes requested (0: the
--       default), 4 release 0|1, 5 appId, 6 category, 7 minute of day, 8 ISO weekday,
--       9 day "YYYYMMDD", 10 step id, 11 state generation ("" = unchecked), 12 grant id,
--       13 the step's time (unix s), 14 the start of its minute (unix s), 15 the zone's next
--       offset change (unix s, 0: none), 16 the previous month "YYYYMM" when the engine
--       still holds it (an accepted month, quota.Engine.AcceptedMonths), else "", 17 the
--       next month when accepted (steps' times need not rise), else ""
-- Constants written in (quota.scriptSource): those of apply.lua and
-- DPCS_GRANT_DEFAULT, DPCS_GRANT_MAX, DPCS_GRANT_MIN (quota.WithGrantSizes).
-- Returns {duplicate 0|1, "G|decision|granted|final 0|1|charged|chargedAt|overage|
-- remaining|total|reserved|daily|monthly|validUntil|throttle|crossed|rule|previous|reclaim"}
-- (quota.GrantResult; previous the id of the step whose reservation this one
-- returned, reclaim the other grants' ids, comma-separated, in no order), or
-- {2, generation} as apply.lua.

local fam = redis.call('HMGET', KEYS[1], 'plan', 'thr', 'm:' .. ARGV[1], 'g')
if ARGV[11] ~= '' and fam[4] ~= ARGV[11] and (fam[4] or string.byte(ARGV[11], 2) == 58) then
  return {2, fam[4] or ''}
end
local bucket = redis.call('HMGET', KEYS[5], ARGV[10], '')
local stored = bucket[1] or redis.call('HGET', KEYS[6], ARGV[10])
if stored then
  return {1, stored}
end

local cid = ARGV[1]
local usedNow = tonumber(ARGV[2])
local release = ARGV[4] == '1'
local app, category = ARGV[5], ARGV[6]
local now, wd = tonumber(ARGV[7]), string.byte(ARGV[8]) - 48
local day, ck = ARGV[9], KEYS[2]
local month, dd = string.sub(day, 1, 6), string.sub(day, 7, 8)
local member = fam[3] == '1'
local thr = fam[2] or 'DPCS_THRESHOLDS'
local maxtotal = DPCS_MAX_TOTAL
local uf, df, rmf = 'u:' .. cid, 'd:' .. cid, 'r:' .. cid
local gf = cid .. '|' .. ARGV[12]

-- The grant's reservation, if it is open: bytes, day, time, step.
local held = redis.call('HGET', KEYS[7], gf)
local hb, hday, hat, hstep = 0, nil, nil, ''
if held then
  local a = string.find(held, '|', 1, true)
  local b = string.find(held, '|', a + 10, true)
  hb, hday, hat = tonumber(string.sub(held, 1, a - 1)), string.sub(held, a + 1, a + 8), string.sub(held, a + 10, b - 1)
  hstep = string.sub(held, b + 1)
end

-- The use is charged to the reservation's day and month (a grant never
-- outlives its day, so its traffic was that day's) when the engine still
-- holds that month (the step's, or the one before or after while
-- accepted), else to the step's; the reservation is returned from the
-- same month. A customer
-- the family does not have, with no reservation, is charged nothing, as
-- its events are not; anything else reported is charged, beyond the
-- reservation too (the overage: the use happened).
local cday, cat, pk, uk, back = day, ARGV[13], KEYS[3], KEYS[4], false
if hday then
  local hm = string.sub(hday, 1, 6)
  if hm == month then
    cday, cat, back = hday, hat, true
  elseif hm == ARGV[16] then
    cday, cat, pk, uk, back = hday, hat, KEYS[8], KEYS[9], true
  elseif hm == ARGV[17] then
    cday, cat, pk, uk, back = hday, hat, KEYS[10], KEYS[11], true
  end
end
local charged = 0
if held or member then charged = usedNow end
-- The overage: what the charged period had not reserved for the grant.
local overage = charged
if back then overage = charged - hb end
if overage < 0 then overage = 0 end

local cdd = string.sub(cday, 7, 8)
local rdc = rmf .. ':' .. cdd
local cp = redis.call('HMGET', pk, 'used', 'topup', uf, df, 'q', 'r', rmf, rdc)
local ctotal = (tonumber(fam[1]) or 0) + (tonumber(cp[2]) or 0)
if ctotal > maxtotal then ctotal = maxtotal end
local cused = tonumber(cp[1]) or 0
local pw, pd = nil, nil -- the charged pool's writes: HSET pairs, HDEL fields
if back and hb > 0 then
  pw, pd = {}, {}
  local fs = {'r', rmf, rdc}
  for i = 1, 3 do
    local v = (tonumber(cp[5 + i]) or 0) - hb
    if v > 0 then
      pw[#pw + 1], pw[#pw + 2] = fs[i], string.format('%d', v)
    else
      pd[#pd + 1] = fs[i]
    end
  end
end
if charged > 0 then
  -- The member's month and the charged day, as apply.lua counts them.
  local cmonthly, cdaily = tonumber(cp[3]), 0
  local slot = cp[4]
  local today = slot and string.find(slot, cdd, 1, true) == 1
  local sd = nil
  if today then
    cdaily = tonumber(string.sub(slot, 4))
  else
    sd = slot and string.sub(slot, 1, 2)
    local old = redis.call('HMGET', uk, 'm', 'd:' .. cdd)
    cdaily = tonumber(old[2]) or 0
    if not cmonthly then cmonthly = tonumber(old[1]) end
  end
  cmonthly = cmonthly or 0
  cused, cmonthly, cdaily = cused + charged, cmonthly + charged, cdaily + charged
  local ds = string.format('%d', cdaily)
  pw = pw or {}
  local n = #pw
  pw[n + 1], pw[n + 2], pw[n + 3], pw[n + 4] = 'used', string.format('%d', cused), uf, string.format('%d', cmonthly)
  if today then
    pw[n + 5], pw[n + 6] = df, cdd .. ':' .. ds
  elseif sd and tonumber(cdd) < tonumber(sd) then
    redis.call('HSET', uk, 'd:' .. cdd, ds)
    redis.call('EXPIRE', uk, 'DPCS_MONTH_TTL')
  else
    pw[n + 5], pw[n + 6] = df, cdd .. ':' .. ds
    if sd then
      redis.call('HSET', uk, 'd:' .. sd, string.sub(slot, 4))
      redis.call('EXPIRE', uk, 'DPCS_MONTH_TTL')
    end
  end
end
-- Thresholds fire on used bytes: the charged month's, judged on every step
-- of a member (or one that charged), as apply.lua judges every event.
local crossed = ''
if (member or charged > 0) and ctotal > 0 then
  local q, total = cp[5], ctotal
  local rem = ctotal - cused
  if rem < 0 then rem = 0 end
  --[[crossings.lua]]
end
if pw and #pw > 0 then
  redis.call('HSET', pk, unpack(pw))
  if cp[1] == false and cp[2] == false then redis.call('EXPIRE', pk, 'DPCS_MONTH_TTL') end
end
if pd and #pd > 0 then redis.call('HDEL', pk, unpack(pd)) end

-- The step's month and day after the charge.
local rdf = rmf .. ':' .. dd
local sp = redis.call('HMGET', KEYS[3], 'used', 'topup', uf, df, 'r', rmf, rdf)
local used = tonumber(sp[1]) or 0
local total = (tonumber(fam[1]) or 0) + (tonumber(sp[2]) or 0)
if total > maxtotal then total = maxtotal end
local monthly, daily = tonumber(sp[3]), 0
if sp[4] and string.find(sp[4], dd, 1, true) == 1 then
  daily = tonumber(string.sub(sp[4], 4))
else
  local old = redis.call('HMGET', KEYS[4], 'm', 'd:' .. dd)
  daily = tonumber(old[2]) or 0
  if not monthly then monthly = tonumber(old[1]) end
end
monthly = monthly or 0
-- What the other grants reserve (this grant's reservation was returned).
local rp, rm, rd = tonumber(sp[5]) or 0, tonumber(sp[6]) or 0, tonumber(sp[7]) or 0

local decision, rule, throttle = nil, '', '0'
local granted, final, vu, reclaim = 0, false, 0, ''
if release then
  decision = 'ALLOWED'
  -- The use of a budgeted app counts (one more HGET for a release that
  -- charges something).
  if charged > 0 and member then
    local bcc = redis.call('HGET', ck, '#c')
    if bcc and string.byte(bcc, 2) >= 50 then
      local x = redis.call('HMGET', ck, 'LIMIT:DATA:APP:' .. app, 'LIMIT:DATA:CATEGORY:' .. category)
      --[[budget.lua]]
    end
  end
else
  --[[policy.lua]]
  -- Daily budgets, read only when #c's flag says the member has one: the
  -- use counted, then (unless a block or EXCEPT:APP:<app>) what the app's
  -- and its category's budgets leave (bl, its budget's key br; the app's
  -- on a tie), nothing left blocking (policy.Constraints.BudgetLeft).
  local bl, br = nil, nil
  if cc and string.byte(cc, 2) >= 50 then
    local x = redis.call('HMGET', ck, 'LIMIT:DATA:APP:' .. app, 'LIMIT:DATA:CATEGORY:' .. category, 'EXCEPT:APP:' .. app)
    --[[budget.lua]]
    stamp = stamp or tonumber(day) * 10000 + math.floor(now / 60) * 100 + now % 60
    if not decision and (ab or cb) and (app == '' or not x[3] or stamp >= tonumber(x[3])) then
      if ab then
        bl, br = tonumber(ab) - au, 'LIMIT:DATA:APP:' .. app
        if bl < 0 then bl = 0 end
      end
      if cb then
        local l = tonumber(cb) - cu
        if l < 0 then l = 0 end
        if not bl or l < bl then bl, br = l, 'LIMIT:DATA:CATEGORY:' .. category end
      end
      if bl <= 0 then decision, rule = 'BLOCKED_APP_LIMIT', br end
    end
  end
  if decision then
    final = true
  else
    --[[limits.lua]]
    -- policy.SizeGrant: the smallest of the request, the fair share and
    -- what the limits and the pool leave net of the other reservations
    -- (soft); final when the headroom of used bytes alone (hard) is below
    -- the minimum.
    local want = tonumber(ARGV[3])
    if want <= 0 then want = DPCS_GRANT_DEFAULT end
    if want > DPCS_GRANT_MAX then want = DPCS_GRANT_MAX end
    local open = redis.call('HLEN', KEYS[7])
    if not held then open = open + 1 end
    local hp = total - used
    local share = 0
    if hp > 0 then share = math.floor(hp / open) end
    local g = want
    if share < g then g = share end
    local frule = nil
    if bl then
      if bl < g then g = bl end
      if bl < DPCS_GRANT_MIN then frule = br end
    end
    local hd, sdd, hm, smm
    if dl then
      hd = dl - daily
      sdd = hd - rd
      if sdd < g then g = sdd end
      if not frule and hd < DPCS_GRANT_MIN then frule = 'LIMIT:DATA:DAILY' end
    end
    if ml then
      hm = ml - monthly
      smm = hm - rm
      if smm < g then g = smm end
      if not frule and hm < DPCS_GRANT_MIN then frule = 'LIMIT:DATA:MONTHLY' end
    end
    local prule = 'POOL'
    if not fam[1] then prule = 'POOL:UNPROVISIONED' end
    if not frule and hp < DPCS_GRANT_MIN then frule = prule end
    -- Crowded out: the pool the others reserve cuts the grant below what
    -- it would get (cap); the grants holding more than the fair share are
    -- named, for the network to ask them back.
    local cap = g
    local spool = hp - rp
    if spool < g then g = spool end
    if g < 0 then g = 0 end
    final = frule ~= nil
    if g > 0 then
      decision, rule, granted = 'ALLOWED', frule or '', g
      if c then
        throttle = string.format('%d', tonumber(c['THROTTLE:SPEED']) or 0)
      else
        throttle = string.sub(cc, p2 + 1)
        if throttle == '' then throttle = '0' end
      end
    elseif dl and hd <= 0 then decision, rule = 'BLOCKED_LIMIT_DAILY', 'LIMIT:DATA:DAILY'
    elseif ml and hm <= 0 then decision, rule = 'BLOCKED_LIMIT_MONTHLY', 'LIMIT:DATA:MONTHLY'
    elseif hp <= 0 then decision, rule = 'BLOCKED_FAMILY_QUOTA', prule
    elseif dl and sdd <= 0 then decision, rule = 'BLOCKED_LIMIT_DAILY', 'LIMIT:DATA:DAILY'
    elseif ml and smm <= 0 then decision, rule = 'BLOCKED_LIMIT_MONTHLY', 'LIMIT:DATA:MONTHLY'
    else decision, rule = 'BLOCKED_FAMILY_QUOTA', prule end
    if cap > 0 and spool < cap then
      local all = redis.call('HGETALL', KEYS[7])
      local names = {}
      for i = 1, #all, 2 do
        local f, v = all[i], all[i + 1]
        local a = string.find(v, '|', 1, true)
        if f ~= gf and tonumber(string.sub(v, 1, a - 1)) > share and string.sub(v, a + 1, a + 6) == month then
          names[#names + 1] = string.sub(f, string.find(f, '|', 1, true) + 1)
        end
      end
      reclaim = table.concat(names, ',')
    end
  end

  -- policy.NextChange: the first boundary that could change the answer:
  -- the day's end (ARGV[14] + the minutes left), unless BLOCK:ACCESS the
  -- app's exception's end and, unless the app is always allowed, every
  -- window's start and end and the time exception's end later today; the
  -- zone's offset change (ARGV[15]) if sooner.
  local best = 1440
  if not ((c and c['BLOCK:ACCESS'] == '1') or (cc and string.byte(cc, 1) == 49)) then
    local xt, xa, aa, ac
    if c then
      xt, xa, aa, ac = c['EXCEPT:TIME'], c['EXCEPT:APP:' .. app], c['ALLOW:APP:' .. app], c['ALLOW:CATEGORY:' .. category]
    else
      local x = redis.call('HMGET', ck, 'EXCEPT:TIME', 'EXCEPT:APP:' .. app, 'ALLOW:APP:' .. app, 'ALLOW:CATEGORY:' .. category)
      xt, xa, aa, ac = x[1], x[2], x[3], x[4]
    end
    local ends = {}
    if app ~= '' and xa then ends[1] = xa end
    if not ((app ~= '' and aa == '1') or (category ~= '' and ac == '1')) then
      if xt then ends[#ends + 1] = xt end
      local prev = (wd + 5) % 7 + 1
      local pos, n = 1, #windows
      while pos < n do
        local a, b, x, y = string.byte(windows, pos, pos + 3)
        local s, e = (a - 48) * 40 + b - 48, (x - 48) * 40 + y - 48
        local onwd = string.byte(windows, pos + 3 + wd) == 49
        if s < e then
          if onwd then
            if s > now and s < best then best = s end
            if e > now and e < best then best = e end
          end
        elseif s > e then
          if string.byte(windows, pos + 3 + prev) == 49 and e > now and e < best then best = e end
          if onwd and s > now and s < best then best = s end
        end
        pos = string.find(windows, ' ', pos + 11, true) + 1
      end
    end
    for _, st in ipairs(ends) do
      if string.sub(st, 1, 8) == day then
        local m = tonumber(string.sub(st, 9, 10)) * 60 + tonumber(string.sub(st, 11, 12))
        if m > now and m < best then best = m end
      end
    end
  end
  vu = tonumber(ARGV[14]) + (best - now) * 60
  local zc = tonumber(ARGV[15])
  if zc > 0 and zc < vu then vu = zc end
end

-- The new reservation: the record (kept while the session may ask again:
-- units granted, or none but not final) and what it adds to the step's
-- month, the member's month and day.
if granted > 0 or not (release or final) then
  redis.call('HSET', KEYS[7], gf, string.format('%d', granted) .. '|' .. day .. '|' .. ARGV[13] .. '|' .. ARGV[10])
elseif held then
  redis.call('HDEL', KEYS[7], gf)
end
if granted > 0 then
  rp = rp + granted
  redis.call('HSET', KEYS[3], 'r', string.format('%d', rp), rmf, string.format('%d', rm + granted),
    rdf, string.format('%d', rd + granted))
  if sp[1] == false and sp[2] == false then redis.call('EXPIRE', KEYS[3], 'DPCS_MONTH_TTL') end
end

local rem = total - used
if rem < 0 then rem = 0 end
local fl = '0'
if final then fl = '1' end
local result = 'G|' .. decision .. '|' .. string.format('%d', granted) .. '|' .. fl .. '|' ..
  string.format('%d|', charged) .. cat .. '|' .. string.format('%d|%d|%d|%d|%d|%d|%d|', overage, rem, total, rp, daily, monthly, vu) ..
  throttle .. '|' .. crossed .. '|' .. rule .. '|' .. hstep .. '|' .. reclaim
if bucket[2] then
  redis.call('HSET', KEYS[5], ARGV[10], result)
else
  redis.call('HSET', KEYS[5], ARGV[10], result, '', '1')
  redis.call('EXPIRE', KEYS[5], 'DPCS_BUCKET_TTL')
end
return {0, result}
