-- DPCS quota engine: judge one usage event atomically.
-- Dedupe -> membership -> BLOCK:ACCESS -> app/category blocks -> time windows ->
-- DAILY then MONTHLY limit -> family pool -> deduct -> threshold crossings.
-- Semantics are those of policy.Evaluate; quota's property tests hold them equal.
-- Byte counts stay below 2^46 (policy.MaxBytes) and the pool total is bounded
-- by it, so remaining * 100 is exact; numbers are written as integers (%d).
--
-- KEYS[1] family:{f}                               hash  plan, thr, g, m:<cid> (members)
-- KEYS[2] family:{f}:customer:{c}:constraints      hash  constraint key -> value
-- KEYS[3] family:{f}:pool:{YYYYMM}                 hash  used, topup, a:<pct> (fired alerts),
--                                                        n:<pct> (times fired this month)
-- KEYS[4] family:{f}:customer:{c}:usage:{YYYYMM}   hash  m (month), d:<DD> (day)
-- KEYS[5] family:{f}:evt:<b>                       hash  eventId -> stored result (dedupe),
-- KEYS[6] family:{f}:evt:<b-1>                           by arrival: b = now / window
-- ARGV: 1 customerId, 2 bytes, 3 appId, 4 category, 5 minute of day, 6 ISO weekday,
--       7 day of month "DD", 8 eventId, 9 dedupe bucket ttl s, 10 month ttl s,
--       11 default thresholds "50,30,10", 12 max pool total, 13 state generation
--       ("" = unchecked)
-- Returns {duplicate 0|1, "decision|remaining|total|daily|monthly|throttle|crossed|rule"},
-- crossed being "pct:arm,…" (arm: the how-manyth time pct fired this month), or
-- {2, generation} without changing anything when the family was restored by
-- another state generation than ARGV[13] (a rebuild is running or done).

local stored = redis.call('HGET', KEYS[5], ARGV[8]) or redis.call('HGET', KEYS[6], ARGV[8])
if stored then
  return {1, stored}
end

local bytes = tonumber(ARGV[2])
local app, category = ARGV[3], ARGV[4]
local now, wd = tonumber(ARGV[5]), tonumber(ARGV[6])
local dayfield = 'd:' .. ARGV[7]
local month_ttl = tonumber(ARGV[10])

local fam = redis.call('HMGET', KEYS[1], 'plan', 'thr', 'm:' .. ARGV[1], 'g')
if ARGV[13] ~= '' and fam[4] and fam[4] ~= ARGV[13] then
  return {2, fam[4]}
end
local provisioned = fam[1] ~= false
local thr = fam[2]
if thr == false then thr = ARGV[11] end
local pcts = {}
local poolfields = {'used', 'topup'}
for p in string.gmatch(thr, '%d+') do
  pcts[#pcts + 1] = p
  poolfields[#poolfields + 1] = 'a:' .. p
end
local pool = redis.call('HMGET', KEYS[3], unpack(poolfields))
local used = tonumber(pool[1]) or 0
-- A plan raised after a month's top-ups can leave an old month above the
-- bound; the bound wins, so every later number stays exact.
local total = math.min((tonumber(fam[1]) or 0) + (tonumber(pool[2]) or 0), tonumber(ARGV[12]))
local usage = redis.call('HMGET', KEYS[4], 'm', dayfield)
local monthly = tonumber(usage[1]) or 0
local daily = tonumber(usage[2]) or 0

local function remaining()
  local r = total - used
  if r < 0 then return 0 end
  return r
end

-- HHMM -> minutes of the day, nil when malformed.
local function hhmm(s)
  if type(s) ~= 'string' or not string.match(s, '^%d%d%d%d$') then return nil end
  local h, m = tonumber(string.sub(s, 1, 2)), tonumber(string.sub(s, 3, 4))
  if h > 23 or m > 59 then return nil end
  return h * 60 + m
end

local DAY = {MON = 1, TUE = 2, WED = 3, THU = 4, FRI = 5, SAT = 6, SUN = 7}

-- "MON-FRI" / "SAT,SUN" / "FRI-MON" -> set of ISO weekdays, nil when malformed.
local function dayset(spec)
  local set, any = {}, false
  for item in string.gmatch(spec, '[^,]+') do
    local a, b = string.match(item, '^(%u+)%-(%u+)$')
    if not a then a, b = item, item end
    local i, j = DAY[a], DAY[b]
    if not i or not j then return nil end
    while true do
      set[i] = true
      if i == j then break end
      i = i % 7 + 1
    end
    any = true
  end
  if not any then return nil end
  return set
end

-- Is now inside [s, e) on an allowed day? Wrapped windows belong to their start day.
local function inside(s, e, set)
  local prev = (wd + 5) % 7 + 1
  local function on(d) return set == nil or set[d] == true end
  if s == e then return on(wd) end
  if s < e then return on(wd) and now >= s and now < e end
  return (now >= s and on(wd)) or (now < e and on(prev))
end

-- Byte-wise a < b (Lua's < follows the server's collation locale).
local function less(a, b)
  local n = math.min(#a, #b)
  for i = 1, n do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return #a < #b
end

local decision, rule, throttle = nil, '', 0

if fam[3] ~= '1' then
  decision, rule = 'BLOCKED_NOT_MEMBER', 'MEMBERSHIP'
else
  local flat = redis.call('HGETALL', KEYS[2])
  local c = {}
  for i = 1, #flat, 2 do c[flat[i]] = flat[i + 1] end

  if c['BLOCK:ACCESS'] == '1' then
    decision, rule = 'BLOCKED_ACCESS', 'BLOCK:ACCESS'
  elseif app ~= '' and c['BLOCK:APP:' .. app] == '1' then
    decision, rule = 'BLOCKED_APP', 'BLOCK:APP:' .. app
  elseif category ~= '' and c['BLOCK:CATEGORY:' .. category] == '1' then
    decision, rule = 'BLOCKED_APP', 'BLOCK:CATEGORY:' .. category
  end

  if not decision and #flat > 0 then
    local s, e = hhmm(c['BLOCK:TIME:START']), hhmm(c['BLOCK:TIME:END'])
    if s and e and inside(s, e, nil) then
      decision, rule = 'BLOCKED_TIME', 'BLOCK:TIME:START'
    else
      local best = nil
      for k, v in pairs(c) do
        if string.sub(k, 1, 11) == 'BLOCK:TIME:' and k ~= 'BLOCK:TIME:START' and k ~= 'BLOCK:TIME:END' then
          local a, b, spec = string.match(v, '^(%d%d%d%d)%-(%d%d%d%d)@(.+)$')
          if not a then a, b = string.match(v, '^(%d%d%d%d)%-(%d%d%d%d)$') end
          local ws, we = hhmm(a), hhmm(b)
          local set, ok = nil, true
          if spec then
            set = dayset(spec)
            ok = set ~= nil
          end
          if ws and we and ok and inside(ws, we, set) and (best == nil or less(k, best)) then
            best = k
          end
        end
      end
      if best then decision, rule = 'BLOCKED_TIME', best end
    end
  end

  if not decision then
    local dl, ml = tonumber(c['LIMIT:DATA:DAILY']), tonumber(c['LIMIT:DATA:MONTHLY'])
    if dl and daily + bytes > dl then
      decision, rule = 'BLOCKED_LIMIT_DAILY', 'LIMIT:DATA:DAILY'
    elseif ml and monthly + bytes > ml then
      decision, rule = 'BLOCKED_LIMIT_MONTHLY', 'LIMIT:DATA:MONTHLY'
    elseif remaining() < bytes then
      decision = 'BLOCKED_FAMILY_QUOTA'
      if provisioned then rule = 'POOL' else rule = 'POOL:UNPROVISIONED' end
    else
      decision = 'ALLOWED'
      throttle = tonumber(c['THROTTLE:SPEED']) or 0
    end
  end
end

if decision == 'ALLOWED' then
  -- TTLs are set when a period key is created; keys that exist have theirs.
  used = redis.call('HINCRBY', KEYS[3], 'used', bytes)
  if pool[1] == false and pool[2] == false then redis.call('EXPIRE', KEYS[3], month_ttl) end
  monthly = redis.call('HINCRBY', KEYS[4], 'm', bytes)
  daily = redis.call('HINCRBY', KEYS[4], dayfield, bytes)
  if usage[1] == false then redis.call('EXPIRE', KEYS[4], month_ttl) end
end

-- Crossings are judged on every event of a member, allowed or not, so a pool
-- that fell under a threshold by a plan cut is announced with the family's
-- next event even when every request is bigger than what is left.
local crossed = ''
if decision ~= 'BLOCKED_NOT_MEMBER' and total > 0 then
  local rem = remaining()
  local fired = {}
  for i, p in ipairs(pcts) do
    if pool[i + 2] == false and rem * 100 <= tonumber(p) * total then
      -- n:<pct> counts how often it fired this month (re-armed by top-ups).
      local arm = redis.call('HINCRBY', KEYS[3], 'n:' .. p, 1)
      fired[#fired + 1] = p .. ':' .. arm
      redis.call('HSET', KEYS[3], 'a:' .. p, '1')
    end
  end
  if #fired > 0 and pool[1] == false and pool[2] == false and decision ~= 'ALLOWED' then
    redis.call('EXPIRE', KEYS[3], month_ttl)
  end
  crossed = table.concat(fired, ',')
end

local function int(n) return string.format('%d', n) end
local result = table.concat({decision, int(remaining()), int(total), int(daily), int(monthly), int(throttle),
  crossed, rule}, '|')
redis.call('HSET', KEYS[5], ARGV[8], result)
-- A bucket lives two windows: an id judged in bucket b is found by any replay
-- arriving within the window (in bucket b or b+1).
redis.call('EXPIRE', KEYS[5], tonumber(ARGV[9]))
return {0, result}
